/* The context (threads, memory accountant, last error) and tensor storage. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <strata/half.h>

#include "simd.h"
#include "tensor_internal.h"

void openblas_set_num_threads(int num_threads);

int tensor_seterr(tensor_ctx_t *ctx, int code, const char *fmt, ...) {
  if (ctx) { /* an allocation failure says so first, whatever the call */
    int at = code == STRATA_ENOMEM && !strstr(fmt, "out of memory")
                 ? snprintf(ctx->err, sizeof ctx->err, "out of memory: ")
                 : 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->err + at, sizeof ctx->err - (size_t)at, fmt, ap);
    va_end(ap);
  }
  return code;
}

const char *tensor_last_error(const tensor_ctx_t *ctx) { return ctx ? ctx->err : "no context"; }
const char *tensor_strerror(int code) { return strata_status_string(code); }
int tensor_ctx_threads(const tensor_ctx_t *ctx) { return ctx ? ctx->threads : 1; }
void **tensor_ctx_cuda_state(tensor_ctx_t *ctx) { return &ctx->cuda; }
void **tensor_ctx_cublaslt(tensor_ctx_t *ctx) { return &ctx->cublaslt; }
int tensor_ctx_device(const tensor_ctx_t *ctx) { return ctx->device; }
int tensor_ctx_bf16_matmul(const tensor_ctx_t *ctx) { return ctx->bf16_matmul; }
int tensor_ctx_attention(const tensor_ctx_t *ctx) { return ctx->attention; }

int tensor_cuda_device_name(int device, char *name, size_t len) {
  if (name && len) name[0] = 0;
  if (!name || !len || device < 0) return STRATA_EINVAL;
#if defined(STRATA_CUDA)
  if (device < tcu_device_count() && tcu_device_name(device, name, len) == 0) return STRATA_OK;
  name[0] = 0;
#endif
  return STRATA_EUNSUPPORTED;
}

double tensor_cuda_table_peak(const char *n) {
  if (!n || strstr(n, "NVL")) return 0; /* H100 NVL, H200 NVL: other clocks and power */
  if (strstr(n, "H100")) return strstr(n, "PCIe") ? 756.5e12 : 989.4e12;
  if (strstr(n, "H200")) return 989.4e12;
  if (strstr(n, "A100")) return 312e12;
  if (strstr(n, "L40S")) return 362.05e12;
  if (strstr(n, "RTX 4090")) return 165.2e12;
  return 0;
}

int tensor_cuda_device_count(void) {
#if defined(STRATA_CUDA)
  return tcu_device_count();
#else
  return 0;
#endif
}

int tensor_cudnn_version(void) {
#if defined(STRATA_CUDA)
  return tcu_cudnn_version();
#else
  return 0;
#endif
}

int tensor_ctx_create(tensor_ctx_t **out, const tensor_ctx_options_t *opts) {
  tensor_ctx_options_t o = TENSOR_CTX_OPTIONS_DEFAULTS;
  if (!out) return STRATA_EINVAL;
  *out = NULL;
  if (opts) o = *opts;
  if (o.threads < 0 || o.device < 0 || o.device >= TENSOR_MAX_DEVICES ||
      (unsigned)o.cuda_alloc > TENSOR_CUDA_ALLOC_DIRECT || o.attention < TENSOR_ATTENTION_AUTO ||
      o.attention > TENSOR_ATTENTION_CUDNN)
    return STRATA_EINVAL;
  tensor_ctx_t *ctx = calloc(1, sizeof *ctx);
  if (!ctx) return STRATA_ENOMEM;
  ctx->threads = o.threads > 0 ? o.threads : omp_get_max_threads();
  if (ctx->threads > TENSOR_SCRATCH_SLOTS) ctx->threads = TENSOR_SCRATCH_SLOTS;
  ctx->device = o.device;
  ctx->bf16_matmul = o.bf16_matmul;
  ctx->cuda_alloc = o.cuda_alloc;
  if (o.cuda_alloc == TENSOR_CUDA_ALLOC_AUTO) {
    /* A debugging switch every program honours, read here rather than by
     * the runner: a bad value fails the first device allocation, by name. */
    const char *e = getenv("STRATA_CUDA_ALLOC");
    ctx->cuda_alloc = !e || !*e || !strcmp(e, "cache") ? TENSOR_CUDA_ALLOC_CACHE
                      : !strcmp(e, "direct")           ? TENSOR_CUDA_ALLOC_DIRECT
                                                       : -1;
    if (ctx->cuda_alloc < 0) snprintf(ctx->cuda_alloc_env, sizeof ctx->cuda_alloc_env, "%s", e);
  }
  ctx->attention = o.attention;
  /* The context owns the cores through OpenMP; OpenBLAS runs single-threaded
   * inside its regions (see the header). */
  openblas_set_num_threads(1);
  *out = ctx;
  return STRATA_OK;
}

float *tensor_scratch(tensor_ctx_t *ctx, int slot, size_t bytes) {
  if (slot < 0 || slot >= TENSOR_SCRATCH_SLOTS) return NULL;
  if (ctx->scratch_bytes[slot] < bytes) {
    free(ctx->scratch[slot]);
    ctx->scratch[slot] = aligned_alloc(64, (bytes + 63) / 64 * 64);
    ctx->scratch_bytes[slot] = ctx->scratch[slot] ? bytes : 0;
  }
  return ctx->scratch[slot];
}

size_t tensor_scratch_bytes(const tensor_ctx_t *ctx) {
  size_t n = 0;
  for (int i = 0; ctx && i < TENSOR_SCRATCH_SLOTS; i++) n += ctx->scratch_bytes[i];
  return n;
}

void tensor_ctx_destroy(tensor_ctx_t *ctx) {
  if (!ctx) return;
  for (int i = 0; i < TENSOR_SCRATCH_SLOTS; i++) free(ctx->scratch[i]);
  tensor_device_pools_destroy(ctx);
#if defined(STRATA_CUDA)
  tcu_lt_destroy(ctx);
  tcu_ctx_destroy(ctx);
#endif
  free(ctx);
}

int tensor_synchronize(tensor_ctx_t *ctx) {
#if defined(STRATA_CUDA)
  if (ctx && ctx->cuda) return tcu_sync(ctx);
#endif
  return ctx ? STRATA_OK : STRATA_EINVAL;
}

/* ---- memory accountant ---- */

void tensor_mem_add(tensor_ctx_t *ctx, int device, size_t bytes) {
  int s = mem_slot(device);
  size_t cur = atomic_fetch_add(&ctx->mem_current[s], bytes) + bytes;
  size_t peak = atomic_load(&ctx->mem_peak[s]);
  while (cur > peak && !atomic_compare_exchange_weak(&ctx->mem_peak[s], &peak, cur)) {
  }
}

void tensor_mem_sub(tensor_ctx_t *ctx, int device, size_t bytes) {
  atomic_fetch_sub(&ctx->mem_current[mem_slot(device)], bytes);
}

int tensor_memory(const tensor_ctx_t *ctx, int device, size_t *current, size_t *peak) {
  if (!ctx || device < TENSOR_CPU || device >= TENSOR_MAX_DEVICES) return STRATA_EINVAL;
  tensor_ctx_t *c = (tensor_ctx_t *)ctx; /* atomics are read through a non-const pointer */
  if (current) *current = atomic_load(&c->mem_current[mem_slot(device)]);
  if (peak) *peak = atomic_load(&c->mem_peak[mem_slot(device)]);
  return STRATA_OK;
}

int tensor_memory_set_limit(tensor_ctx_t *ctx, int device, size_t bytes) {
  if (!ctx || device < TENSOR_CPU || device >= TENSOR_MAX_DEVICES) return STRATA_EINVAL;
  ctx->mem_limit[mem_slot(device)] = bytes;
  return STRATA_OK;
}

void tensor_memory_reset_peak(tensor_ctx_t *ctx, int device) {
  if (!ctx || device < TENSOR_CPU || device >= TENSOR_MAX_DEVICES) return;
  atomic_store(&ctx->mem_peak[mem_slot(device)], atomic_load(&ctx->mem_current[mem_slot(device)]));
  tensor_device_reset_peak(ctx, device);
}

/* ---- descriptors ---- */

size_t tensor_dtype_size(tensor_dtype_t dtype) {
  switch (dtype) {
  case TENSOR_F32: return 4;
  case TENSOR_BF16: return 2;
  case TENSOR_F16: return 2;
  case TENSOR_I32: return 4;
  }
  return 0;
}

static const char *dtype_name(tensor_dtype_t d) {
  switch (d) {
  case TENSOR_F32: return "f32";
  case TENSOR_BF16: return "bf16";
  case TENSOR_F16: return "f16";
  case TENSOR_I32: return "i32";
  }
  return "?";
}

int64_t tensor_prod(const tensor_t *t, int n) {
  int64_t p = 1;
  for (int i = 0; i < n && i < t->ndim; i++) p *= t->shape[i];
  return p;
}

int64_t tensor_numel(const tensor_t *t) { return t && t->ndim > 0 ? tensor_prod(t, t->ndim) : 0; }
size_t tensor_nbytes(const tensor_t *t) {
  return t ? (size_t)tensor_numel(t) * tensor_dtype_size(t->dtype) : 0;
}

int tensor_same_shape(const tensor_t *a, const tensor_t *b) {
  if (a->ndim != b->ndim) return 0;
  for (int i = 0; i < a->ndim; i++)
    if (a->shape[i] != b->shape[i]) return 0;
  return 1;
}

char *tensor_describe(const tensor_t *t, char *buf, size_t len) {
  if (!buf || len == 0) return buf;
  if (!t) {
    snprintf(buf, len, "NULL");
    return buf;
  }
  int n = snprintf(buf, len, "%s[", dtype_name(t->dtype));
  for (int i = 0; i < t->ndim && n > 0 && (size_t)n < len; i++)
    n += snprintf(buf + n, len - n, i ? ",%lld" : "%lld", (long long)t->shape[i]);
  if (n > 0 && (size_t)n < len) {
    if (t->device == TENSOR_CPU)
      snprintf(buf + n, len - n, "]@cpu");
    else
      snprintf(buf + n, len - n, "]@cuda:%d", t->device);
  }
  return buf;
}

tensor_t tensor_view(void *data, tensor_dtype_t dtype, int device, int ndim, const int64_t *shape) {
  tensor_t t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.ndim = ndim < 0 ? 0 : (ndim > TENSOR_MAX_DIMS ? TENSOR_MAX_DIMS : ndim);
  for (int i = 0; i < t.ndim; i++) t.shape[i] = shape[i];
  return t;
}
tensor_t tensor_view1(void *data, tensor_dtype_t dtype, int device, int64_t d0) {
  int64_t s[1] = {d0};
  return tensor_view(data, dtype, device, 1, s);
}
tensor_t tensor_view2(void *data, tensor_dtype_t dtype, int device, int64_t d0, int64_t d1) {
  int64_t s[2] = {d0, d1};
  return tensor_view(data, dtype, device, 2, s);
}
tensor_t tensor_view3(void *data, tensor_dtype_t dtype, int device, int64_t d0, int64_t d1,
                      int64_t d2) {
  int64_t s[3] = {d0, d1, d2};
  return tensor_view(data, dtype, device, 3, s);
}
tensor_t tensor_view4(void *data, tensor_dtype_t dtype, int device, int64_t d0, int64_t d1,
                      int64_t d2, int64_t d3) {
  int64_t s[4] = {d0, d1, d2, d3};
  return tensor_view(data, dtype, device, 4, s);
}

/* ---- checks ---- */

int tensor_check(tensor_ctx_t *ctx, const char *fn, const char *what, const tensor_t *t,
                 tensor_dtype_t dtype, int lo, int hi) {
  char d[96];
  if (!t || !t->data || t->ndim < 1)
    return tensor_seterr(ctx, STRATA_EINVAL, "%s: %s is missing or empty", fn, what);
  if (t->ndim < lo || t->ndim > hi)
    return tensor_seterr(ctx, STRATA_ESHAPE, "%s: %s is %s, expected %d..%d dims", fn, what,
                         tensor_describe(t, d, sizeof d), lo, hi);
  for (int i = 0; i < t->ndim; i++)
    if (t->shape[i] <= 0)
      return tensor_seterr(ctx, STRATA_ESHAPE, "%s: %s is %s, dims must be positive", fn, what,
                           tensor_describe(t, d, sizeof d));
  if (t->dtype != dtype)
    return tensor_seterr(ctx, STRATA_ESHAPE, "%s: %s is %s, expected dtype %s", fn, what,
                         tensor_describe(t, d, sizeof d), dtype_name(dtype));
  if (t->device < TENSOR_CPU || t->device >= TENSOR_MAX_DEVICES)
    return tensor_seterr(ctx, STRATA_EINVAL, "%s: %s has invalid device %d", fn, what, t->device);
#if !defined(STRATA_CUDA)
  if (t->device != TENSOR_CPU)
    return tensor_seterr(ctx, STRATA_EUNSUPPORTED, "%s: %s is on cuda:%d but strata was built without CUDA",
                         fn, what, t->device);
#else
  /* Kernels and cuBLAS run on the context's device (its handle and scratch). */
  if (ctx && t->device != TENSOR_CPU && t->device != ctx->device)
    return tensor_seterr(ctx, STRATA_ESHAPE, "%s: %s is %s but the context runs on cuda:%d", fn, what,
                         tensor_describe(t, d, sizeof d), ctx->device);
#endif
  return STRATA_OK;
}

int tensor_check_act(tensor_ctx_t *ctx, const char *fn, const char *what, const tensor_t *t,
                     tensor_dtype_t dtype, int lo, int hi) {
  char d[96];
  int rc = tensor_check(ctx, fn, what, t, dtype, lo, hi);
  if (rc) return rc;
  if (dtype != TENSOR_F32 && t->device == TENSOR_CPU)
    return tensor_seterr(ctx, STRATA_EUNSUPPORTED,
                         "%s: %s is %s: 16-bit activations need a CUDA device (the CPU computes in f32: cast first)",
                         fn, what, tensor_describe(t, d, sizeof d));
  return STRATA_OK;
}

int tensor_check_device(tensor_ctx_t *ctx, const char *fn, const char *what, const tensor_t *t,
                        int device) {
  char d[96];
  if (t && t->device != device)
    return tensor_seterr(ctx, STRATA_ESHAPE, "%s: %s is %s but the other operands are on %s%d", fn,
                         what, tensor_describe(t, d, sizeof d), device < 0 ? "cpu" : "cuda:",
                         device < 0 ? 0 : device);
  return STRATA_OK;
}

/* ---- storage ---- */

int tensor_alloc(tensor_ctx_t *ctx, tensor_t *t, tensor_dtype_t dtype, int device, int ndim,
                 const int64_t *shape) {
  int rc = STRATA_OK;
  void *p = NULL;
  if (!ctx) return STRATA_EINVAL;
  CHECK(t && shape, STRATA_EINVAL, "tensor_alloc: NULL tensor or shape");
  memset(t, 0, sizeof *t);
  CHECK(ndim >= 1 && ndim <= TENSOR_MAX_DIMS, STRATA_ESHAPE, "tensor_alloc: ndim %d not in 1..%d",
        ndim, TENSOR_MAX_DIMS);
  CHECK(tensor_dtype_size(dtype) > 0, STRATA_EINVAL, "tensor_alloc: unknown dtype %d", (int)dtype);
  CHECK(device >= TENSOR_CPU && device < TENSOR_MAX_DEVICES, STRATA_EINVAL,
        "tensor_alloc: invalid device %d", device);
  for (int i = 0; i < ndim; i++)
    CHECK(shape[i] > 0, STRATA_ESHAPE, "tensor_alloc: dim %d is %lld", i, (long long)shape[i]);
  tensor_t tmp = tensor_view(NULL, dtype, device, ndim, shape);
  size_t bytes = tensor_nbytes(&tmp), limit = ctx->mem_limit[mem_slot(device)];
  size_t in_use = atomic_load(&ctx->mem_current[mem_slot(device)]);
  CHECK(!limit || in_use + bytes <= limit, STRATA_ENOMEM,
        "tensor_alloc: %zu bytes on %s exceed its limit of %zu bytes (%zu in use)", bytes,
        device == TENSOR_CPU ? "cpu" : "the device", limit, in_use);
  if (device == TENSOR_CPU) {
    size_t rounded = (bytes + 63) / 64 * 64;
    p = aligned_alloc(64, rounded);
    CHECK(p, STRATA_ENOMEM, "tensor_alloc: %zu bytes on cpu", bytes);
    memset(p, 0, bytes);
  } else {
    void *d = NULL;
    TRY(tensor_device_alloc(ctx, &d, bytes, device));
#if defined(STRATA_CUDA)
    rc = tcu_memset0(ctx, d, bytes, device);
    if (rc) {
      tensor_device_free(ctx, d, device);
      goto fail;
    }
#endif
    tmp.data = d;
  }
  if (p) tmp.data = p; /* host memory; device memory is already in tmp.data */
  tmp.owned = 1;
  *t = tmp;
  p = NULL; /* owned by *t now */
  tensor_mem_add(ctx, device, bytes);
fail:
  if (p) free(p);
  return rc;
}

void tensor_free(tensor_ctx_t *ctx, tensor_t *t) {
  if (!t) return;
  if (t->owned && t->data && ctx) {
    tensor_mem_sub(ctx, t->device, tensor_nbytes(t));
    if (t->device == TENSOR_CPU) free(t->data);
    else tensor_device_free(ctx, t->data, t->device);
  }
  memset(t, 0, sizeof *t);
}

int tensor_copy(tensor_ctx_t *ctx, tensor_t *dst, const tensor_t *src) {
  int rc = STRATA_OK;
  char a[96], b[96];
  if (!ctx) return STRATA_EINVAL;
  CHECK(dst && src && dst->data && src->data, STRATA_EINVAL, "tensor_copy: NULL tensor");
  CHECK(dst->dtype == src->dtype && tensor_numel(dst) == tensor_numel(src), STRATA_ESHAPE,
        "tensor_copy: dst %s and src %s differ in dtype or size", tensor_describe(dst, a, sizeof a),
        tensor_describe(src, b, sizeof b));
  if (dst->device == TENSOR_CPU && src->device == TENSOR_CPU) {
    memmove(dst->data, src->data, tensor_nbytes(src));
  } else {
#if defined(STRATA_CUDA)
    TRY(tcu_memcpy(ctx, dst->data, dst->device, src->data, src->device, tensor_nbytes(src)));
#else
    CHECK(0, STRATA_EUNSUPPORTED, "tensor_copy: CUDA tensor on a build without CUDA");
#endif
  }
fail:
  return rc;
}

/* The last-level cache's size (32 MiB where the system does not say). */
static size_t llc_bytes(void) {
  static size_t bytes;
  if (!bytes) {
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    bytes = l3 > 0 ? (size_t)l3 : (size_t)32 << 20;
  }
  return bytes;
}

/* Zeroes n bytes too large for the cache (a model's gradients: 0.5 GB for
 * GPT-2 124M) with non-temporal stores, which skip reading every line before
 * writing it: 496 MB in 7 ms instead of memset's 18 (2 threads, AMD EPYC).
 * A tensor that fits the cache keeps memset, which leaves it there for the
 * op that writes it next. */
static void zero_streaming(const tensor_ctx_t *ctx, char *p, size_t n, size_t chunk) {
#if defined(TENSOR_HAVE_AVX2)
  size_t head = (32 - ((uintptr_t)p & 31)) & 31, body = (n - head) & ~(size_t)31;
  memset(p, 0, head);
  memset(p + head + body, 0, n - head - body);
  char *q = p + head;
#pragma omp parallel for num_threads(ctx->threads) schedule(static)
  for (size_t off = 0; off < body; off += chunk) {
    size_t end = off + chunk < body ? off + chunk : body;
    const __m256 z = _mm256_setzero_ps();
    for (size_t i = off; i < end; i += 32) _mm256_stream_ps((float *)(q + i), z);
  }
  _mm_sfence(); /* the streamed stores are ordered before what follows */
#else
#pragma omp parallel for num_threads(ctx->threads) schedule(static)
  for (size_t off = 0; off < n; off += chunk) memset(p + off, 0, n - off < chunk ? n - off : chunk);
#endif
}

int tensor_copy_async(tensor_ctx_t *ctx, tensor_t *dst, const tensor_t *src) {
  int rc = STRATA_OK;
  char a[96], b[96];
  if (!ctx) return STRATA_EINVAL;
  CHECK(dst && src && dst->data && src->data, STRATA_EINVAL, "tensor_copy_async: NULL tensor");
  CHECK(dst->dtype == src->dtype && tensor_numel(dst) == tensor_numel(src), STRATA_ESHAPE,
        "tensor_copy_async: dst %s and src %s differ in dtype or size", tensor_describe(dst, a, sizeof a),
        tensor_describe(src, b, sizeof b));
  if (dst->device == TENSOR_CPU && src->device == TENSOR_CPU) {
    memmove(dst->data, src->data, tensor_nbytes(src));
  } else {
#if defined(STRATA_CUDA)
    TRY(tcu_memcpy_async(ctx, dst->data, dst->device, src->data, src->device, tensor_nbytes(src)));
#else
    CHECK(0, STRATA_EUNSUPPORTED, "tensor_copy_async: CUDA tensor on a build without CUDA");
#endif
  }
fail:
  return rc;
}

int tensor_copy_wait(tensor_ctx_t *ctx) {
  if (!ctx) return STRATA_EINVAL;
#if defined(STRATA_CUDA)
  if (ctx->cuda) return tcu_copy_wait(ctx);
#endif
  return STRATA_OK;
}

int tensor_zero(tensor_ctx_t *ctx, tensor_t *t) {
  int rc = STRATA_OK;
  if (!ctx) return STRATA_EINVAL;
  CHECK(t && t->data && t->ndim > 0, STRATA_EINVAL, "tensor_zero: NULL or empty tensor");
  if (t->device == TENSOR_CPU) {
    char *p = t->data;
    size_t n = tensor_nbytes(t), chunk = 1 << 20;
    if (n < 4 * chunk) {
      memset(p, 0, n);
    } else if (n >= llc_bytes()) {
      zero_streaming(ctx, p, n, chunk);
    } else {
#pragma omp parallel for num_threads(ctx->threads) schedule(static)
      for (size_t off = 0; off < n; off += chunk) memset(p + off, 0, n - off < chunk ? n - off : chunk);
    }
  } else {
#if defined(STRATA_CUDA)
    TRY(tcu_memset0(ctx, t->data, tensor_nbytes(t), t->device));
#else
    CHECK(0, STRATA_EUNSUPPORTED, "tensor_zero: CUDA tensor on a build without CUDA");
#endif
  }
fail:
  return rc;
}

int tensor_fill(tensor_ctx_t *ctx, tensor_t *t, float value) {
  int rc = STRATA_OK;
  if (!ctx) return STRATA_EINVAL;
  CHECK(t && t->data && t->ndim > 0, STRATA_EINVAL, "tensor_fill: NULL or empty tensor");
  CHECK(t->dtype != TENSOR_I32, STRATA_ESHAPE, "tensor_fill: i32 tensor");
  int64_t n = tensor_numel(t);
  if (t->device == TENSOR_CPU) {
    if (t->dtype == TENSOR_F32) {
      float *p = t->data;
      for (int64_t i = 0; i < n; i++) p[i] = value;
    } else {
      uint16_t v = t->dtype == TENSOR_BF16 ? strata_f32_to_bf16(value) : strata_f32_to_f16(value);
      uint16_t *p = t->data;
      for (int64_t i = 0; i < n; i++) p[i] = v;
    }
  } else {
#if defined(STRATA_CUDA)
    TRY(tcu_fill(ctx, t->data, (int)t->dtype, n, value));
#else
    CHECK(0, STRATA_EUNSUPPORTED, "tensor_fill: CUDA tensor on a build without CUDA");
#endif
  }
fail:
  return rc;
}

static float load_f(const void *p, tensor_dtype_t dt, int64_t i) {
  switch (dt) {
  case TENSOR_F32: return ((const float *)p)[i];
  case TENSOR_BF16: return strata_bf16_to_f32(((const uint16_t *)p)[i]);
  case TENSOR_F16: return strata_f16_to_f32(((const uint16_t *)p)[i]);
  default: return 0.f;
  }
}

static void store_f(void *p, tensor_dtype_t dt, int64_t i, float v) {
  switch (dt) {
  case TENSOR_F32: ((float *)p)[i] = v; break;
  case TENSOR_BF16: ((uint16_t *)p)[i] = strata_f32_to_bf16(v); break;
  case TENSOR_F16: ((uint16_t *)p)[i] = strata_f32_to_f16(v); break;
  default: break;
  }
}

int tensor_cast(tensor_ctx_t *ctx, tensor_t *dst, const tensor_t *src) {
  int rc = STRATA_OK;
  char a[96], b[96];
  if (!ctx) return STRATA_EINVAL;
  CHECK(dst && src && dst->data && src->data, STRATA_EINVAL, "tensor_cast: NULL tensor");
  CHECK(tensor_same_shape(dst, src) && dst->device == src->device, STRATA_ESHAPE,
        "tensor_cast: dst %s and src %s differ in shape or device", tensor_describe(dst, a, sizeof a),
        tensor_describe(src, b, sizeof b));
  CHECK(dst->dtype != TENSOR_I32 && src->dtype != TENSOR_I32, STRATA_ESHAPE,
        "tensor_cast: only f32, bf16 and f16 convert (dst %s, src %s)",
        tensor_describe(dst, a, sizeof a), tensor_describe(src, b, sizeof b));
  int64_t n = tensor_numel(src);
  if (src->device == TENSOR_CPU) {
    if (dst->dtype == src->dtype) {
      memmove(dst->data, src->data, tensor_nbytes(src));
    } else {
#pragma omp parallel for num_threads(ctx->threads) schedule(static) if (n > 65536)
      for (int64_t i = 0; i < n; i++) store_f(dst->data, dst->dtype, i, load_f(src->data, src->dtype, i));
    }
  } else {
#if defined(STRATA_CUDA)
    TRY(tcu_cast(ctx, dst->data, (int)dst->dtype, src->data, (int)src->dtype, n));
#else
    CHECK(0, STRATA_EUNSUPPORTED, "tensor_cast: CUDA tensor on a build without CUDA");
#endif
  }
fail:
  return rc;
}
