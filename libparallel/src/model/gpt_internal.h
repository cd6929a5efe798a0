/* The GPT model's internals: parameter views as tensors, activation buffers,
 * and the layer functions that parallel layouts replace. */
#ifndef STRATA_PAR_GPT_INTERNAL_H
#define STRATA_PAR_GPT_INTERNAL_H

#include <strata/par_gpt.h>
#include <strata/tensor.h>

struct tpl_mesh; /* tpl_internal.h (2D, 2.5D and 3D: over libcomm) */
struct tpl_acts;

#define GPT_ERRLEN 512
#define GPT_LN_EPS 1e-5f

typedef struct {
  tensor_t w, b;   /* parameter views */
  tensor_t dw, db; /* gradient views */
} gpt_param2_t;

typedef struct {
  gpt_param2_t ln1, qkv, proj, ln2, fc, fcproj;
} gpt_block_t;

/* A block's saved activations (rows = B*T). */
typedef struct {
  tensor_t ln1, ln1_mean, ln1_rstd; /* (B,T,h), (B,T) x2 */
  tensor_t qkv;                     /* (B,T,3h) */
  tensor_t atty;                    /* (B,T,h) attention output before the projection */
  tensor_t lse;                     /* (B,NH,T) softmax log-sum-exp */
  tensor_t res2;                    /* (B,T,h) residual after attention */
  tensor_t ln2, ln2_mean, ln2_rstd;
  tensor_t fch, fch_gelu;           /* (B,T,4h) */
} gpt_acts_t;

enum { INIT_NORMAL, INIT_ONES, INIT_ZEROS };

/* The activations of one microbatch in flight (par_gpt_set_slots): a
 * pipeline stage holds several, the model one. The model's fields of the
 * same names are those of the slot in use; gpt_use_slot swaps them. */
typedef struct {
  tensor_t act_store, ids_store;
  float *host_losses;
  int32_t *host_ids;
  tensor_t *x;
  gpt_acts_t *acts;
  int64_t cap_bt;
  int B, T, have_targets;
} gpt_slot_t;

typedef struct {
  int init;
  float std;
} view_init_t;

struct par_gpt {
  par_gpt_config_t cfg;
  view_init_t *inits; /* per view */
  par_gpt_hook_t hook; /* par_gpt_set_hook */
  float loss_scale;    /* par_gpt_set_loss_scale */
  void *hook_ctx;
  par_gpt_options_t opts;
  struct comm *tp;      /* tensor-parallel group (opts.tp), or NULL */
  int tp_rank, tp_size; /* 0 and 1 without one */
  int sp;               /* sequence parallelism (opts.seq_parallel with tp_size > 1) */
  struct comm *ring;    /* ring self-attention's sequence group (opts.ring), or NULL */
  int ring_rank, ring_size; /* 0 and 1 without one */
  int part;             /* partitioned activation checkpoints (opts.partition_activations with
                           recompute, tp_size > 1 and no sp): x[l] of a held block is this rank's
                           B T / t rows; xa, xb the whole ones in use */
  tensor_ctx_t *tc;
  int device;
  tensor_t params, grads; /* flat f32 */
  int nviews;
  par_gpt_view_t *views;
  char *names; /* storage of the view names */
  /* pipeline placement (opts.stages): blocks [chunk_lo[c], chunk_lo[c] + chunk_layers)
   * for each of the `interleave` chunks of this stage; held[l]: block l is one of them */
  int stages, stage, interleave, chunk_layers;
  unsigned char *held;
  int has_embed, has_head; /* the first block (embedding) / the last (head, loss) is held */
  gpt_slot_t *slots;       /* nslots; slot `cur` is in the fields below */
  int nslots, cur;
  int64_t g_cap;           /* tokens the gradient scratch (g_store) holds */
  tensor_t wte, wpe, dwte, dwpe;
  gpt_param2_t lnf;
  gpt_block_t *blocks;
  /* activations, sized for `cap_bt` rows */
  int64_t cap_bt;
  int B, T;             /* shape of the last forward */
  int have_targets;     /* the last forward kept what backward needs */
  tensor_t act_store;   /* one allocation holding everything below */
  tensor_t *x;          /* L+1 residual streams (B,T,h): x[0] embeddings, x[l+1] block outputs
                           (those of the held blocks) */
  gpt_acts_t *acts;     /* L sets (those of the held blocks), or with recompute 1 scratch set
                           in the shared scratch (g_store) */
  int scratch_layer;    /* with recompute: the block whose activations the scratch set holds (-1: none) */
  int scratch_slot;     /* and of which slot (the set is shared by the slots) */
  tensor_t lnf_out, lnf_mean, lnf_rstd, logits, losses, lse;
  int fused_head;           /* the head through tensor_classifier_xent (opts.head_chunk) */
  tensor_dtype_t act_dtype; /* of the activations and their gradients (opts.act_dtype) */
  int64_t head_chunk;       /* its rows per chunk (0: libtensor's default) */
  tensor_t logits_store;    /* fused head: the whole logits of forwards without targets (any slot) */
  tensor_t ids_store;       /* 2 * cap_bt i32 on the device: tokens, then targets */
  tensor_t tokens, targets; /* (B,T) views into ids_store */
  tensor_t tmp;             /* (B,T,h); sequence parallel: this rank's (1,R/t,h) */
  tensor_t xa, xb;          /* partitioned checkpoints: (B,T,h) block inputs and outputs in use */
  tensor_t gath, dfull;     /* sequence parallel: (B,T,h) gathered layernorm outputs and gradients */
  tensor_t spg;             /* sequence parallel: 4 h token-partial layernorm gradients of a block */
  /* gradient scratch, reused by every block */
  tensor_t g_store;
  tensor_t dres, dln, dqkv, datty, dfch, dfch_gelu, dlogits;
  tensor_t hx, dhx; /* 16-bit activations, unfused head: ln_f's output and its gradient in f32 (R, C) */
  float *host_losses; /* R losses (tensor parallelism: then R lse, t R gathered lse) */
  int32_t *host_ids;
  /* 2D, 2.5D, 3D (opts.tp_mode; gpt_md.c): the mesh, each held block's
   * activations (one set with recompute), this rank's rows of the batch,
   * and the embedding's, head's and final layernorm's gradients of one
   * backward before they are summed over their replicas */
  struct tpl_mesh *md;
  struct tpl_acts *tacts;
  int64_t md_rows, md_row0;
  tensor_t md_embg;
  char err[GPT_ERRLEN];
};

/* Sums t over the tensor-parallel group, in place (Megatron's f in
 * backward, g in forward); this rank's place in the group. In tp_comm.c,
 * over libcomm (stubs in gpt.c under GPT_WITHOUT_COMM). */
int gpt_tp_allreduce(par_gpt_t *m, tensor_t *t); /* (in t's dtype) */
int gpt_tp_query(struct comm *tp, int *rank, int *size);
/* recv (t n values of dtype dt) = every rank's n values of send, in rank
 * order. The activations travel in their dtype (16 bits with 16-bit ones). */
int gpt_tp_allgather(par_gpt_t *m, void *recv, const void *send, size_t n, tensor_dtype_t dt);
/* recv (n values of dt) = the sum over the group of send's n-value block of this rank. */
int gpt_tp_reduce_scatter(par_gpt_t *m, void *recv, const void *send, size_t n, tensor_dtype_t dt);

/* The block's attention by ring self-attention over m->ring (ring.c,
 * through tp_comm.c; stubs in gpt.c under GPT_WITHOUT_COMM). */
int gpt_ring_forward(par_gpt_t *m, gpt_acts_t *a);
int gpt_ring_backward(par_gpt_t *m, gpt_acts_t *a);

/* Sizes the activation buffers of the slot in use for (B, T). */
int gpt_prepare(par_gpt_t *m, int B, int T);
/* Makes slot k the one in use (its buffers in the model's fields). */
void gpt_use_slot(par_gpt_t *m, int k);
int gpt_seterr(par_gpt_t *m, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Copies libtensor's message into the model's after a failed tensor call. */
int gpt_tensor_err(par_gpt_t *m, int code);

/* ---- layers (serial versions; parallel layouts provide their own) ---- */
int gpt_embed_forward(par_gpt_t *m, tensor_t *out, const tensor_t *ids);
int gpt_embed_backward(par_gpt_t *m, const tensor_t *dout, const tensor_t *ids);
int gpt_block_forward(par_gpt_t *m, int l, gpt_acts_t *a, const tensor_t *x, tensor_t *y);
int gpt_block_backward(par_gpt_t *m, int l, gpt_acts_t *a, const tensor_t *x);
int gpt_head_forward(par_gpt_t *m, const tensor_t *x, int with_loss, float *loss);
int gpt_head_backward(par_gpt_t *m, const tensor_t *x);

/* ---- 2D, 2.5D and 3D tensor parallelism (tp_md.c, over libcomm; stubs in
 * gpt.c under GPT_WITHOUT_COMM) ---- */
/* The mesh over m->tp for opts.tp_mode (after m->tc exists). */
int gpt_md_create(par_gpt_t *m);
void gpt_md_destroy(par_gpt_t *m);
/* The block of the whole tensor a view holds: block parameter i of
 * tpl_param_names, or -1 wte, -2 wpe, -3 a final layernorm vector; rows d0. */
void gpt_md_view(par_gpt_t *m, par_gpt_view_t *v, int which, int64_t d0);
int gpt_md_prepare(par_gpt_t *m, int B, int T);
void gpt_md_free_acts(par_gpt_t *m);
int gpt_md_embed_forward(par_gpt_t *m, tensor_t *out);
int gpt_md_embed_backward(par_gpt_t *m);
int gpt_md_block_forward(par_gpt_t *m, int l, int set, const tensor_t *x, tensor_t *y);
int gpt_md_block_backward(par_gpt_t *m, int l, int set, const tensor_t *x);
int gpt_md_head_forward(par_gpt_t *m, const tensor_t *x, int with_loss, float *loss);
int gpt_md_head_backward(par_gpt_t *m, const tensor_t *x);

#endif
