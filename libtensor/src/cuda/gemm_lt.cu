/* GEMMs with fused epilogues through cuBLASLt: the linear layer with its bias
 * (CUBLASLT_EPILOGUE_BIAS) or bias and GELU (GELU_AUX_BIAS, the
 * pre-activation saved in the aux buffer for the backward), the input
 * gradient through the GELU (DGELU) and the weight gradient with the bias
 * gradient (BGRADB). Row-major X (r, c) is column-major X^T, so each row-major
 * product is written as its transpose (see each function).
 *
 * cuBLASLt has no kernel for some shapes, dtypes and alignments; its
 * heuristic then returns nothing and these functions return
 * STRATA_EUNSUPPORTED without touching their outputs or the context's error,
 * and the caller runs the separate kernels instead.
 *
 * With 16-bit activations (bf16 or f16) D, C and the aux buffer are of the
 * activations' dtype with f32 compute (CUBLAS_COMPUTE_32F), the f32 bias
 * rounded to that dtype (D's bias type); an f32 weight is rounded to the
 * activations' dtype first; the weight gradient and its bias gradient
 * stay f32. */
#include <cublasLt.h>
#include <stdint.h>

#include "common.cuh"

#define LT(call)                                                                                   \
  do {                                                                                             \
    cublasStatus_t s_ = (call);                                                                    \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                             \
      rc = tensor_seterr(ctx, STRATA_ECUDA, "%s: cuBLASLt status %d", #call, (int)s_);              \
      goto done;                                                                                   \
    }                                                                                              \
  } while (0)

#define LT_WORKSPACE ((size_t)4 << 20)

static int lt_handle(tensor_ctx_t *ctx, cublasLtHandle_t *h) {
  tcu_state *s;
  int rc = tcu_state_get(ctx, &s); /* selects the context's device */
  if (rc) return rc;
  void **slot = tensor_ctx_cublaslt(ctx);
  if (!*slot) {
    cublasLtHandle_t lt;
    if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS)
      return tensor_seterr(ctx, STRATA_ECUDA, "cublasLtCreate failed on cuda:%d", s->device);
    *slot = (void *)lt;
  }
  *h = (cublasLtHandle_t)*slot;
  return STRATA_OK;
}

extern "C" void tcu_lt_destroy(tensor_ctx_t *ctx) {
  void **slot = tensor_ctx_cublaslt(ctx);
  if (*slot) cublasLtDestroy((cublasLtHandle_t)*slot);
  *slot = NULL;
}

static uint32_t align_of(const void *p) {
  uint32_t a = 256;
  while (a > 1 && (uintptr_t)p % a) a >>= 1;
  return a;
}

static cudaDataType_t lt_type(int dt) {
  return dt == TENSOR_BF16 ? CUDA_R_16BF : dt == TENSOR_F16 ? CUDA_R_16F : CUDA_R_32F;
}

/* One column-major GEMM D(m,n) = alpha op(A) op(B) + beta D with an epilogue.
 * A is (ta ? k x m : m x k) with leading dimension lda, B likewise; A and B
 * of dtypes adt and bdt (f32, bf16 or f16), multiplied in one dtype: an f32
 * operand is rounded in scratch to the other's 16-bit dtype (16-bit
 * activations times f32 weights), or both to bf16 when the context asks
 * for bf16 matmuls. D (ddt: f32 or the activations' 16-bit dtype) and aux
 * (leading dimension ldaux) share a dtype; bias is f32 whatever D's. */
typedef struct {
  int ta, tb;
  int64_t m, n, k;
  const void *A, *B;
  int adt, bdt;
  int64_t lda, ldb;
  void *D;
  int ddt;
  int64_t ldd;
  float beta;
  cublasLtEpilogue_t epi;
  void *bias;
  void *aux;
  int64_t ldaux;
} lt_gemm_t;

static int lt_run(tensor_ctx_t *ctx, lt_gemm_t g) {
  int rc = STRATA_OK;
  cublasLtHandle_t h = NULL;
  cublasLtMatmulDesc_t op = NULL;
  cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
  cublasLtMatmulPreference_t pref = NULL;
  cublasLtMatmulHeuristicResult_t res;
  int found = 0;
  float alpha = 1.f;
  char *scr = NULL;
  int lp = g.adt != TENSOR_F32   ? g.adt
           : g.bdt != TENSOR_F32 ? g.bdt
           : tensor_ctx_bf16_matmul(ctx) ? TENSOR_BF16
                                         : TENSOR_F32;
  int ra = lp != TENSOR_F32 && g.adt == TENSOR_F32, rb = lp != TENSOR_F32 && g.bdt == TENSOR_F32;
  int64_t na = ra ? (g.ta ? g.m : g.k) * g.lda : 0, nb = rb ? (g.tb ? g.k : g.n) * g.ldb : 0;
  int64_t na_pad = (na + 127) / 128 * 128, nb_pad = (nb + 127) / 128 * 128; /* 256-byte steps */
  /* A 16-bit D takes a bias of its own dtype (cuBLASLt's default; other
   * bias types are for IMMA and FP8 kernels): the f32 bias rounded into the
   * scratch too, one rounding more of |b| (BGRADB's D is f32). */
  int rbias = g.bias && g.ddt != TENSOR_F32 && g.epi != CUBLASLT_EPILOGUE_BGRADB;
  int64_t nbias_pad = rbias ? (g.m + 127) / 128 * 128 : 0;
  size_t ws_at = (size_t)(na_pad + nb_pad + nbias_pad) * 2;
  if ((rc = lt_handle(ctx, &h))) return rc;
  if ((rc = tcu_scratch(ctx, ws_at + LT_WORKSPACE, (void **)&scr))) return rc;
  if (ra) {
    if ((rc = tcu_cast(ctx, scr, lp, g.A, TENSOR_F32, na))) return rc;
    g.A = scr, g.adt = lp;
  }
  if (rb) {
    if ((rc = tcu_cast(ctx, scr + na_pad * 2, lp, g.B, TENSOR_F32, nb))) return rc;
    g.B = scr + na_pad * 2, g.bdt = lp;
  }
  if (rbias) {
    if ((rc = tcu_cast(ctx, scr + (na_pad + nb_pad) * 2, g.ddt, g.bias, TENSOR_F32, g.m))) return rc;
    g.bias = scr + (na_pad + nb_pad) * 2;
  }
  if (g.adt != g.bdt) return STRATA_EUNSUPPORTED; /* bf16 times f16: not a linear layer's */
  {
    cudaDataType_t ab = lt_type(g.adt), dt = lt_type(g.ddt);
    cublasOperation_t opa = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    uint32_t epi = (uint32_t)g.epi;
    size_t ws = LT_WORKSPACE;
    /* f32 compute whatever the inputs (never TF32) and f32 scales. */
    LT(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (g.bias) /* of D's type (a 16-bit D's rounded above) */
      LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof g.bias));
    if (g.aux) {
      LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g.aux, sizeof g.aux));
      LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &g.ldaux, sizeof g.ldaux));
      /* the aux buffer's dtype defaults to D's (only FP8 kernels take another) */
    }
    LT(cublasLtMatrixLayoutCreate(&la, ab, g.ta ? g.k : g.m, g.ta ? g.m : g.k, g.lda));
    LT(cublasLtMatrixLayoutCreate(&lb, ab, g.tb ? g.n : g.k, g.tb ? g.k : g.n, g.ldb));
    LT(cublasLtMatrixLayoutCreate(&ld, dt, g.m, g.n, g.ldd));
    LT(cublasLtMatmulPreferenceCreate(&pref));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    uint32_t aa = align_of(g.A), ba = align_of(g.B), da = align_of(g.D);
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof aa));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ba, sizeof ba));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &da, sizeof da));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &da, sizeof da));
    if (cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, ld, ld, pref, 1, &res, &found) != CUBLAS_STATUS_SUCCESS ||
        found < 1) {
      rc = STRATA_EUNSUPPORTED; /* no kernel: the caller falls back, no error recorded */
      goto done;
    }
    LT(cublasLtMatmul(h, op, &alpha, g.A, la, g.B, lb, &g.beta, g.D, ld, g.D, ld, &res.algo, scr + ws_at,
                      LT_WORKSPACE, 0));
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) rc = tensor_seterr(ctx, STRATA_ECUDA, "cublasLtMatmul: %s", cudaGetErrorString(e));
  }
done:
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  if (ld) cublasLtMatrixLayoutDestroy(ld);
  if (lb) cublasLtMatrixLayoutDestroy(lb);
  if (la) cublasLtMatrixLayoutDestroy(la);
  if (op) cublasLtMatmulDescDestroy(op);
  return rc;
}

/* Shapes and pointers cuBLASLt's epilogues take: every leading dimension
 * and the aux one a multiple of 8, every pointer 16-byte aligned. */
static int lt_fits(int64_t a, int64_t b, const void *p1, const void *p2, const void *p3, const void *p4) {
  return a % 8 == 0 && b % 8 == 0 && align_of(p1) >= 16 && align_of(p2) >= 16 && align_of(p3) >= 16 &&
         align_of(p4) >= 16;
}

/* out(rows,N) = act(in(rows,K) W(N,K)^T + bias), pre = the pre-activation
 * (of out's dtype). Column-major: out^T (N x rows) = W^T (op T of W's K x
 * N) in^T (K x rows), the bias along D's rows (N). */
extern "C" int tcu_linear_lt(tensor_ctx_t *ctx, void *out, void *pre, int odt, const void *in, int idt,
                             const void *w, int wdt, const float *bias, int64_t rows, int N, int K, int gelu) {
  if (!lt_fits(N, K, out, gelu ? (const void *)pre : out, in, w) || (!bias && !gelu) ||
      (bias && align_of(bias) < 16))
    return STRATA_EUNSUPPORTED;
  cublasLtEpilogue_t epi = !gelu ? CUBLASLT_EPILOGUE_BIAS
                           : bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                  : CUBLASLT_EPILOGUE_GELU_AUX;
  lt_gemm_t g = {1, 0, N, rows, K, w, in, wdt, idt, K, K, out, odt, N, 0.f, epi, (void *)bias,
                 gelu ? pre : NULL, N};
  return lt_run(ctx, g);
}

/* dpre(rows,K) = gelu'(pre) * (dout(rows,N) W(N,K)), overwritten; dpre,
 * dout and pre of dtype adt, W of adt or f32.
 * Column-major: dpre^T (K x rows) = W^T (K x N, op N) dout^T (N x rows). */
extern "C" int tcu_linear_dgelu_lt(tensor_ctx_t *ctx, void *dpre, const void *dout, int adt, const void *w,
                                   int wdt, const void *pre, int64_t rows, int N, int K) {
  if (!lt_fits(N, K, dpre, pre, dout, w)) return STRATA_EUNSUPPORTED;
  lt_gemm_t g = {0, 0, K, rows, N, w, dout, wdt, adt, K, N, dpre, adt, K, 0.f, CUBLASLT_EPILOGUE_DGELU, NULL,
                 (void *)pre, K};
  return lt_run(ctx, g);
}

/* dW(N,K) += dout(rows,N)^T in(rows,K) and dbias(N) = column sums of dout
 * (overwritten); dout and in of dtype adt, dW and dbias f32. Column-major:
 * dW^T (K x N) = in^T (K x rows, op N) dout (op T of dout^T, N x rows); the
 * bias gradient reduces B = dout over k = rows, one value per column of D
 * (N). */
extern "C" int tcu_linear_wgrad_lt(tensor_ctx_t *ctx, float *dw, float *dbias, const void *dout, const void *in,
                                   int adt, int64_t rows, int N, int K) {
  /* The epilogue sums B = dout as the GEMM reads it, with f32 accumulation:
   * a 16-bit dout's own values, as the separate column sums
   * (tcu_bias_backward) add them; but with bf16 matmuls an f32 dout would
   * be rounded to bf16 first, so the separate column sums keep that bias
   * gradient in f32. */
  if (!lt_fits(N, K, dw, dbias, dout, in) || (adt == TENSOR_F32 && tensor_ctx_bf16_matmul(ctx)))
    return STRATA_EUNSUPPORTED;
  lt_gemm_t g = {0, 1, K, N, rows, in, dout, adt, adt, K, N, dw, TENSOR_F32, K, 1.f, CUBLASLT_EPILOGUE_BGRADB,
                 (void *)dbias, NULL, 0};
  return lt_run(ctx, g);
}
