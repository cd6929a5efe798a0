/* Element types and reductions, including the f16/bf16 user operations that
 * combine in f32. */
#include "internal.h"

#include <immintrin.h>
#include <strata/half.h>

static const size_t dtype_sizes[COMM_NDTYPES] = {4, 8, 2, 2, 4, 8, 1};
static const char *const dtype_names[COMM_NDTYPES] = {"f32", "f64", "f16", "bf16",
                                                      "i32", "i64", "u8"};

int comm_dtype_valid(comm_dtype_t dt) { return (unsigned)dt < COMM_NDTYPES; }
size_t comm_dtype_size(comm_dtype_t dt) { return comm_dtype_valid(dt) ? dtype_sizes[dt] : 0; }
const char *comm_dtype_name(comm_dtype_t dt) {
  return comm_dtype_valid(dt) ? dtype_names[dt] : "unknown";
}

MPI_Datatype comm_mpi_dtype(comm_dtype_t dt) {
  switch (dt) {
  case COMM_F32: return MPI_FLOAT;
  case COMM_F64: return MPI_DOUBLE;
  case COMM_F16:
  case COMM_BF16: return MPI_UINT16_T;
  case COMM_I32: return MPI_INT32_T;
  case COMM_I64: return MPI_INT64_T;
  case COMM_U8: return MPI_UINT8_T;
  default: return MPI_DATATYPE_NULL;
  }
}

/* ---- 16-bit float reductions -------------------------------------------
 * One combine: inout[i] = round16(f32(in[i]) (+|max|min) f32(inout[i])).
 * f16 uses the F16C conversions of the x86-64-v3 baseline, 8 at a time. */

enum { R_SUM, R_MAX, R_MIN };

static inline __m256 combine8(__m256 a, __m256 b, int r) {
  return r == R_SUM ? _mm256_add_ps(a, b) : r == R_MAX ? _mm256_max_ps(a, b) : _mm256_min_ps(a, b);
}
static inline float combine1(float a, float b, int r) {
  return r == R_SUM ? a + b : r == R_MAX ? (a > b ? a : b) : (a < b ? a : b);
}

static void f16_combine(const uint16_t *in, uint16_t *io, int n, int r) {
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 a = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(in + i)));
    __m256 b = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(io + i)));
    _mm_storeu_si128((__m128i *)(io + i),
                     _mm256_cvtps_ph(combine8(a, b, r), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; i++)
    io[i] = strata_f32_to_f16(combine1(strata_f16_to_f32(in[i]), strata_f16_to_f32(io[i]), r));
}

static void bf16_combine(const uint16_t *in, uint16_t *io, int n, int r) {
  for (int i = 0; i < n; i++)
    io[i] = strata_f32_to_bf16(combine1(strata_bf16_to_f32(in[i]), strata_bf16_to_f32(io[i]), r));
}

#define DEFINE_OP(fn, combine, r)                                                                  \
  static void fn(void *in, void *io, int *len, MPI_Datatype *dt) {                                 \
    (void)dt;                                                                                      \
    combine((const uint16_t *)in, (uint16_t *)io, *len, r);                                        \
  }
DEFINE_OP(op_f16_sum, f16_combine, R_SUM)
DEFINE_OP(op_f16_max, f16_combine, R_MAX)
DEFINE_OP(op_f16_min, f16_combine, R_MIN)
DEFINE_OP(op_bf16_sum, bf16_combine, R_SUM)
DEFINE_OP(op_bf16_max, bf16_combine, R_MAX)
DEFINE_OP(op_bf16_min, bf16_combine, R_MIN)

/* The six user operations, created once per MPI lifetime and freed when MPI
 * finalises (through a delete callback on MPI_COMM_SELF, which MPI_Finalize
 * frees first). Process state, like MPI's own. */
static MPI_Op half_ops[2][3];
static int half_ops_ready;

static int free_half_ops(MPI_Comm comm, int keyval, void *attr, void *extra) {
  (void)comm, (void)attr, (void)extra;
  for (int d = 0; d < 2; d++)
    for (int r = 0; r < 3; r++) MPI_Op_free(&half_ops[d][r]);
  half_ops_ready = 0;
  MPI_Comm_free_keyval(&keyval);
  return MPI_SUCCESS;
}

int comm_types_init(void) {
  static MPI_User_function *const fns[2][3] = {{op_f16_sum, op_f16_max, op_f16_min},
                                               {op_bf16_sum, op_bf16_max, op_bf16_min}};
  int keyval;
  if (half_ops_ready) return STRATA_OK;
  for (int d = 0; d < 2; d++)
    for (int r = 0; r < 3; r++)
      if (MPI_Op_create(fns[d][r], 1, &half_ops[d][r]) != MPI_SUCCESS) return STRATA_EMPI;
  if (MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, free_half_ops, &keyval, NULL) != MPI_SUCCESS ||
      MPI_Comm_set_attr(MPI_COMM_SELF, keyval, NULL) != MPI_SUCCESS)
    return STRATA_EMPI;
  half_ops_ready = 1;
  return STRATA_OK;
}

int comm_mpi_op(comm_dtype_t dt, comm_op_t op, MPI_Op *out) {
  int r = op == COMM_MAX ? R_MAX : op == COMM_MIN ? R_MIN : R_SUM;
  if ((unsigned)op >= COMM_NOPS || !comm_dtype_valid(dt)) return STRATA_EINVAL;
  if (dt == COMM_F16 || dt == COMM_BF16) {
    *out = half_ops[dt == COMM_BF16][r];
    return STRATA_OK;
  }
  *out = r == R_MAX ? MPI_MAX : r == R_MIN ? MPI_MIN : MPI_SUM;
  return STRATA_OK;
}

/* AVG = SUM / n, applied after the reduction completes. */
void comm_divide(void *buf, size_t count, comm_dtype_t dt, int n) {
  switch (dt) {
  case COMM_F32: {
    float *x = buf;
    for (size_t i = 0; i < count; i++) x[i] /= (float)n;
  } break;
  case COMM_F64: {
    double *x = buf;
    for (size_t i = 0; i < count; i++) x[i] /= n;
  } break;
  case COMM_F16: {
    uint16_t *x = buf;
    for (size_t i = 0; i < count; i++) x[i] = strata_f32_to_f16(strata_f16_to_f32(x[i]) / n);
  } break;
  case COMM_BF16: {
    uint16_t *x = buf;
    for (size_t i = 0; i < count; i++) x[i] = strata_f32_to_bf16(strata_bf16_to_f32(x[i]) / n);
  } break;
  case COMM_I32: {
    int32_t *x = buf;
    for (size_t i = 0; i < count; i++) x[i] /= n;
  } break;
  case COMM_I64: {
    int64_t *x = buf;
    for (size_t i = 0; i < count; i++) x[i] /= n;
  } break;
  case COMM_U8: {
    uint8_t *x = buf;
    for (size_t i = 0; i < count; i++) x[i] = (uint8_t)(x[i] / n);
  } break;
  default: break;
  }
}
