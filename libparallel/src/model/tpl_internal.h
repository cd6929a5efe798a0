/* The multi-dimensional tensor-parallel layer's pieces (tplayer.c), shared
 * by strata/par_tplayer.h's standalone layer and the GPT model's 2D, 2.5D
 * and 3D layouts (tp_md.c): the mesh and this rank's place in it, the
 * parameters' parts, one block's forward and backward on parameters and
 * activations held by the caller, and the partitioned layernorm. */
#ifndef STRATA_TPL_INTERNAL_H
#define STRATA_TPL_INTERNAL_H

#include <strata/comm.h>
#include <strata/par_mm3d.h>
#include <strata/par_summa.h>
#include <strata/parallel.h>
#include <strata/tensor.h>

enum { TPL_LN1W, TPL_LN1B, TPL_QKVW, TPL_QKVB, TPL_PROJW, TPL_PROJB, TPL_LN2W, TPL_LN2B,
       TPL_FCW, TPL_FCB, TPL_FCPW, TPL_FCPB, TPL_NPARAM };
extern const char *const tpl_param_names[TPL_NPARAM]; /* par_gpt's, without "h.L." */

/* Where a rank's part of a parameter lies in the whole (par_gpt's layout,
 * N x K for a weight, N for a vector), held in that layout: rows k0 ..
 * k0 + kn of the input dimension (the part's columns), and of the output
 * dimension, cut in `parts` equal parts of np (q, k and v), the rows
 * n0 .. n0 + nn of each part. owner: the one replica that speaks for the
 * part (norms, checkpoints); pack: the group of replicas a vector's
 * gradient is summed over (0: those of the residual stream's columns, the
 * embedding's and the layernorms'; 1: the columns of qkv's and fc's
 * outputs under 3D). */
typedef struct {
  int64_t k0, kn, n0, nn, np;
  int parts, owner, pack;
} tpl_geom_t;

typedef struct tpl_mesh {
  par_tp_mode_t mode;
  int dev; /* where every buffer lives: TENSOR_CPU or a CUDA device (collectives then through NCCL) */
  int depth, q, md; /* md: the heads' and the products' width divisor (1D tp, else q) */
  tensor_ctx_t *tc;
  comm_t *tp, *aux;        /* 1D's group; a duplicate for whole-tensor gathers (uncounted) */
  par_summa_t *summa;
  par_mm3d_t *m1, *m2;
  comm_t *swap;            /* the group with j and l exchanged (a pair's second 3D product) */
  comm_t *hid;             /* the ranks sharing this rank's rows (layernorm statistics, logits) */
  comm_t *rep[2][2];       /* per pack, the groups a vector's gradient is summed over */
  comm_t *groups[8];       /* every group the layer talks on (traffic, partners) */
  int ngroups, partners;
  int64_t C, heads, hl, acols, col0, rowsplit, rowblk;
  tpl_geom_t g[TPL_NPARAM]; /* the block's parameters */
  tpl_geom_t cols;          /* a vector over the residual stream's columns (pack 0) */
  /* scratch, sized for `rows` rows a rank */
  int64_t rows;
  tensor_t tmp, dres, dln, dqkv, datty, dfch, dgel, stats, gvec, wt, dwt;
  int64_t voff[TPL_NPARAM], packlen[2];
  char err[512];
} tpl_mesh_t;

/* One block's activations kept from its forward for its backward. */
typedef struct tpl_acts {
  tensor_t ln1, mean1, rstd1, qkv, atty, lse, res2, ln2, mean2, rstd2, fch, gel;
  par_mm3d_saved_t keep[4];
  int64_t rows;
} tpl_acts_t;

/* A block's parameters and gradients (views in par_gpt's layout). */
typedef struct {
  tensor_t p[TPL_NPARAM], g[TPL_NPARAM];
} tpl_params_t;

/* The mesh of mode over c for a model of `hidden` and `heads`, its
 * buffers on `device` (TENSOR_CPU or a CUDA ordinal; tc's) (a shape the
 * mode cannot cut: STRATA_EINVAL naming the value, in err). Collective. */
int tpl_mesh_create(tpl_mesh_t **out, comm_t *c, tensor_ctx_t *tc, int device, par_tp_mode_t mode, int depth,
                    int64_t hidden, int64_t heads, char *err, size_t errlen);
void tpl_mesh_destroy(tpl_mesh_t *M);
/* This rank's rows of a batch of B sequences of T (whole sequences: B must
 * divide over the row split, else STRATA_EINVAL naming B); sizes the
 * scratch. */
int tpl_prepare(tpl_mesh_t *M, int64_t B, int64_t T, int64_t *rows, int64_t *row0);
int tpl_acts_prepare(tpl_mesh_t *M, tpl_acts_t *a, int64_t rows);
void tpl_acts_free(tpl_mesh_t *M, tpl_acts_t *a);
/* The shape of this rank's part of parameter i (a vector: cols 0). */
void tpl_param_shape(const tpl_mesh_t *M, int i, int64_t *rows, int64_t *cols);
/* Whole-tensor offset of element (n, k) of a part of geometry g (K the
 * whole's columns; 1 for a vector). */
int64_t tpl_whole_at(const tpl_geom_t *g, int64_t n, int64_t k, int64_t K);
/* dst (on the mesh's device) = this rank's part of the whole tensor `name`
 * (N x K, or N when K is 0) drawn by global index: normal(0, std) values of
 * (seed, name), or the constant `fill` when std is 0. */
int tpl_init_part(tpl_mesh_t *M, const tpl_geom_t *g, const char *name, uint64_t seed, int64_t N, int64_t K, float std,
                  float fill, float *dst);

/* y = the block of x (this rank's rows x acols, T tokens a sequence). */
int tpl_block_forward(tpl_mesh_t *M, const tpl_params_t *P, tpl_acts_t *a, tensor_t *y, const tensor_t *x, int64_t T);
/* dx = dL/dx from dy and the forward's input x; the parameters' gradients
 * added to. */
int tpl_block_backward(tpl_mesh_t *M, tpl_params_t *P, tpl_acts_t *a, tensor_t *dx, const tensor_t *dy,
                       const tensor_t *x, int64_t T);

/* The partitioned layernorm over this rank's columns (rows statistics
 * summed over M->hid; libtensor's tensor_layernorm_split_*); backward adds
 * to din and to dgw, dgb (A floats: this rank's partial sums over its
 * rows). */
int tpl_ln_forward(tpl_mesh_t *M, tensor_t *out, tensor_t *mean, tensor_t *rstd, const tensor_t *in, const tensor_t *w,
                   const tensor_t *b);
int tpl_ln_backward(tpl_mesh_t *M, tensor_t *din, tensor_t *dgw, tensor_t *dgb, const tensor_t *dout,
                    const tensor_t *in, const tensor_t *mean, const tensor_t *rstd, const tensor_t *w);
/* Bytes sent and received on every group of the mesh (libcomm's counters). */
void tpl_traffic(const tpl_mesh_t *M, uint64_t *sent, uint64_t *recv);
/* buf (n floats on the mesh's device) summed over g (nothing when g is
 * NULL or alone). */
int tpl_allreduce(tpl_mesh_t *M, comm_t *g, float *buf, int64_t n);
int tpl_fail(tpl_mesh_t *M, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
