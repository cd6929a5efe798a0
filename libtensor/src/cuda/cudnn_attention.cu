/* Causal attention through cuDNN's fused flash attention (cuDNN 9 backend
 * graph API), forward and backward, on tensor cores. libcudnn.so.9 is loaded
 * with dlopen on first use, so programs start where it is absent and run
 * strata's own kernel there. The graphs are described in ../sdpa_graph.c;
 * this file turns them into backend descriptors, keeps one execution plan
 * per shape in the context's CUDA state, and converts between strata's f32
 * tensors and the bf16 ones cuDNN computes on:
 *
 *   qkv f32 [B,T,3C] -> bf16 copy; Q, K, V are strided views into it
 *   O bf16 [B,T,C] -> out f32; the row statistics go straight into lse
 *   backward: dO -> bf16, dQ/dK/dV bf16 [B,T,3C] -> dqkv += f32
 *
 * cuDNN's statistics are max + ln(sum exp(s - max)) of the scaled scores,
 * strata's lse convention (see sdpa_graph.c), so the saved tensors keep their
 * meaning and either backward can follow either forward. */
#include <dlfcn.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cudnn_graph.h>

#include "common.cuh"
#include "sdpa_graph.h"

/* ---- the library, loaded once per process ---- */

static struct {
  int version; /* 0: not loaded */
  int env;     /* STRATA_ATTENTION: 0 unset, TENSOR_ATTENTION_OWN or _CUDNN */
  decltype(&cudnnGetVersion) get_version;
  decltype(&cudnnGetErrorString) error_string;
  decltype(&cudnnGetLastErrorString) last_error;
  decltype(&cudnnCreate) create;
  decltype(&cudnnDestroy) destroy;
  decltype(&cudnnBackendCreateDescriptor) create_desc;
  decltype(&cudnnBackendDestroyDescriptor) destroy_desc;
  decltype(&cudnnBackendSetAttribute) set;
  decltype(&cudnnBackendGetAttribute) get;
  decltype(&cudnnBackendFinalize) finalize;
  decltype(&cudnnBackendExecute) execute;
} dnn;
static pthread_once_t dnn_once = PTHREAD_ONCE_INIT;

#define RESOLVE(field, name) (dnn.field = (decltype(dnn.field))dlsym(h, name)) != NULL

static void dnn_load(void) {
  const char *e = getenv("STRATA_ATTENTION");
  if (e && *e) {
    if (!strcmp(e, "own"))
      dnn.env = TENSOR_ATTENTION_OWN;
    else if (!strcmp(e, "cudnn"))
      dnn.env = TENSOR_ATTENTION_CUDNN;
    else
      fprintf(stderr, "strata: STRATA_ATTENTION=%s ignored (own or cudnn)\n", e);
  }
  void *h = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "strata: cuDNN not loaded (%s); CUDA attention runs strata's own kernel\n",
            dlerror());
    return;
  }
  if (!(RESOLVE(get_version, "cudnnGetVersion") && RESOLVE(error_string, "cudnnGetErrorString") &&
        RESOLVE(last_error, "cudnnGetLastErrorString") && RESOLVE(create, "cudnnCreate") &&
        RESOLVE(destroy, "cudnnDestroy") && RESOLVE(create_desc, "cudnnBackendCreateDescriptor") &&
        RESOLVE(destroy_desc, "cudnnBackendDestroyDescriptor") &&
        RESOLVE(set, "cudnnBackendSetAttribute") && RESOLVE(get, "cudnnBackendGetAttribute") &&
        RESOLVE(finalize, "cudnnBackendFinalize") && RESOLVE(execute, "cudnnBackendExecute"))) {
    fprintf(stderr, "strata: libcudnn.so.9 lacks %s; CUDA attention runs strata's own kernel\n",
            dlerror());
    dlclose(h);
    return;
  }
  dnn.version = (int)dnn.get_version();
}

extern "C" int tcu_cudnn_version(void) {
  pthread_once(&dnn_once, dnn_load);
  return dnn.version;
}

/* "status name: last error message" of the latest failed call. */
static const char *dnn_message(cudnnStatus_t st, char *buf, size_t len) {
  char last[256] = "";
  dnn.last_error(last, sizeof last);
  snprintf(buf, len, "%s%s%s", dnn.error_string(st), last[0] ? ": " : "", last);
  return buf;
}

/* ---- plans, one per shape, in the context's CUDA state ---- */

struct sdpa_plan {
  int B, T, NH, hs, backward;
  int ok; /* 0: cuDNN has no plan for it, strata's kernel runs */
  cudnnBackendDescriptor_t plan;
  cudnnBackendDescriptor_t *descs; /* everything the plan was built from, freed with it */
  int ndescs, cap;
  int64_t workspace;
  float scale, lowest, one; /* the by-value scalars the variant pack points at */
  int64_t dq_accum_bytes, dsum_bytes;
};

struct tcu_sdpa {
  cudnnHandle_t handle;
  sdpa_plan *plans;
  int n, cap;
};

static void plan_release(sdpa_plan *p) {
  if (p->plan) dnn.destroy_desc(p->plan);
  for (int i = p->ndescs - 1; i >= 0; i--)
    dnn.destroy_desc(p->descs[i]);
  free(p->descs);
  p->plan = NULL, p->descs = NULL, p->ndescs = p->cap = 0;
}

void tcu_sdpa_destroy(tcu_state *s) {
  tcu_sdpa *d = s->sdpa;
  if (!d) return;
  for (int i = 0; i < d->n; i++)
    plan_release(&d->plans[i]);
  free(d->plans);
  if (d->handle) dnn.destroy(d->handle);
  free(d);
  s->sdpa = NULL;
}

/* The graph builder: every call is a no-op once one failed, so a build reads
 * as a straight list and is checked once at the end. */
struct builder {
  sdpa_plan *p;
  cudnnStatus_t st;
  const char *what; /* the step that failed */
  int oom;
};

static cudnnBackendDescriptor_t make(builder *b, cudnnBackendDescriptorType_t type,
                                     const char *what) {
  cudnnBackendDescriptor_t d = NULL;
  if (b->st || b->oom) return NULL;
  sdpa_plan *p = b->p;
  if (p->ndescs == p->cap) {
    int cap = p->cap ? 2 * p->cap : 64;
    void *n = realloc(p->descs, sizeof *p->descs * (size_t)cap);
    if (!n) {
      b->oom = 1;
      return NULL;
    }
    p->descs = (cudnnBackendDescriptor_t *)n, p->cap = cap;
  }
  b->st = dnn.create_desc(type, &d);
  if (b->st) {
    b->what = what;
    return NULL;
  }
  p->descs[p->ndescs++] = d;
  return d;
}

static void set(builder *b, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                cudnnBackendAttributeType_t type, int64_t n, const void *v, const char *what) {
  if (b->st || b->oom) return;
  b->st = dnn.set(d, name, type, n, v);
  if (b->st) b->what = what;
}

static void done(builder *b, cudnnBackendDescriptor_t d, const char *what) {
  if (b->st || b->oom) return;
  b->st = dnn.finalize(d);
  if (b->st) b->what = what;
}

static cudnnDataType_t dtype_of(sdpa_dtype_t t) {
  switch (t) {
  case SDPA_BF16: return CUDNN_DATA_BFLOAT16;
  case SDPA_I32: return CUDNN_DATA_INT32;
  case SDPA_BOOL: return CUDNN_DATA_BOOLEAN;
  default: return CUDNN_DATA_FLOAT;
  }
}

static cudnnPointwiseMode_t pw_of(int mode) {
  switch (mode) {
  case SDPA_PW_ADD: return CUDNN_POINTWISE_ADD;
  case SDPA_PW_SUB: return CUDNN_POINTWISE_SUB;
  case SDPA_PW_MUL: return CUDNN_POINTWISE_MUL;
  case SDPA_PW_DIV: return CUDNN_POINTWISE_DIV;
  case SDPA_PW_EXP: return CUDNN_POINTWISE_EXP;
  case SDPA_PW_LOG: return CUDNN_POINTWISE_LOG;
  case SDPA_PW_GEN_INDEX: return CUDNN_POINTWISE_GEN_INDEX;
  case SDPA_PW_CMP_GE: return CUDNN_POINTWISE_CMP_GE;
  case SDPA_PW_SELECT: return CUDNN_POINTWISE_BINARY_SELECT;
  default: return CUDNN_POINTWISE_IDENTITY;
  }
}

static cudnnBackendDescriptor_t tensor_desc(builder *b, const sdpa_tensor_t *t) {
  cudnnBackendDescriptor_t d = make(b, CUDNN_BACKEND_TENSOR_DESCRIPTOR, t->name);
  cudnnDataType_t dt = dtype_of(t->dtype);
  int64_t align = 16, uid = t->uid;
  bool virt = t->is_virtual != 0, by_value = true;
  set(b, d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt, t->name);
  set(b, d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, t->dim, t->name);
  set(b, d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, t->stride, t->name);
  set(b, d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, t->name);
  set(b, d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, t->name);
  set(b, d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt, t->name);
  if (t->by_value)
    set(b, d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, t->name);
  done(b, d, t->name);
  return d;
}

static cudnnBackendDescriptor_t op_desc(builder *b, const sdpa_op_t *o,
                                        cudnnBackendDescriptor_t *td) {
  cudnnBackendDescriptor_t op = NULL, sub;
  cudnnDataType_t comp = dtype_of(o->compute);
  const char *w = o->name;
  switch (o->kind) {
  case SDPA_MATMUL:
    sub = make(b, CUDNN_BACKEND_MATMUL_DESCRIPTOR, w);
    set(b, sub, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, w);
    done(b, sub, w);
    op = make(b, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, w);
    set(b, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &td[o->x], w);
    set(b, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &td[o->b], w);
    set(b, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &td[o->y], w);
    set(b, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &sub, w);
    break;
  case SDPA_POINTWISE: {
    cudnnPointwiseMode_t mode = pw_of(o->mode);
    int64_t axis = o->axis;
    sub = make(b, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, w);
    set(b, sub, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, w);
    set(b, sub, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &comp, w);
    if (o->mode == SDPA_PW_GEN_INDEX)
      set(b, sub, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, w);
    done(b, sub, w);
    op = make(b, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, w);
    set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &sub,
        w);
    set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &td[o->x],
        w);
    if (o->b >= 0)
      set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &td[o->b],
          w);
    if (o->t >= 0)
      set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &td[o->t],
          w);
    set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &td[o->y],
        w);
    break;
  }
  case SDPA_REDUCE: {
    cudnnReduceTensorOp_t red =
        o->mode == SDPA_RED_MAX ? CUDNN_REDUCE_TENSOR_MAX : CUDNN_REDUCE_TENSOR_ADD;
    sub = make(b, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, w);
    set(b, sub, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &red, w);
    set(b, sub, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, w);
    done(b, sub, w);
    op = make(b, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, w);
    set(b, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &td[o->x],
        w);
    set(b, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &td[o->y],
        w);
    set(b, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &sub, w);
    break;
  }
  case SDPA_RESHAPE:
    op = make(b, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, w);
    set(b, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &td[o->x], w);
    set(b, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &td[o->y], w);
    break;
  }
  done(b, op, w);
  return op;
}

/* The first engine configuration whose execution plan finalizes, from
 * heuristics mode A, then from the fallback list. A heuristics query that
 * fails only moves on to the next list; b->st says why no plan was found. */
static void choose_plan(builder *b, cudnnHandle_t handle, cudnnBackendDescriptor_t graph) {
  cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
  cudnnStatus_t last = CUDNN_STATUS_NOT_SUPPORTED;
  const char *why = "execution plan (no engine accepted the graph)";
  for (int m = 0; m < 2 && !b->p->plan && !b->st && !b->oom; m++) {
    cudnnBackendDescriptor_t heur =
        make(b, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "engine heuristics");
    if (!heur) return;
    int64_t count = 0, got = 0;
    cudnnStatus_t st = dnn.set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                               CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
    if (!st) st = dnn.set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &modes[m]);
    if (!st) st = dnn.finalize(heur);
    if (!st)
      st = dnn.get(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                   NULL);
    if (st) {
      last = st, why = "engine heuristics";
      continue;
    }
    if (count > 64) count = 64;
    cudnnBackendDescriptor_t cfg[64];
    for (int64_t i = 0; i < count; i++)
      cfg[i] = make(b, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config");
    if (b->st || b->oom) return;
    if (count > 0 && (st = dnn.get(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfg))) {
      last = st, why = "engine heuristics results";
      continue;
    }
    for (int64_t i = 0; i < got && !b->p->plan; i++) {
      cudnnBackendDescriptor_t plan = NULL;
      st = dnn.create_desc(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan);
      if (!st) st = dnn.set(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
      if (!st)
        st = dnn.set(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                     1, &cfg[i]);
      if (!st) st = dnn.finalize(plan);
      if (!st) {
        b->p->plan = plan;
      } else {
        last = st, why = "execution plan (no engine accepted the graph)";
        if (plan) dnn.destroy_desc(plan);
      }
    }
  }
  if (!b->p->plan && !b->st && !b->oom) b->st = last, b->what = why;
}

/* The tensor and operation descriptors of g, finalized (no device needed). */
static void build_ops(builder *b, const sdpa_graph_t *g, cudnnBackendDescriptor_t *ops) {
  cudnnBackendDescriptor_t td[SDPA_MAX_TENSORS];
  for (int i = 0; i < g->ntensors; i++)
    td[i] = tensor_desc(b, &g->t[i]);
  for (int i = 0; i < g->nops; i++)
    ops[i] = op_desc(b, &g->op[i], td);
}

extern "C" int tcu_sdpa_check_ops(int backward, int B, int T, int NH, int hs, char *msg,
                                  size_t len) {
  pthread_once(&dnn_once, dnn_load);
  if (!dnn.version) return 1;
  sdpa_plan p;
  memset(&p, 0, sizeof p);
  builder b = {&p, CUDNN_STATUS_SUCCESS, NULL, 0};
  cudnnBackendDescriptor_t ops[SDPA_MAX_OPS];
  sdpa_graph_t *g = (sdpa_graph_t *)malloc(sizeof *g);
  int rc = -1;
  char m[384];
  if (!g || sdpa_graph_build(g, backward, B, T, NH, hs)) {
    snprintf(msg, len, "no graph");
  } else {
    build_ops(&b, g, ops);
    if (b.oom)
      snprintf(msg, len, "out of memory");
    else if (b.st)
      snprintf(msg, len, "%s: %s", b.what ? b.what : "?", dnn_message(b.st, m, sizeof m));
    else
      rc = 0;
  }
  free(g);
  plan_release(&p);
  return rc;
}

static void build(builder *b, cudnnHandle_t handle, const sdpa_graph_t *g) {
  cudnnBackendDescriptor_t ops[SDPA_MAX_OPS];
  build_ops(b, g, ops);
  cudnnBackendDescriptor_t graph =
      make(b, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
  set(b, graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle, "operation graph");
  set(b, graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->nops, ops,
      "operation graph");
  done(b, graph, "operation graph");
  choose_plan(b, handle, graph);
  if (!b->st && !b->oom) {
    int64_t got = 0;
    b->st = dnn.get(b->p->plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &got,
                    &b->p->workspace);
    if (b->st) b->what = "workspace size";
  }
}

/* The plan for this shape, built on first use. *p->ok == 0 means cuDNN cannot
 * run it (strata's kernel will, after one line on stderr). */
static int plan_get(tensor_ctx_t *ctx, tcu_state *s, int backward, int B, int T, int NH, int hs,
                    sdpa_plan **out) {
  if (!s->sdpa) {
    tcu_sdpa *d = (tcu_sdpa *)calloc(1, sizeof *d);
    if (!d) return tensor_seterr(ctx, STRATA_ENOMEM, "cuDNN attention state");
    cudnnStatus_t st = dnn.create(&d->handle);
    if (st) {
      char m[384];
      free(d);
      return tensor_seterr(ctx, STRATA_ECUDA, "cudnnCreate on cuda:%d: %s", s->device,
                           dnn_message(st, m, sizeof m));
    }
    s->sdpa = d;
  }
  tcu_sdpa *d = s->sdpa;
  for (int i = 0; i < d->n; i++) {
    sdpa_plan *p = &d->plans[i];
    if (p->B == B && p->T == T && p->NH == NH && p->hs == hs && p->backward == backward) {
      *out = p;
      return STRATA_OK;
    }
  }
  if (d->n == d->cap) {
    int cap = d->cap ? 2 * d->cap : 8;
    void *n = realloc(d->plans, sizeof *d->plans * (size_t)cap);
    if (!n) return tensor_seterr(ctx, STRATA_ENOMEM, "cuDNN attention plans");
    d->plans = (sdpa_plan *)n, d->cap = cap;
  }
  sdpa_plan *p = &d->plans[d->n];
  memset(p, 0, sizeof *p);
  p->B = B, p->T = T, p->NH = NH, p->hs = hs, p->backward = backward;
  p->scale = 1.f / sqrtf((float)hs), p->lowest = -FLT_MAX, p->one = 1.f;
  const char *dir = backward ? "backward" : "forward";
  char why[512] = "";
  if (hs % 8 || hs > 256) {
    snprintf(why, sizeof why,
             "head size %d (cuDNN's fused attention takes multiples of 8 up to 256)", hs);
  } else if (backward && T % 128 && dnn.version < 91600) {
    /* before 9.16 cuDNN's backward needs a padding mask for such lengths */
    snprintf(why, sizeof why,
             "sequence length %d with cuDNN %d (below 9.16 the backward needs T %% 128 == 0)", T,
             dnn.version);
  } else {
    sdpa_graph_t *g = (sdpa_graph_t *)malloc(sizeof *g);
    if (!g) return tensor_seterr(ctx, STRATA_ENOMEM, "cuDNN attention graph");
    builder b = {p, CUDNN_STATUS_SUCCESS, NULL, 0};
    if (sdpa_graph_build(g, backward, B, T, NH, hs)) {
      free(g);
      return tensor_seterr(ctx, STRATA_EINVAL,
                           "cuDNN attention graph for B %d T %d heads %d head size %d", B, T, NH,
                           hs);
    }
    p->dq_accum_bytes = g->dq_accum_bytes, p->dsum_bytes = g->dsum_bytes;
    build(&b, d->handle, g);
    free(g);
    if (b.oom) {
      plan_release(p);
      return tensor_seterr(ctx, STRATA_ENOMEM, "cuDNN attention %s plan", dir);
    }
    if (b.st) {
      char m[384];
      snprintf(why, sizeof why, "%s: %s", b.what ? b.what : "?", dnn_message(b.st, m, sizeof m));
      plan_release(p);
    } else {
      p->ok = 1;
    }
  }
  if (!p->ok)
    fprintf(stderr,
            "strata: cuDNN attention %s for B %d T %d heads %d head size %d not available (%s); "
            "strata's own "
            "kernel runs it\n",
            dir, B, T, NH, hs, why);
  d->n++;
  *out = p;
  return STRATA_OK;
}

/* Whether this context's attention goes to cuDNN: bf16 activations (adt)
 * count as a bf16 context's; f16 ones never (the graph is bf16). */
static int wanted(tensor_ctx_t *ctx, int adt) {
  int mode = tensor_ctx_attention(ctx);
  if (mode == TENSOR_ATTENTION_OWN || adt == TENSOR_F16) return 0;
  if (mode == TENSOR_ATTENTION_AUTO && !tensor_ctx_bf16_matmul(ctx) && adt != TENSOR_BF16) return 0;
  pthread_once(&dnn_once, dnn_load);
  if (mode == TENSOR_ATTENTION_AUTO && dnn.env == TENSOR_ATTENTION_OWN) return 0;
  return dnn.version > 0;
}

static int execute(tensor_ctx_t *ctx, tcu_sdpa *d, sdpa_plan *p, int n, const int64_t *uids,
                   void **ptrs, void *workspace) {
  cudnnBackendDescriptor_t pack = NULL;
  cudnnStatus_t st = dnn.create_desc(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
  if (!st) st = dnn.set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
  if (!st) st = dnn.set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs);
  if (!st)
    st = dnn.set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  if (!st) st = dnn.finalize(pack);
  if (!st) st = dnn.execute(d->handle, p->plan, pack);
  if (pack) dnn.destroy_desc(pack);
  if (st) {
    char m[384];
    return tensor_seterr(ctx, STRATA_ECUDA,
                         "cuDNN attention %s (B %d T %d heads %d head size %d): %s",
                         p->backward ? "backward" : "forward", p->B, p->T, p->NH, p->hs,
                         dnn_message(st, m, sizeof m));
  }
  return STRATA_OK;
}

static size_t align256(size_t n) {
  return (n + 255) / 256 * 256;
}

template <typename A>
__global__ void k_acc_bf16(A *dst, const __nv_bfloat16 *src, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    stf(dst + i, ldf(dst + i) + __bfloat162float(src[i]));
}

/* f32 activations are rounded to bf16 in scratch (and the output cast
 * back); bf16 ones go to cuDNN as they are. */
int tcu_sdpa_forward(tensor_ctx_t *ctx, void *out, float *lse, const void *qkv, int adt, int B, int T,
                     int C, int NH) {
  if (!wanted(ctx, adt)) return TCU_SDPA_DECLINED;
  tcu_state *s;
  sdpa_plan *p;
  int rc = tcu_state_get(ctx, &s);
  if (!rc) rc = plan_get(ctx, s, 0, B, T, NH, C / NH, &p);
  if (rc) return rc;
  if (!p->ok) return TCU_SDPA_DECLINED;
  int own = adt == TENSOR_BF16; /* the operands as they are */
  size_t nqkv = (size_t)B * T * 3 * C, no = (size_t)B * T * C;
  size_t oq = 0, oo = oq + (own ? 0 : align256(nqkv * 2)), ow = oo + (own ? 0 : align256(no * 2));
  void *scr;
  rc = tcu_scratch(ctx, ow + (size_t)p->workspace, &scr);
  if (rc) return rc;
  char *base = (char *)scr;
  __nv_bfloat16 *q16 = (__nv_bfloat16 *)(base + oq), *o16 = (__nv_bfloat16 *)(base + oo);
  if (own) {
    q16 = (__nv_bfloat16 *)qkv, o16 = (__nv_bfloat16 *)out;
  } else {
    rc = tcu_cast(ctx, q16, TENSOR_BF16, qkv, TENSOR_F32, (int64_t)nqkv);
    if (rc) return rc;
  }
  int64_t uids[7] = {SDPA_UID_Q,     SDPA_UID_K,     SDPA_UID_V,  SDPA_UID_O,
                     SDPA_UID_STATS, SDPA_UID_SCALE, SDPA_UID_NEG};
  void *ptrs[7] = {q16, q16 + C, q16 + 2 * C, o16, lse, &p->scale, &p->lowest};
  rc = execute(ctx, s->sdpa, p, 7, uids, ptrs, p->workspace ? base + ow : NULL);
  if (rc || own) return rc;
  return tcu_cast(ctx, out, TENSOR_F32, o16, TENSOR_BF16, (int64_t)no);
}

int tcu_sdpa_backward(tensor_ctx_t *ctx, void *dqkv, const void *dout, const void *qkv, const void *out,
                      int adt, const float *lse, int B, int T, int C, int NH) {
  if (!wanted(ctx, adt)) return TCU_SDPA_DECLINED;
  tcu_state *s;
  sdpa_plan *p;
  int rc = tcu_state_get(ctx, &s);
  if (!rc) rc = plan_get(ctx, s, 1, B, T, NH, C / NH, &p);
  if (rc) return rc;
  if (!p->ok) return TCU_SDPA_DECLINED;
  int own = adt == TENSOR_BF16;
  size_t nqkv = (size_t)B * T * 3 * C, no = (size_t)B * T * C;
  size_t oq = 0, oo = oq + (own ? 0 : align256(nqkv * 2)), odo = oo + (own ? 0 : align256(no * 2)),
         odq = odo + (own ? 0 : align256(no * 2));
  size_t oacc = odq + align256(nqkv * 2), osum = oacc + align256((size_t)p->dq_accum_bytes);
  size_t ow = osum + align256((size_t)p->dsum_bytes);
  void *scr;
  rc = tcu_scratch(ctx, ow + (size_t)p->workspace, &scr);
  if (rc) return rc;
  char *base = (char *)scr;
  __nv_bfloat16 *q16 = (__nv_bfloat16 *)(base + oq), *o16 = (__nv_bfloat16 *)(base + oo);
  __nv_bfloat16 *do16 = (__nv_bfloat16 *)(base + odo), *dq16 = (__nv_bfloat16 *)(base + odq);
  if (own) {
    q16 = (__nv_bfloat16 *)qkv, o16 = (__nv_bfloat16 *)out, do16 = (__nv_bfloat16 *)dout;
  } else if ((rc = tcu_cast(ctx, q16, TENSOR_BF16, qkv, TENSOR_F32, (int64_t)nqkv)) ||
             (rc = tcu_cast(ctx, o16, TENSOR_BF16, out, TENSOR_F32, (int64_t)no)) ||
             (rc = tcu_cast(ctx, do16, TENSOR_BF16, dout, TENSOR_F32, (int64_t)no))) {
    return rc;
  }
  /* cuDNN before 9.6 expects the dQ accumulator zeroed; later ones zero it themselves */
  CU(cudaMemsetAsync(base + oacc, 0, (size_t)p->dq_accum_bytes));
  int64_t uids[14] = {SDPA_UID_Q,   SDPA_UID_K,   SDPA_UID_V,        SDPA_UID_O,   SDPA_UID_STATS,
                      SDPA_UID_DO,  SDPA_UID_DQ,  SDPA_UID_DK,       SDPA_UID_DV,  SDPA_UID_SCALE,
                      SDPA_UID_NEG, SDPA_UID_ONE, SDPA_UID_DQ_ACCUM, SDPA_UID_DSUM};
  void *ptrs[14] = {q16,        q16 + C, q16 + 2 * C, o16,          (void *)lse,
                    do16,       dq16,    dq16 + C,    dq16 + 2 * C, &p->scale,
                    &p->lowest, &p->one, base + oacc, base + osum};
  rc = execute(ctx, s->sdpa, p, 14, uids, ptrs, p->workspace ? base + ow : NULL);
  if (rc) return rc;
  if (own)
    k_acc_bf16<__nv_bfloat16><<<blocks_for((int64_t)nqkv, 256), 256>>>((__nv_bfloat16 *)dqkv, dq16, (int64_t)nqkv);
  else
    k_acc_bf16<float><<<blocks_for((int64_t)nqkv, 256), 256>>>((float *)dqkv, dq16, (int64_t)nqkv);
  LAUNCHED();
  return STRATA_OK;
}
