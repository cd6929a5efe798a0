/* The GPT model: configuration checks, the flat parameter and gradient
 * arrays with their named views, initialisation by global index, activation
 * buffers and accessors. The layers are in gpt_layers.c. */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt_internal.h"

static __thread char create_err[GPT_ERRLEN];

const char *par_gpt_create_error(void) { return create_err; }

int gpt_seterr(par_gpt_t *m, int code, const char *fmt, ...) {
  char *buf = m ? m->err : create_err;
  /* an allocation failure says so first (a libtensor message already does) */
  int at = code == STRATA_ENOMEM && !strstr(fmt, "out of memory") && strcmp(fmt, "%s")
               ? snprintf(buf, GPT_ERRLEN, "out of memory: ")
               : 0;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + at, GPT_ERRLEN - (size_t)at, fmt, ap);
  va_end(ap);
  return code;
}

int gpt_tensor_err(par_gpt_t *m, int code) {
  return gpt_seterr(m, code, "%s", tensor_last_error(m->tc));
}

const char *par_gpt_last_error(const par_gpt_t *m) { return m ? m->err : "no model"; }

static int check_config(const par_gpt_config_t *c, char *msg, size_t len) {
  if (!c) return snprintf(msg, len, "par_gpt: NULL configuration"), STRATA_EINVAL;
  if (c->layers < 1 || c->hidden < 1 || c->heads < 1 || c->seq < 1 || c->vocab < 1)
    return snprintf(msg, len,
                    "par_gpt: layers %d, hidden %d, heads %d, seq %d, vocab %d must all be >= 1",
                    c->layers, c->hidden, c->heads, c->seq, c->vocab),
           STRATA_EINVAL;
  if (c->hidden % c->heads)
    return snprintf(msg, len, "par_gpt: hidden %d is not divisible by heads %d", c->hidden, c->heads),
           STRATA_EINVAL;
  return STRATA_OK;
}

size_t par_gpt_param_count(const par_gpt_config_t *c) {
  char msg[GPT_ERRLEN];
  if (check_config(c, msg, sizeof msg)) return 0;
  size_t h = (size_t)c->hidden;
  return (size_t)c->vocab * h + (size_t)c->seq * h + (size_t)c->layers * (12 * h * h + 13 * h) + 2 * h;
}

double par_gpt_flops_per_token(const par_gpt_config_t *c, int T) {
  return 6.0 * (double)par_gpt_param_count(c) + 6.0 * c->layers * c->hidden * (double)T;
}

/* The activations' dtype (opts.act_dtype): f32 anywhere; bf16 and f16 on a
 * CUDA device, with the serial layers, Megatron's 1D tensor parallelism
 * (its collectives move the activations in their dtype; the unfused
 * vocabulary-parallel head keeps f32 logits), ring self-attention (its
 * blocks on f32 copies, ring.c), pipeline stages (their 16-bit boundary
 * buffers passed as they are) and the fused head (whose logits stay f32).
 * The 2D, 2.5D and 3D layers keep f32 buffers. */
static int check_act_dtype(par_gpt_t *m) {
  static const char *const names[] = {"f32", "bf16", "f16"};
  static const char *const modes[] = {"1d", "2d", "2.5d", "3d"};
  int dt = m->opts.act_dtype, mode = m->opts.tp_mode;
  m->act_dtype = TENSOR_F32;
  if (dt == TENSOR_F32) return STRATA_OK;
  if (dt != TENSOR_BF16 && dt != TENSOR_F16)
    return gpt_seterr(NULL, STRATA_EINVAL, "par_gpt_create: act_dtype %d is not f32 (%d), bf16 (%d) or f16 (%d)", dt,
                      TENSOR_F32, TENSOR_BF16, TENSOR_F16);
  char md[96] = "";
  if (m->md)
    snprintf(md, sizeof md, "tensor parallelism of tp_mode %s keeps f32 activations in this version (1d takes them)",
             mode >= 0 && mode < 4 ? modes[mode] : "?");
  const char *why = m->device == TENSOR_CPU ? "the CPU computes in f32 (16-bit activations need a CUDA device)"
                    : m->md                     ? md
                    : !m->fused_head && m->tp_size < 2 ? "the unfused head (head_chunk -1) keeps f32 activations in this version"
                                                : NULL;
  char where[32] = "the CPU";
  if (m->device != TENSOR_CPU) snprintf(where, sizeof where, "cuda:%d", m->device);
  if (why)
    return gpt_seterr(NULL, STRATA_EUNSUPPORTED, "par_gpt_create: %s activations on %s: %s", names[dt], where, why);
  m->act_dtype = dt;
  return STRATA_OK;
}

/* ---- views ---- */


/* A view of global shape (d0, d1) split over the tensor group as `split`
 * says: this rank holds shape[] of it. */
static void add_view(par_gpt_t *m, char **names, size_t *off, view_init_t *inits, const char *name,
                     int ndim, int64_t d0, int64_t d1, int decay, int init, float std, int split, int which) {
  par_gpt_view_t *v = &m->views[m->nviews];
  int t = m->tp_size;
  v->name = *names;
  *names += sprintf(*names, "%s", name) + 1;
  v->offset = *off;
  v->ndim = ndim;
  v->global[0] = d0, v->global[1] = ndim > 1 ? d1 : 0;
  v->split = t > 1 ? split : PAR_GPT_SPLIT_NONE;
  v->shape[0] = v->split == PAR_GPT_SPLIT_ROWS || v->split == PAR_GPT_SPLIT_QKV ? d0 / t : d0;
  v->shape[1] = ndim < 2 ? 0 : v->split == PAR_GPT_SPLIT_COLS ? d1 / t : d1;
  if (m->md) gpt_md_view(m, v, which, d0); /* 2D, 2.5D, 3D: its block */
  v->numel = (size_t)v->shape[0] * (ndim > 1 ? (size_t)v->shape[1] : 1);
  v->decay = decay;
  inits[m->nviews].init = init;
  inits[m->nviews].std = std;
  *off += v->numel;
  m->nviews++;
}

/* A view's tensor at base + its offset within its region (base: the
 * region's first element; NULL gives a tensor with no data). */
static tensor_t view_at(par_gpt_t *m, float *base, const par_gpt_view_t *v, size_t region_off) {
  return tensor_view(base ? base + (v->offset - region_off) : NULL, TENSOR_F32, m->device, v->ndim, v->shape);
}

static void bind2(par_gpt_t *m, gpt_param2_t *p, int vi, float *pb, float *gb, size_t roff) {
  p->w = view_at(m, pb, &m->views[vi], roff);
  p->dw = view_at(m, gb, &m->views[vi], roff);
  p->b = view_at(m, pb, &m->views[vi + 1], roff);
  p->db = view_at(m, gb, &m->views[vi + 1], roff);
}

/* Regions: 0 the embeddings (wte, wpe), 1..L the blocks, L+1 the final
 * layernorm: the views of region r are [first, first + count). */
static void region_views(const par_gpt_t *m, int r, int *first, int *count) {
  int L = m->cfg.layers;
  if (r == 0) *first = 0, *count = 2;
  else if (r <= L) *first = 2 + 12 * (r - 1), *count = 12;
  else *first = 2 + 12 * L, *count = 2;
}

/* Points region r's tensors at params p and grads g (region bases). */
static void bind_region(par_gpt_t *m, int r, float *p, float *g) {
  int first, count, L = m->cfg.layers;
  region_views(m, r, &first, &count);
  size_t off = m->views[first].offset;
  if (r == 0) {
    m->wte = view_at(m, p, &m->views[0], off), m->dwte = view_at(m, g, &m->views[0], off);
    m->wpe = view_at(m, p, &m->views[1], off), m->dwpe = view_at(m, g, &m->views[1], off);
  } else if (r <= L) {
    gpt_block_t *k = &m->blocks[r - 1];
    bind2(m, &k->ln1, first, p, g, off), bind2(m, &k->qkv, first + 2, p, g, off);
    bind2(m, &k->proj, first + 4, p, g, off), bind2(m, &k->ln2, first + 6, p, g, off);
    bind2(m, &k->fc, first + 8, p, g, off), bind2(m, &k->fcproj, first + 10, p, g, off);
  } else {
    bind2(m, &m->lnf, first, p, g, off);
  }
}

int par_gpt_num_regions(const par_gpt_t *m) { return m ? m->cfg.layers + 2 : 0; }

int par_gpt_region(const par_gpt_t *m, int r, size_t *offset, size_t *count, int *first_view, int *views) {
  if (!m || r < 0 || r > m->cfg.layers + 1) return STRATA_EINVAL;
  int first, n;
  region_views(m, r, &first, &n);
  if (offset) *offset = m->views[first].offset;
  if (count) *count = m->views[first + n - 1].offset + m->views[first + n - 1].numel - m->views[first].offset;
  if (first_view) *first_view = first;
  if (views) *views = n;
  return STRATA_OK;
}

int par_gpt_bind(par_gpt_t *m, int r, float *params, float *grads) {
  if (!m || r < 0 || r > m->cfg.layers + 1) return STRATA_EINVAL;
  bind_region(m, r, params, grads);
  return STRATA_OK;
}

#if defined(GPT_WITHOUT_COMM) /* the GPU bundles build the model with libtensor alone */
int gpt_tp_query(struct comm *tp, int *rank, int *size) {
  (void)tp, *rank = 0, *size = 1;
  return STRATA_EUNSUPPORTED;
}
int gpt_tp_allreduce(par_gpt_t *m, tensor_t *t) {
  (void)t;
  return m->tp_size < 2 ? STRATA_OK : STRATA_EUNSUPPORTED;
}
int gpt_tp_allgather(par_gpt_t *m, void *recv, const void *send, size_t n, tensor_dtype_t dt) {
  (void)recv, (void)send, (void)n, (void)dt;
  return m->tp_size < 2 ? STRATA_OK : STRATA_EUNSUPPORTED;
}
int gpt_tp_reduce_scatter(par_gpt_t *m, void *recv, const void *send, size_t n, tensor_dtype_t dt) {
  (void)recv, (void)send, (void)n, (void)dt;
  return m->tp_size < 2 ? STRATA_OK : STRATA_EUNSUPPORTED;
}
int gpt_ring_forward(par_gpt_t *m, gpt_acts_t *a) {
  (void)m, (void)a;
  return STRATA_EUNSUPPORTED;
}
int gpt_ring_backward(par_gpt_t *m, gpt_acts_t *a) {
  (void)m, (void)a;
  return STRATA_EUNSUPPORTED;
}
int gpt_md_create(par_gpt_t *m) {
  (void)m;
  return gpt_seterr(NULL, STRATA_EUNSUPPORTED, "par_gpt_create: 2D, 2.5D and 3D tensor parallelism need libcomm");
}
void gpt_md_destroy(par_gpt_t *m) { (void)m; }
void gpt_md_view(par_gpt_t *m, par_gpt_view_t *v, int which, int64_t d0) { (void)m, (void)v, (void)which, (void)d0; }
void gpt_md_free_acts(par_gpt_t *m) { (void)m; }
int gpt_md_prepare(par_gpt_t *m, int B, int T) { return (void)m, (void)B, (void)T, STRATA_EUNSUPPORTED; }
int gpt_md_embed_forward(par_gpt_t *m, tensor_t *out) { return (void)m, (void)out, STRATA_EUNSUPPORTED; }
int gpt_md_embed_backward(par_gpt_t *m) { return (void)m, STRATA_EUNSUPPORTED; }
int gpt_md_block_forward(par_gpt_t *m, int l, int set, const tensor_t *x, tensor_t *y) {
  return (void)m, (void)l, (void)set, (void)x, (void)y, STRATA_EUNSUPPORTED;
}
int gpt_md_block_backward(par_gpt_t *m, int l, int set, const tensor_t *x) {
  return (void)m, (void)l, (void)set, (void)x, STRATA_EUNSUPPORTED;
}
int gpt_md_head_forward(par_gpt_t *m, const tensor_t *x, int with_loss, float *loss) {
  return (void)m, (void)x, (void)with_loss, (void)loss, STRATA_EUNSUPPORTED;
}
int gpt_md_head_backward(par_gpt_t *m, const tensor_t *x) { return (void)m, (void)x, STRATA_EUNSUPPORTED; }
int par_gpt_tp_sent(const par_gpt_t *m, uint64_t *sent) { return (void)m, (void)sent, STRATA_EINVAL; }
#endif

int par_gpt_set_loss_scale(par_gpt_t *m, float scale) {
  if (!m) return STRATA_EINVAL;
  if (!(scale > 0) || !isfinite(scale))
    return gpt_seterr(m, STRATA_EINVAL, "par_gpt_set_loss_scale: scale %g must be finite and > 0", (double)scale);
  m->loss_scale = scale;
  return STRATA_OK;
}

void par_gpt_set_hook(par_gpt_t *m, par_gpt_hook_t hook, void *ctx) {
  if (!m) return;
  m->hook = hook;
  m->hook_ctx = ctx;
}

/* The whole of view i as this rank holds it, into dst: the values of the
 * global tensor at its slice (or slices: q, k and v of QKV), by global
 * index, so that every split draws the serial model's values. */
static int fill_split_view(par_gpt_t *m, int i, uint64_t seed, float *dst) {
  const par_gpt_view_t *v = &m->views[i];
  if (m->inits[i].init != INIT_NORMAL) {
    tensor_t t = tensor_view1(dst, TENSOR_F32, m->device, (int64_t)v->numel);
    return tensor_fill(m->tc, &t, m->inits[i].init == INIT_ONES ? 1.f : 0.f);
  }
  if (v->split == PAR_GPT_SPLIT_BLOCK) { /* each part's rectangle of the whole */
    const par_gpt_block_t *bk = &v->block;
    int64_t rows = v->shape[0] / bk->parts, cols = v->ndim > 1 ? v->shape[1] : 1, shape[2] = {rows, cols};
    for (int k = 0; k < bk->parts; k++) {
      tensor_slice_t sl = {.ndim = v->ndim, .shape = {v->global[0], v->global[1]},
                           .start = {k * bk->part_rows + bk->row0, bk->col0}};
      tensor_t t = tensor_view(dst + (size_t)(k * rows * cols), TENSOR_F32, m->device, v->ndim, shape);
      int rc = tensor_fill_normal(m->tc, &t, seed, v->name, &sl, 0.f, m->inits[i].std);
      if (rc) return rc;
    }
    return STRATA_OK;
  }
  int pieces = v->split == PAR_GPT_SPLIT_QKV ? 3 : 1;
  int64_t rows = v->shape[0] / pieces, cols = v->ndim > 1 ? v->shape[1] : 1;
  for (int k = 0; k < pieces; k++) {
    tensor_slice_t sl = {.ndim = v->ndim, .shape = {v->global[0], v->global[1]}};
    if (v->split == PAR_GPT_SPLIT_COLS) sl.start[1] = (int64_t)m->tp_rank * v->shape[1];
    else sl.start[0] = k * (v->global[0] / pieces) + (int64_t)m->tp_rank * rows;
    int64_t shape[2] = {rows, cols};
    tensor_t t = tensor_view(dst + (size_t)(k * rows * cols), TENSOR_F32, m->device, v->ndim, shape);
    int rc = tensor_fill_normal(m->tc, &t, seed, v->name, &sl, 0.f, m->inits[i].std);
    if (rc) return rc;
  }
  return STRATA_OK;
}

int par_gpt_init_values(par_gpt_t *m, uint64_t seed, size_t offset, size_t count, float *out) {
  if (!m || (count && !out)) return STRATA_EINVAL;
  size_t end = offset + count;
  for (int i = 0; i < m->nviews; i++) {
    const par_gpt_view_t *v = &m->views[i];
    size_t a = v->offset > offset ? v->offset : offset, b = v->offset + v->numel < end ? v->offset + v->numel : end;
    if (a >= b) continue;
    if (v->split != PAR_GPT_SPLIT_NONE) { /* a slice of the global tensor: whole, then the part asked */
      int whole = a == v->offset && b == v->offset + v->numel, rc = STRATA_OK;
      if (whole) rc = fill_split_view(m, i, seed, out + (a - offset));
      else if (m->device == TENSOR_CPU) {
        float *tmp = malloc(v->numel * sizeof *tmp);
        if (!tmp) return gpt_seterr(m, STRATA_ENOMEM, "initialising %s", v->name);
        if (!(rc = fill_split_view(m, i, seed, tmp)))
          memcpy(out + (a - offset), tmp + (a - v->offset), (b - a) * sizeof *tmp);
        free(tmp);
      } else { /* a ZeRO-3 shard of a tensor slice on the device: the whole slice in device scratch */
        tensor_t tmp = {0};
        int64_t n = (int64_t)v->numel;
        if (!(rc = tensor_alloc(m->tc, &tmp, TENSOR_F32, m->device, 1, &n)) &&
            !(rc = fill_split_view(m, i, seed, tmp.data))) {
          int64_t k = (int64_t)(b - a);
          tensor_t src = tensor_view1((float *)tmp.data + (a - v->offset), TENSOR_F32, m->device, k);
          tensor_t dst = tensor_view1(out + (a - offset), TENSOR_F32, m->device, k);
          rc = tensor_copy(m->tc, &dst, &src);
        }
        tensor_free(m->tc, &tmp);
      }
      if (rc) return gpt_tensor_err(m, rc);
      continue;
    }
    /* the view's elements [a, b) as a slice of the view seen flat */
    tensor_t t = tensor_view1(out + (a - offset), TENSOR_F32, m->device, (int64_t)(b - a));
    tensor_slice_t sl = {.ndim = 1, .shape = {(int64_t)v->numel}, .start = {(int64_t)(a - v->offset)}};
    int rc;
    if (m->inits[i].init == INIT_NORMAL) rc = tensor_fill_normal(m->tc, &t, seed, v->name, &sl, 0.f, m->inits[i].std);
    else rc = tensor_fill(m->tc, &t, m->inits[i].init == INIT_ONES ? 1.f : 0.f);
    if (rc) return gpt_tensor_err(m, rc);
  }
  return STRATA_OK;
}

int par_gpt_create(par_gpt_t **model, const par_gpt_config_t *cfg, uint64_t seed) {
  return par_gpt_create_ex(model, cfg, NULL, seed);
}

int par_gpt_create_ex(par_gpt_t **model, const par_gpt_config_t *cfg, const par_gpt_options_t *opts,
                      uint64_t seed) {
  int rc = STRATA_OK;
  par_gpt_t *m = NULL;
  view_init_t *inits = NULL; /* m->inits once m exists */
  create_err[0] = 0;
  if (!model) return STRATA_EINVAL;
  *model = NULL;
  rc = check_config(cfg, create_err, sizeof create_err);
  if (rc) goto fail;
  m = calloc(1, sizeof *m);
  if (!m) {
    rc = gpt_seterr(NULL, STRATA_ENOMEM, "par_gpt_create: model struct");
    goto fail;
  }
  m->cfg = *cfg;
  par_gpt_options_t od = PAR_GPT_OPTIONS_DEFAULTS;
  m->opts = opts ? *opts : od;
  m->tp = m->opts.tp, m->tp_rank = 0, m->tp_size = 1, m->sp = 0;
  m->ring = m->opts.ring, m->ring_rank = 0, m->ring_size = 1;
  if (m->ring) {
    if ((rc = gpt_tp_query(m->ring, &m->ring_rank, &m->ring_size))) {
      gpt_seterr(NULL, rc, "par_gpt_create: ring self-attention needs libcomm, which this build of the model lacks");
      goto fail;
    }
    if (m->ring_size > 1 && (m->opts.seq_parallel || m->opts.stages > 1)) {
      rc = gpt_seterr(NULL, STRATA_EUNSUPPORTED,
                      "par_gpt_create: ring self-attention runs without Megatron's sequence parallelism or pipeline "
                      "stages in this version");
      goto fail;
    }
  }
  if (m->tp) {
    if ((rc = gpt_tp_query(m->tp, &m->tp_rank, &m->tp_size))) {
      gpt_seterr(NULL, rc, "par_gpt_create: tensor parallelism needs libcomm, which this build of the model lacks");
      goto fail;
    }
    if (m->opts.tp_mode != 0) { /* 2D, 2.5D, 3D: the mesh checks the shapes (gpt_md_create) */
      if (m->opts.seq_parallel || m->opts.stages > 1 || m->opts.partition_activations ||
          (m->ring && m->ring_size > 1)) {
        rc = gpt_seterr(NULL, STRATA_EUNSUPPORTED,
                        "par_gpt_create: 2D, 2.5D and 3D tensor parallelism run in one stage, without sequence or "
                        "ring parallelism or partitioned checkpoints, in this version");
        goto fail;
      }
    } else if (m->tp_size < 1 || cfg->heads % m->tp_size) {
      rc = gpt_seterr(NULL, STRATA_EINVAL, "par_gpt_create: %d heads do not divide over a tensor-parallel group of %d",
                      cfg->heads, m->tp_size);
      goto fail;
    }
    m->sp = m->opts.seq_parallel && m->tp_size > 1;
    m->part = m->opts.partition_activations && cfg->recompute && m->tp_size > 1 && !m->sp;
    if (m->opts.tp_mode == 0 && cfg->vocab % m->tp_size) {
      rc = gpt_seterr(NULL, STRATA_EINVAL,
                      "par_gpt_create: a vocabulary of %d does not divide over a tensor-parallel group of %d "
                      "(pad it to a multiple, as Megatron does)",
                      cfg->vocab, m->tp_size);
      goto fail;
    }
  }
  m->stages = m->opts.stages < 1 ? 1 : m->opts.stages;
  m->interleave = m->opts.interleave < 1 ? 1 : m->opts.interleave;
  m->stage = m->opts.stage;
  if (m->stage < 0 || m->stage >= m->stages || cfg->layers % (m->stages * m->interleave)) {
    rc = gpt_seterr(NULL, STRATA_EINVAL,
                    "par_gpt_create: pipeline stage %d of %d with %d chunks each: need 0 <= stage < stages and "
                    "%d layers divisible by stages x chunks",
                    m->stage, m->stages, m->interleave, cfg->layers);
    goto fail;
  }
  m->chunk_layers = cfg->layers / (m->stages * m->interleave);
  m->held = calloc((size_t)cfg->layers, 1);
  m->slots = calloc(1, sizeof *m->slots);
  if (!m->held || !m->slots) {
    rc = gpt_seterr(NULL, STRATA_ENOMEM, "par_gpt_create: pipeline tables");
    goto fail;
  }
  m->nslots = 1;
  for (int c = 0; c < m->interleave; c++)
    for (int l = 0; l < m->chunk_layers; l++) m->held[(c * m->stages + m->stage) * m->chunk_layers + l] = 1;
  m->has_embed = m->held[0], m->has_head = m->held[cfg->layers - 1];
  m->loss_scale = 1.0f;
  m->scratch_layer = -1;
  m->device = m->opts.device < 0 ? TENSOR_CPU : m->opts.device;
  tensor_ctx_options_t to = TENSOR_CTX_OPTIONS_DEFAULTS;
  to.threads = m->opts.threads;
  to.device = m->device < 0 ? 0 : m->device;
  to.bf16_matmul = m->opts.bf16_matmul;
  rc = tensor_ctx_create(&m->tc, &to);
  if (rc) {
    gpt_seterr(NULL, rc, "par_gpt_create: tensor context (threads %d, device %d)", to.threads, to.device);
    goto fail;
  }
  if (m->tp && m->opts.tp_mode != 0 && (rc = gpt_md_create(m))) goto fail;
  m->fused_head = m->opts.head_chunk >= 0 && m->tp_size < 2 && !m->md &&
                  (m->opts.head_chunk > 0 || m->device != TENSOR_CPU);
  m->head_chunk = m->opts.head_chunk > 0 ? m->opts.head_chunk : 0;
  if ((rc = check_act_dtype(m))) goto fail;
  int L = cfg->layers;
  int64_t C = cfg->hidden, V = cfg->vocab, Tm = cfg->seq;
  int nv = 4 + 12 * L;
  m->views = calloc((size_t)nv, sizeof *m->views);
  m->names = calloc((size_t)nv, 32);
  inits = calloc((size_t)nv, sizeof *inits);
  m->blocks = calloc((size_t)L, sizeof *m->blocks);
  if (!m->views || !m->names || !inits || !m->blocks) {
    rc = gpt_seterr(NULL, STRATA_ENOMEM, "par_gpt_create: views of %d layers", L);
    goto fail;
  }
  char *names = m->names, nm[32];
  size_t off = 0;
  float std = 0.02f, pstd = 0.02f / sqrtf(2.f * L);
  add_view(m, &names, &off, inits, "wte", 2, V, C, 1, INIT_NORMAL, std, PAR_GPT_SPLIT_ROWS, -1); /* vocab-parallel */
  add_view(m, &names, &off, inits, "wpe", 2, Tm, C, 1, INIT_NORMAL, std, PAR_GPT_SPLIT_NONE, -2);
  for (int l = 0; l < L; l++) {
    int which = 0; /* the block parameter's index (tpl_param_names' order) */
#define V1(suffix, n, dec, init, s, sp)                                                            \
  snprintf(nm, sizeof nm, "h.%d." suffix, l), add_view(m, &names, &off, inits, nm, 1, n, 0, dec, init, s, sp, which++)
#define V2(suffix, r, c, s, sp)                                                                    \
  snprintf(nm, sizeof nm, "h.%d." suffix, l),                                                      \
      add_view(m, &names, &off, inits, nm, 2, r, c, 1, INIT_NORMAL, s, sp, which++)
    V1("ln_1.w", C, 0, INIT_ONES, 0, PAR_GPT_SPLIT_NONE);
    V1("ln_1.b", C, 0, INIT_ZEROS, 0, PAR_GPT_SPLIT_NONE);
    V2("attn.qkv.w", 3 * C, C, std, PAR_GPT_SPLIT_QKV);
    V1("attn.qkv.b", 3 * C, 0, INIT_ZEROS, 0, PAR_GPT_SPLIT_QKV);
    V2("attn.proj.w", C, C, pstd, PAR_GPT_SPLIT_COLS);
    V1("attn.proj.b", C, 0, INIT_ZEROS, 0, PAR_GPT_SPLIT_NONE);
    V1("ln_2.w", C, 0, INIT_ONES, 0, PAR_GPT_SPLIT_NONE);
    V1("ln_2.b", C, 0, INIT_ZEROS, 0, PAR_GPT_SPLIT_NONE);
    V2("mlp.fc.w", 4 * C, C, std, PAR_GPT_SPLIT_ROWS);
    V1("mlp.fc.b", 4 * C, 0, INIT_ZEROS, 0, PAR_GPT_SPLIT_ROWS);
    V2("mlp.proj.w", C, 4 * C, pstd, PAR_GPT_SPLIT_COLS);
    V1("mlp.proj.b", C, 0, INIT_ZEROS, 0, PAR_GPT_SPLIT_NONE);
#undef V1
#undef V2
  }
  add_view(m, &names, &off, inits, "ln_f.w", 1, C, 0, 0, INIT_ONES, 0, PAR_GPT_SPLIT_NONE, -3);
  add_view(m, &names, &off, inits, "ln_f.b", 1, C, 0, 0, INIT_ZEROS, 0, PAR_GPT_SPLIT_NONE, -3);
  m->inits = inits, inits = NULL; /* (fill_split_view reads m->inits) */
  int64_t n = (int64_t)off;
  /* With external storage the caller binds every region (par_gpt_bind). */
  for (int r = 0; r < L + 2; r++) bind_region(m, r, NULL, NULL);
  if (!m->opts.external) {
    rc = tensor_alloc(m->tc, &m->params, TENSOR_F32, m->device, 1, &n);
    if (!rc) rc = tensor_alloc(m->tc, &m->grads, TENSOR_F32, m->device, 1, &n);
    if (rc) {
      gpt_seterr(NULL, rc, "par_gpt_create: %lld parameters: %s", (long long)n, tensor_last_error(m->tc));
      goto fail;
    }
    if ((rc = par_gpt_init_values(m, seed, 0, (size_t)n, m->params.data))) {
      gpt_seterr(NULL, rc, "par_gpt_create: initialising: %s", m->err);
      goto fail;
    }
    for (int r = 0; r < L + 2; r++) {
      size_t ro;
      par_gpt_region(m, r, &ro, NULL, NULL, NULL);
      bind_region(m, r, (float *)m->params.data + ro, (float *)m->grads.data + ro);
    }
  }
  *model = m;
  m = NULL;
fail:
  free(inits);
  par_gpt_destroy(m);
  return rc;
}

/* Frees the buffers of the slot in use. */
static void free_acts(par_gpt_t *m) {
  if (m->md) gpt_md_free_acts(m);
  tensor_free(m->tc, &m->act_store);
  tensor_free(m->tc, &m->ids_store);
  free(m->x), free(m->acts), free(m->host_losses), free(m->host_ids);
  m->x = NULL, m->acts = NULL, m->host_losses = NULL, m->host_ids = NULL;
  m->cap_bt = 0;
}

static void slot_save(par_gpt_t *m, gpt_slot_t *s) {
  *s = (gpt_slot_t){.act_store = m->act_store, .ids_store = m->ids_store, .host_losses = m->host_losses,
                    .host_ids = m->host_ids, .x = m->x, .acts = m->acts, .cap_bt = m->cap_bt, .B = m->B,
                    .T = m->T, .have_targets = m->have_targets};
}

static void slot_load(par_gpt_t *m, const gpt_slot_t *s) {
  m->act_store = s->act_store, m->ids_store = s->ids_store, m->host_losses = s->host_losses;
  m->host_ids = s->host_ids, m->x = s->x, m->acts = s->acts, m->cap_bt = s->cap_bt;
  m->B = s->B, m->T = s->T, m->have_targets = s->have_targets;
}

void gpt_use_slot(par_gpt_t *m, int k) {
  if (k == m->cur) return;
  slot_save(m, &m->slots[m->cur]);
  slot_load(m, &m->slots[k]);
  m->cur = k;
  if (m->cap_bt) gpt_prepare(m, m->B, m->T); /* its views (the shared scratch may have moved) */
}

static void free_slots(par_gpt_t *m) {
  for (int k = 0; k < m->nslots; k++) {
    gpt_use_slot(m, k);
    free_acts(m);
  }
  gpt_use_slot(m, 0);
  tensor_free(m->tc, &m->g_store);
  m->g_cap = 0;
}

int par_gpt_set_slots(par_gpt_t *m, int n) {
  if (!m) return STRATA_EINVAL;
  if (n < 1) return gpt_seterr(m, STRATA_EINVAL, "par_gpt_set_slots: %d slots must be >= 1", n);
  if (n == m->nslots) return STRATA_OK;
  gpt_use_slot(m, 0);
  for (int k = n; k < m->nslots; k++) { /* the ones dropped */
    gpt_use_slot(m, k);
    free_acts(m);
    gpt_use_slot(m, 0);
  }
  gpt_slot_t *s = realloc(m->slots, (size_t)n * sizeof *s);
  if (!s) return gpt_seterr(m, STRATA_ENOMEM, "par_gpt_set_slots: %d slots", n);
  for (int k = m->nslots; k < n; k++) s[k] = (gpt_slot_t){0};
  m->slots = s, m->nslots = n;
  return STRATA_OK;
}

void par_gpt_destroy(par_gpt_t *m) {
  if (!m) return;
  if (m->tc) {
    if (m->slots) free_slots(m);
    tensor_free(m->tc, &m->params);
    tensor_free(m->tc, &m->grads);
    tensor_free(m->tc, &m->logits_store);
    gpt_md_destroy(m);
    tensor_ctx_destroy(m->tc);
  }
  free(m->views), free(m->names), free(m->blocks), free(m->inits), free(m->held), free(m->slots);
  free(m);
}

/* Carves the activation and gradient-scratch views for (B, T) out of the
 * slot's store and the shared scratch, growing them when B*T exceeds what
 * they hold. Only the held blocks get activations; only the stage that
 * holds the head gets its buffers (logits, losses). */
int gpt_prepare(par_gpt_t *m, int B, int T) {
  if (m->md) return gpt_md_prepare(m, B, T);
  int rc = STRATA_OK;
  int t = m->tp_size, L = m->cfg.layers, NH = m->cfg.heads / t;
  int64_t C = m->cfg.hidden, V = m->cfg.vocab, R = (int64_t)B * T;
  int nheld = 0, nx = 0, head = m->has_head;
  int full = head && !m->fused_head; /* the whole logits and their gradient kept (not fused) */
  int part = m->part, nxp = 0; /* partitioned: the held blocks' inputs are B T / t rows */
  for (int l = 0; l <= L; l++) { /* the residual streams held: each held block's input and output */
    int input = l < L && m->held[l];
    nx += (!part || !input) && (input || (l > 0 && m->held[l - 1]));
    nxp += part && input;
  }
  for (int l = 0; l < L; l++) nheld += m->held[l];
  int nsets = m->cfg.recompute ? 0 : nheld; /* with recompute: one set in the shared scratch */
  /* this rank's share of the split activations: qkv, attention output, MLP hidden. Counts
   * of elements: *_a of the activations' dtype, *_f of f32 (row statistics, losses, logits) */
  int64_t C3 = 3 * C / t, Ca = C / t, C4 = 4 * C / t;
  int64_t set_a = R * (3 * C + C3 + Ca + 2 * C4), set_f = 4 * R + R * NH;
  int64_t Vl = V / t; /* this rank's vocabulary slice (logits) */
  /* sequence parallel: the residual stream, layernorms and adds on this rank's R / t tokens */
  int sp = m->sp;
  if ((sp || part) && R % t)
    return gpt_seterr(m, STRATA_EINVAL, "par_gpt: B*T = %lld tokens do not divide over a %s group of %d",
                      (long long)R, sp ? "sequence-parallel" : "tensor-parallel (partitioned checkpoints)", t);
  int64_t Rl = sp ? R / t : R;
  if (sp) set_a = Rl * 3 * C + R * (C3 + Ca + 2 * C4), set_f = 4 * Rl + R * NH;
  int64_t acts_a = nx * Rl * C + nxp * (R / t) * C + nsets * set_a + (head ? R * C : 0);
  int64_t acts_f = nsets * set_f + (head ? 2 * Rl + 2 * R : 0) + (full ? R * Vl : 0);
  int64_t grads_a = Rl * 3 * C + R * (C3 + Ca + 2 * C4) + (sp ? 2 * R * C : 0) +
                    (m->cfg.recompute && nheld ? set_a : 0) + (part ? 2 * R * C : 0);
  int64_t grads_f = (full ? R * Vl : 0) + (sp ? 4 * C : 0) + (m->cfg.recompute && nheld ? set_f : 0);
  int hf = full && m->act_dtype != TENSOR_F32; /* the unfused head's backward in f32 (hx, dhx) */
  grads_f += hf ? 2 * R * C : 0;
  /* 16-bit activations: every view starts 16-byte aligned (as cuBLAS's
   * tensor-core kernels and cuDNN want their operands), so each may waste up
   * to 15 bytes; f32 ones are laid out back to back, as before */
  tensor_dtype_t adt = m->act_dtype;
  int a16 = adt != TENSOR_F32;
  int64_t es = (int64_t)tensor_dtype_size(adt), nviews = L + 1 + 12 * (nsets + 1) + 32;
  int64_t acts_b = acts_a * es + acts_f * 4 + (a16 ? 16 * nviews : 0);
  int64_t grads_b = grads_a * es + grads_f * 4 + (a16 ? 16 * nviews : 0);
  int64_t acts_n = (acts_b + es - 1) / es, grads_n = (grads_b + es - 1) / es; /* in elements of adt */
  if (R > m->cap_bt) {
    free_acts(m);
    m->x = calloc((size_t)L + 1, sizeof *m->x);
    m->acts = calloc((size_t)L, sizeof *m->acts);
    m->host_losses = malloc((size_t)R * (t > 1 ? (size_t)t + 2 : 1) * sizeof(float)); /* tp: lse, gathered */
    m->host_ids = malloc((size_t)R * sizeof(int32_t));
    if (!m->x || !m->acts || !m->host_losses || !m->host_ids) {
      rc = gpt_seterr(m, STRATA_ENOMEM, "par_gpt: activation tables for %lld tokens", (long long)R);
      goto fail;
    }
    int64_t ids_n = 2 * R;
    if ((rc = tensor_alloc(m->tc, &m->act_store, adt, m->device, 1, &acts_n)) ||
        (rc = tensor_alloc(m->tc, &m->ids_store, TENSOR_I32, m->device, 1, &ids_n))) {
      gpt_seterr(m, rc, "par_gpt: activations for B*T = %lld tokens: %s", (long long)R,
                 tensor_last_error(m->tc));
      free_acts(m);
      goto fail;
    }
    m->cap_bt = R;
  }
  if (R > m->g_cap) {
    tensor_free(m->tc, &m->g_store);
    m->g_cap = 0;
    if ((rc = tensor_alloc(m->tc, &m->g_store, adt, m->device, 1, &grads_n))) {
      gpt_seterr(m, rc, "par_gpt: gradient scratch for B*T = %lld tokens: %s", (long long)R, tensor_last_error(m->tc));
      goto fail;
    }
    m->g_cap = R;
    m->scratch_layer = -1; /* (the recompute set was there) */
  }
  char *p = m->act_store.data;
  int dev = m->device;
  const tensor_dtype_t F = TENSOR_F32;
  /* the next view starts at p + bytes (aligned with 16-bit activations) */
#define ADV(bytes) (p += (bytes), p = a16 ? p + ((16 - (uintptr_t)p % 16) % 16) : p)
#define T3(t, c) (t) = tensor_view3(p, adt, dev, B, T, (c)), ADV(R * (c) * es)
#define F3(t, c) (t) = tensor_view3(p, F, dev, B, T, (c)), ADV(R * (c) * 4)
#define T2(t) (t) = tensor_view2(p, F, dev, B, T), ADV(R * 4)
  /* this rank's tokens: all of them, or its chunk of R / t under sequence parallelism */
#define L3(t, c) (t) = sp ? tensor_view3(p, adt, dev, 1, Rl, (c)) : tensor_view3(p, adt, dev, B, T, (c)), ADV(Rl * (c) * es)
#define L2(t) (t) = sp ? tensor_view2(p, F, dev, 1, Rl) : tensor_view2(p, F, dev, B, T), ADV(Rl * 4)
  for (int l = 0; l <= L; l++)
    if (part && l < L && m->held[l]) m->x[l] = tensor_view3(p, adt, dev, 1, R / t, C), ADV(R / t * C * es);
    else if ((l < L && m->held[l]) || (l > 0 && m->held[l - 1])) L3(m->x[l], C);
#define SET(a)                                                                                     \
  L3((a)->ln1, C), L2((a)->ln1_mean), L2((a)->ln1_rstd), T3((a)->qkv, C3), T3((a)->atty, Ca),           \
      (a)->lse = tensor_view3(p, F, dev, B, NH, T), ADV(R * NH * 4), L3((a)->res2, C), L3((a)->ln2, C), \
      L2((a)->ln2_mean), L2((a)->ln2_rstd), T3((a)->fch, C4), T3((a)->fch_gelu, C4)
  for (int l = 0; l < L && nsets; l++) /* by block */
    if (m->held[l]) SET(&m->acts[l]);
  if (head) T3(m->lnf_out, C), L2(m->lnf_mean), L2(m->lnf_rstd);
  if (full) F3(m->logits, Vl);
  else m->logits = tensor_view3(NULL, F, dev, B, T, Vl); /* fused: none until a forward without targets */
  if (head) T2(m->losses), T2(m->lse);
  p = m->g_store.data; /* scratch that no microbatch keeps: one set, whatever the slots */
  L3(m->tmp, C);
  L3(m->dres, C), L3(m->dln, C), T3(m->dqkv, C3), T3(m->datty, Ca), T3(m->dfch, C4), T3(m->dfch_gelu, C4);
  if (sp) {
    T3(m->gath, C), T3(m->dfull, C);
    m->spg = tensor_view1(p, F, dev, 4 * C), ADV(4 * C * 4);
  }
  if (full) F3(m->dlogits, Vl);
  if (hf) F3(m->hx, C), F3(m->dhx, C);
  if (m->cfg.recompute && nheld) SET(&m->acts[0]);
#undef SET
  if (part) T3(m->xa, C), T3(m->xb, C);
  int32_t *ids = m->ids_store.data;
  m->tokens = tensor_view2(ids, TENSOR_I32, dev, B, T);
  m->targets = tensor_view2(ids + m->cap_bt, TENSOR_I32, dev, B, T);
#undef ADV
#undef T3
#undef F3
#undef T2
#undef L3
#undef L2
  m->B = B;
  m->T = T;
fail:
  return rc;
}

/* ---- accessors ---- */

static size_t nparams(const par_gpt_t *m) {
  const par_gpt_view_t *v = &m->views[m->nviews - 1];
  return v->offset + v->numel;
}
float *par_gpt_params(par_gpt_t *m, size_t *count) {
  if (count) *count = m ? nparams(m) : 0;
  return m ? m->params.data : NULL;
}
float *par_gpt_grads(par_gpt_t *m, size_t *count) {
  if (count) *count = m ? nparams(m) : 0;
  return m ? m->grads.data : NULL;
}
const float *par_gpt_logits(const par_gpt_t *m) { return m && m->cap_bt ? m->logits.data : NULL; }
const par_gpt_config_t *par_gpt_config(const par_gpt_t *m) { return m ? &m->cfg : NULL; }
int par_gpt_num_views(const par_gpt_t *m) { return m ? m->nviews : 0; }
const par_gpt_view_t *par_gpt_view(const par_gpt_t *m, int i) {
  return m && i >= 0 && i < m->nviews ? &m->views[i] : NULL;
}
struct tensor_ctx *par_gpt_tensor_ctx(par_gpt_t *m) { return m ? m->tc : NULL; }
int par_gpt_device(const par_gpt_t *m) { return m ? m->device : TENSOR_CPU; }

const par_gpt_view_t *par_gpt_find_view(const par_gpt_t *m, const char *name) {
  for (int i = 0; m && name && i < m->nviews; i++)
    if (!strcmp(m->views[i].name, name)) return &m->views[i];
  return NULL;
}
int par_gpt_memory(const par_gpt_t *m, size_t *current, size_t *peak) {
  if (!m) return STRATA_EINVAL;
  return tensor_memory(m->tc, m->device, current, peak);
}

int par_gpt_zero_grad(par_gpt_t *m) {
  if (!m) return STRATA_EINVAL;
  if (m->opts.external) return STRATA_OK; /* the gradients are the caller's */
  int rc = tensor_zero(m->tc, &m->grads);
  return rc ? gpt_tensor_err(m, rc) : STRATA_OK;
}

int par_gpt_synchronize(par_gpt_t *m) {
  if (!m) return STRATA_EINVAL;
  int rc = tensor_synchronize(m->tc);
  return rc ? gpt_tensor_err(m, rc) : STRATA_OK;
}
