/* The engine's internals, shared by engine.c (create, step, evaluate),
 * state.c (the sharded training state, the model's hooks, the
 * communication, the optimizer state's offload), pipeline.c (pipeline
 * stages), engine_ckpt.c (save, load) and train.c (the loop). */
#ifndef STRATA_PAR_ENGINE_INTERNAL_H
#define STRATA_PAR_ENGINE_INTERNAL_H

#include <signal.h>

#include <strata/comm.h>
#include <strata/offload.h>
#include <strata/optim.h>
#include <strata/par_pipe.h>
#include <strata/parallel.h>
#include <strata/tensor.h>

/* The arrays of a region liboffload may hold: the fp32 masters (mixed
 * precision), m, v (the optimizer offload's), and the chunk policy's
 * parameters and gradients; e->off_ids[OFF_ARRAYS * r + k]. */
enum { OFF_MASTER, OFF_M, OFF_V, OFF_PARAMS, OFF_GRADS, OFF_ARRAYS };

/* Shards start at multiples of this many elements (64 bytes). */
#define ENGINE_ALIGN 16

/* A region of the model (par_gpt_region: the embeddings, a block, the final
 * layernorm), sharded FSDP-style: padded to dp * shard elements, rank r
 * holding [r * shard, (r + 1) * shard) of it. */
typedef struct {
  size_t off, n;            /* its range in the model's flat layout */
  size_t shard;             /* elements per rank */
  size_t foff;              /* its start in the full (padded) buffers */
  size_t soff;              /* its start in this rank's shard buffers */
  int first_view, nviews;
  tensor_t gathered;        /* ZeRO-3: its parameters while gathered (data NULL: released) */
  tensor_t wp, wg;          /* mixed precision: fp32 working copies of its parameters and
                               gradients while the model uses them */
  tensor_t grads;           /* ZeRO-2/3: this pass's gradients (data NULL: released) */
  comm_request_t *gather;   /* ZeRO-3: the gather in flight */
  comm_request_t *reduce;   /* the reduction of its gradients in flight */
  int reduce_into_scratch;  /* ZeRO-2/3: the reduction lands in scratch, to be added */
  int final;                /* ZeRO-2/3: the reduction in flight is the step's last microbatch's */
  int bucket;               /* ZeRO-0: its bucket */
} region_t;

/* One piece of the optimizer's work: this rank's part of a view. */
typedef struct {
  int view;
  size_t a, n; /* elements [a, a + n) of the view */
} piece_t;

struct par_engine {
  par_gpt_config_t mc;
  par_layout_t layout;
  double node_bytes; /* the node's memory its ranks share, as the fit check saw it before allocating (0: unknown) */
  par_engine_options_t opts;
  par_gpt_t *model;
  tensor_ctx_t *tc; /* the model's: one memory accountant for everything */
  int device;
  comm_t *comm;     /* the data-parallel group */
  int rank, size;
  comm_t *tpc;      /* the tensor-parallel group (NULL: tp = 1): consecutive ranks of world */
  int tp_rank, tp_size;
  MPI_Comm world;   /* every rank of the run (borrowed): checkpoints, the memory check */
  int wrank, wsize;
  int sp;           /* ring self-attention's sequence group size (layout.sp; 1: none) */
  comm_t *ringc;    /* that group: sp consecutive ranks sharing their sequences (NULL: sp = 1) */
  comm_t *wc;       /* every rank, when tp > 1: the step's control word, agreeing on failures
                       (ctl_comm: else the data-parallel group, which is every rank) */
  /* Pipeline parallelism (layout.pp > 1): this rank is stage `stage` of
   * `pp`, following `pipe` (pipeline.c). */
  int pp, stage, interleave;
  comm_t *ppc;      /* the pipeline group: the same data and tensor coordinates, rank = stage */
  comm_t *embc;     /* the first and last stages of it (the tied embedding's gradient sum); else NULL */
  par_pipe_t *pipe;
  int nslots;       /* microbatches in flight on this stage, at most (the model's activation slots) */
  int *slot_of;     /* per microbatch: its slot this step (-1 before it takes one), then
                       per slot: 1 while taken */
  int32_t *in_all, *tg_all;  /* the step's microbatches of inputs and targets */
  void **gsend;              /* per slot x chunk: the input gradient being sent back */
  comm_request_t **fsend, **bsend; /* per slot x chunk: the sends in flight */
  unsigned char *unsent;     /* per slot x chunk: 1 the output, 2 the input gradient, computed and
                                waiting for its round (par_pipe_rounds) to be sent */
  /* Every message received lands in one of `nland` buffers (posted in the
   * round that produced it, par_pipe_rounds, while the model's own buffers
   * may still be in use) and is copied into the model by its operation. */
  int nland;
  void **land;               /* [nland] boundary messages, allocated on first use */
  comm_request_t **land_req; /* [nland] */
  int *land_of;              /* per (kind, microbatch, chunk): its buffer, -1; then per buffer: 1 while taken */
  void *dry;                 /* a failed rank's stand-in for the boundary buffers */
  size_t boundary;           /* elements of one boundary message (this rank's tokens x h) */
  tensor_dtype_t bdt;        /* their dtype: the model's activations' (f32, or bf16 / f16 on a device) */
  comm_dtype_t bcdt;         /* the same for libcomm */
  int loss_ranks;            /* ranks whose loss the step's mean counts (the last stage's) */
  double t_busy;             /* this step: seconds spent in forwards and backwards */
  int zero;         /* ZeRO stage */
  int accum;        /* microbatches per step: global_batch / (dp * microbatch) */
  int seq;          /* tokens per sample */
  /* state */
  int nregions;
  region_t *regions;
  size_t nfull, nshard; /* elements of the full (padded) and shard buffers */
  tensor_t full_p, full_g;   /* ZeRO 0-2 parameters; ZeRO 0-1 gradients (padded layout) */
  tensor_t shard_p, shard_g; /* ZeRO-3 parameters; ZeRO 2-3 gradients (this rank's) */
  tensor_t m, v;             /* optimizer state: full (ZeRO-0) or this rank's shard */
  /* ZeRO-Offload's static policy (layout.offload_optimizer = PAR_TIER_CPU):
   * the fp32 masters and m and v live in liboffload's host tier, pinned
   * there for the engine's life, and the optimizer updates them on the
   * CPU; the parameters and gradients stay on the device. */
  offload_t *off;
  /* ZeRO-Infinity's optimizer state on NVMe (layout.offload_optimizer =
   * PAR_TIER_NVME): each region's part of the masters, m and v is a tensor
   * of liboffload (NVMe tier, a few host chunks), on the host only while
   * state_resident holds the region; res[3 r + k] (k: masters, m, v) point
   * at them then, and e->master, e->m, e->v hold nothing. */
  int nvme;
  /* ZeRO-Offload on a device (host_opt: layout.offload_optimizer with
   * device >= 0): the fp32 masters (fp32 runs too: the device's parameters
   * cannot be the CPU's to update), m and v in `off`'s host tier (pinned),
   * the update by liboptim's CPU optimizer region by region (as under
   * ZeRO-Infinity); this rank's gradients (its optimizer layout, in the
   * parameters' dtype) copied to the pinned `gstage` on libtensor's copy
   * stream (ZeRO 2-3: each region's as soon as its reduction finished, while
   * backward goes on), widened per region into g32r (mixed); the update
   * writes the 16-bit parameters into the region's place in gstage (its
   * gradients are consumed by then) and they go back to the device on the
   * copy stream while the next region updates (fp32: the masters go). */
  int host_opt;
  int opt_host;      /* the optimizer's arrays on the host while the model is on a device: host_opt, or
                        the chunk policy on a device (its update runs on the host, chunks_resident) */
  offload_t *stage_off; /* host_opt: gstage's manager (a host tier of one pinned chunk) */
  tensor_t gstage;   /* host_opt: n_opt elements of wdt on the host */
  tensor_t g32r;     /* host_opt, mixed: one region's fp32 gradients on the host */
  int g32r_region;   /* the region they are (-1: none) */
  int g32_live;      /* host_opt: gstage holds this step's gradients */
  int pushing;       /* host_opt: state_resident(r, 0) sends region r's updated parameters to the device */
  char *d2h;         /* host_opt: per region, its gradients' copy is queued */
  int *off_ids;     /* per region OFF_ARRAYS tensors of liboffload (-1: none) */
  float **res;      /* and where each is while resident (NULL otherwise) */
  /* PatrickStar's chunk policy (opts.offload_chunks; chunks.c): every
   * region's parameters and gradients are tensors of `off` too, on the
   * device while the passes use them; full_p and full_g hold nothing. */
  int chunks;
  int reuse;             /* a region's 16-bit parameters' place receives its gradients */
  int grads_live;        /* the step's gradients are there for the update */
  int updated;           /* this step updated the parameters */
  int nchunks;
  size_t chunk_size;
  int *gchunk;           /* per region: the chunk of its gradients */
  int *chunk_left;       /* per chunk: regions whose gradients backward has yet to finish */
  comm_request_t **chunk_req; /* per chunk: its allreduce in flight */
  int g32_id;            /* mixed: the CPU optimizer's fp32 gradients in the host tier (-1: none):
                            the chunk policy's one region's, the static policy's all */
  float *g32_res;        /* while resident */
  size_t dev_peak;       /* the accountant's bytes and the chunks on the device, at most */
  long stalls;           /* accesses that waited for reductions to unpin the device's chunks */
  /* With ZeRO stage 3 the chunks are sharded over the data-parallel ranks
   * (PatrickStar's distributed training): parameter chunk c belongs to rank
   * c % dp, which alone keeps it and its regions' optimizer state between
   * uses; groups of dp consecutive chunks are all-gathered before a pass
   * uses them and their gradient chunks reduce-scattered once backward has
   * finished them. */
  int sharded;
  int *pchunk;           /* per region: the chunk of its parameters */
  int nparams_chunks;    /* parameter chunks (the gradients' are packed alike: same sizes, same order) */
  int ngroups;
  int *gathered;         /* per group: its other ranks' chunks are here for this pass */
  int *group_left;       /* per group: regions whose DONE this pass has yet to see */
  int *group_grads;      /* per group: regions whose gradients backward has yet to finish */
  /* Mixed precision (layout.precision bf16 or fp16): the parameters and
   * gradients above, and the pass's buffers, hold 16-bit values; the model
   * computes in fp32 on working copies of one region at a time; the
   * optimizer updates fp32 masters, laid out as m and v, and writes the
   * 16-bit copy in the same pass. */
  int mixed;
  tensor_dtype_t wdt;   /* dtype of parameters and gradients: f32, bf16 or f16 */
  comm_dtype_t cdt;     /* the same, for libcomm */
  tensor_t master;      /* fp32 masters (mixed) */
  tensor_t g32;         /* fp32 gradients of the update, laid out as m (mixed; taken per step) */
  optim_scaler *scaler; /* fp16: the dynamic loss scale */
  float scaler_min;     /* its floor */
  int state_arrays;          /* par_optim_state_arrays: bit 0 m, bit 1 v */
  size_t state_bytes[3];     /* persistent bytes: parameters, gradients, optimizer state */
  size_t buf_bytes, buf_peak; /* the pass's transient buffers (take/give_back in state.c) */
  /* buckets (ZeRO-0): regions [lo, hi], posted when region lo's gradients are done */
  int nbuckets;
  int *bucket_lo, *bucket_hi;
  comm_request_t **bucket_req;
  size_t bucket_bytes;
  int reducing;    /* this microbatch is the last: post reductions (ZeRO 0-1) */
  int microbatch;  /* its index within the step */
  int events;      /* hook events of this microbatch so far (state_replay resumes there) */
  /* optimizer */
  optim *opt;
  char optim_name[16];
  double clip;
  int groups[2];
  int npieces;
  piece_t *pieces;
  optim_tensor *tens; /* one per piece */
  double *sq, *vsq;   /* per piece, per view (2 per view for LAMB/LARS) */
  double *trust;      /* per view: LAMB's/LARS' trust ratio in the last update (NaN: not known here) */
  double base_lr;     /* the configuration's peak rate; par_engine_set_batch scales it */
  int32_t *in, *tg;   /* one microbatch of inputs and targets */
  char model_desc[256], optim_desc[512], layout_desc[224];
  double loss0; /* the loss of the run's first step (NaN before it; kept in checkpoints) */
  char ckpt_optim[512], ckpt_data[256]; /* the loaded checkpoint's optimizer and data descriptions */
  int64_t *ranges; /* checkpoints: a view's ranges in the whole tensor (2 x (most rows + 3)) */
  const volatile sig_atomic_t *stop_flag; /* par_engine_watch_stop */
  int pending_rc;                         /* engine_defer_error: joins the next step */
  char pending_msg[1024];
  int hook_rc;        /* the first failure inside a hook */
  /* when the step's last backward finished, its first reduction was posted
   * and first seen complete (par_step_t reports them) */
  double t_backward_end, t_first_post, t_first_done, t_inflight;
  char err[1536];
  int err_all; /* the last error was returned by every rank */
};

/* The group that agrees on the step's outcome: every rank of the run. */
static inline comm_t *ctl_comm(const par_engine_t *e) { return e->wc ? e->wc : e->comm; }

/* Sets the engine's error (all: every rank returns it) and returns code. */
int engine_fail(par_engine_t *e, int all, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Monotonic seconds. */
double engine_now(void);
/* Every rank leaves with the status of the lowest failing rank (see engine.c). */
int engine_agree(par_engine_t *e, int rc);
/* An error of this rank outside a step (rank 0's metrics file) that the
 * next step's reduction makes every rank's. */
void engine_defer_error(par_engine_t *e, int rc, const char *msg);

/* ---- state.c ---- */
/* dst[doff, doff + n) = src[soff, soff + n), converting between fp32 and
 * 16-bit as their dtypes say; state_accumulate adds instead (in fp32,
 * rounded once). */
int state_convert(par_engine_t *e, const tensor_t *dst, size_t doff, const tensor_t *src, size_t soff, size_t n);
int state_accumulate(par_engine_t *e, const tensor_t *dst, size_t doff, const tensor_t *src, size_t soff, size_t n);
/* A pass's transient buffer of n elements of dt on the device (counted in buf_bytes), and back. */
int state_take(par_engine_t *e, tensor_t *t, tensor_dtype_t dt, size_t n, const char *what);
void state_give_back(par_engine_t *e, tensor_t *t);
/* Lays out regions and shards, allocates the state, initialises the
 * parameters (from opts.seed, or opts.init), binds what stays bound and
 * sets the model's hook. */
int state_create(par_engine_t *e);
void state_destroy(par_engine_t *e);
/* Zeroes the gradients a step accumulates into. */
int state_zero_grads(par_engine_t *e);
/* Waits for every reduction in flight; finishes the shard gradients
 * (ZeRO 1: moves each region's reduced part into place). */
int state_finish_reductions(par_engine_t *e);
/* ZeRO-Offload on a device: waits for the copies between the device and
 * the host in flight (libtensor's copy stream). */
int state_copies_wait(par_engine_t *e);
/* After the update: ZeRO 1-2 gather the updated shards into the full parameters. */
int state_gather_updates(par_engine_t *e);
/* Mixed precision: the 16-bit parameters from the fp32 masters (each rank
 * rounds its part; stages 1-2 gather them). */
int state_sync_lowp(par_engine_t *e);
/* Mixed precision: takes the step's fp32 gradients (g32) from the 16-bit
 * ones this rank updates from, and points the optimizer's tensors at them;
 * state_drop_g32 gives them back. */
int state_take_g32(par_engine_t *e);
void state_drop_g32(par_engine_t *e);
/* ZeRO-Infinity: brings region r's optimizer arrays to the host (on) or
 * lets them go back (off); ZeRO-Offload on a device: region r's gradients
 * widened to fp32 on the host (on), its updated parameters sent to the
 * device (off, while e->pushing); no-op without either. */
int state_resident(par_engine_t *e, int r, int on);
/* The region of piece i. */
int state_piece_region(const par_engine_t *e, int i);
/* The optimizer's pieces over this rank's state. */
int state_pieces(par_engine_t *e);
/* Pointers of piece i into the parameters the optimizer updates (the
 * masters under mixed precision), its gradients (g32 then; NULL outside a
 * step), m and v; *lowp (may be NULL) the 16-bit parameters (NULL in fp32). */
void state_piece_ptrs(par_engine_t *e, int i, float **p, float **g, float **m, float **v, void **lowp);
/* The flat layout element of the full buffers / of the shard buffers. */
float *state_full_params(par_engine_t *e);
/* Releases what a pass left gathered (ZeRO-3) after an error. */
void state_release_all(par_engine_t *e);
/* One hook event (what the model's hook does), and the events of a pass
 * from the from-th on (a rank whose microbatch failed plays the rest, so
 * that it posts the collectives the others post). */
int state_event(par_engine_t *e, par_gpt_event_t ev, int r, int backward);
int state_replay(par_engine_t *e, int from, int with_backward);

/* Replays the backward events of blocks [l0, l1) from the from-th on (a
 * pipeline stage whose microbatch failed). */
int state_replay_backward(par_engine_t *e, int from, int l0, int l1);
/* Whether the model's region r is one this rank holds (its pipeline stage's). */
int state_region_held(par_engine_t *e, int r);
/* Whether view i is the last stage's copy of the tied embedding (pipeline):
 * updated there too, counted and saved by the first stage only. */
int state_view_is_copy(const par_engine_t *e, int i);

/* The pieces [*i1 from i0) of the region of piece i0; returns the region. */
int state_region_pieces(const par_engine_t *e, int i0, int *i1);

/* ---- engine_ckpt.c: the state as arrays of the whole tensors ---- */
/* One array of one view as this rank holds it: `what` 'p' (the parameters;
 * under mixed precision the fp32 masters), 'm' or 'v' (the optimizer's
 * moments), and nr ranges [off[k], off[k] + cnt[k]) of the whole tensor
 * (flat, row-major over the view's global shape; ascending and disjoint),
 * their elements back to back at data (fp32; NULL when the ranges hold
 * nothing). off and cnt are borrowed for the call. */
typedef int (*engine_part_fn)(void *ctx, par_engine_t *e, char what, int view, int nr, const int64_t *off,
                              const int64_t *cnt, float *data);
/* Calls fn for every view and every array of the state (the views in
 * order, 'p', 'm', 'v' within one), each with this rank's part:
 * writing, the elements this rank is the one to write (the ranks' parts
 * cover every element of every whole tensor exactly once); else the
 * elements its layout keeps (the whole view where it keeps it whole: every
 * rank its own copy). The view's region is resident during the call. The
 * first failure stops the walk and is returned. */
int engine_each_part(par_engine_t *e, int writing, engine_part_fn fn, void *ctx);

/* ---- chunks.c: PatrickStar's chunk policy ---- */
/* The manager, the tensors of every region in chunks (size searched or
 * given), and the tables of the gradient chunks' reductions. */
int chunks_create(par_engine_t *e);
void chunks_destroy(par_engine_t *e);
/* The hook's events under the policy (state.c calls them). */
int chunks_need(par_engine_t *e, int r, int backward);
int chunks_grads(par_engine_t *e, int r);
int chunks_done(par_engine_t *e, int r, int backward);
/* Drives the gradient chunks' reductions (wait: until each completes). */
int chunks_progress(par_engine_t *e, int wait);
/* Before a step: the gradients FREE (they come back zeroed), the chunks'
 * counts reset. */
int chunks_begin_step(par_engine_t *e);
/* After it: what a failed pass left in use given back, the 16-bit
 * parameters restored from the masters when gradients took their place
 * and no update came, the gradients FREE, the iteration closed. */
int chunks_end_step(par_engine_t *e);
/* state_resident's part: region r's parameters, gradients (and their fp32
 * copy while grads_live, mixed) to the host, or back. */
int chunks_resident(par_engine_t *e, int r, int on);
/* Whether this rank keeps region r (and updates it): every region unless sharded. */
int chunks_owned(const par_engine_t *e, int r);
/* par_engine_get_params under the policy. */
int chunks_get_params(par_engine_t *e, float *out);
/* Accesses and releases of liboffload tensors, failures named. */
int off_get(par_engine_t *e, int id, offload_tier_t tier, void **p, const char *what);
int off_put(par_engine_t *e, int id, offload_state_t st);

/* ---- pipeline.c ---- */
int pipe_create(par_engine_t *e);
void pipe_destroy(par_engine_t *e);
/* The step's forwards and backwards as the schedule says; the mean loss
 * over the microbatches on the last stage (0 elsewhere). */
int pipe_local_step(par_engine_t *e, par_data_t *data, double *loss);
/* The tied embedding: the first and last stages' gradients of wte summed. */
int pipe_tied_grads(par_engine_t *e);
/* Per-view sums (w per view) over the pipeline group, the copy counted once. */
int pipe_sum_views(par_engine_t *e, double *vsq, int w);
/* One validation microbatch through the stages: *loss on the last stage.
 * in NULL: this rank failed before, and passes the messages on without
 * computing; a failure of the model here sets *failed (the message in
 * e->err) and does the same. Returns an error only when the messages
 * themselves failed. */
int pipe_forward_only(par_engine_t *e, const int32_t *in, const int32_t *tg, float *loss, int *failed);

/* optimizer.c: par_optim_create for arrays on `device` (-1: the host). */
int engine_optim_create(optim **out, const par_optim_config_t *c, long steps, int threads, int device,
                        int groups[2], char *err, size_t errlen);

/* fit.c: refuses a model and layout that cannot fit this rank's memory. */
int engine_check_fit(par_engine_t *e, const par_gpt_config_t *mc, const par_layout_t *lay);

#endif
