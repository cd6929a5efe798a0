/* The operation graphs of cuDNN's fused causal attention (flash attention
 * forward and backward, cuDNN 9 backend API) as plain data: tensors with
 * dims, strides, dtypes and unique ids, and the operations between them.
 * Pure host code, no cuDNN types, so the graphs can be checked on any
 * machine; src/cuda/cudnn_attention.cu turns them into backend descriptors.
 *
 * Layouts (no transposes): Q, K and V are strided views into the bf16 copy
 * of strata's qkv, [B, T, 3, NH, hs]; O and dO are [B, T, NH, hs]; dQ, dK,
 * dV land with the qkv strides in a bf16 dqkv; the statistics are strata's
 * lse, [B, NH, T], f32. Every tensor is described 4-d as (batch, head, row,
 * column) with element strides. */
#ifndef STRATA_SDPA_GRAPH_H
#define STRATA_SDPA_GRAPH_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SDPA_MAX_TENSORS 48
#define SDPA_MAX_OPS 40

typedef enum { SDPA_F32, SDPA_BF16, SDPA_I32, SDPA_BOOL } sdpa_dtype_t;
typedef enum { SDPA_MATMUL, SDPA_POINTWISE, SDPA_REDUCE, SDPA_RESHAPE } sdpa_opkind_t;
typedef enum {
  SDPA_PW_ADD,
  SDPA_PW_SUB,
  SDPA_PW_MUL,
  SDPA_PW_DIV,
  SDPA_PW_EXP,
  SDPA_PW_LOG,
  SDPA_PW_IDENTITY,
  SDPA_PW_GEN_INDEX,
  SDPA_PW_CMP_GE,
  SDPA_PW_SELECT
} sdpa_pw_t;
typedef enum { SDPA_RED_ADD, SDPA_RED_MAX } sdpa_red_t;

/* Unique ids of the tensors a caller binds (the variant pack); virtual
 * tensors get ids from SDPA_UID_VIRTUAL on. */
enum {
  SDPA_UID_Q = 1,
  SDPA_UID_K,
  SDPA_UID_V,
  SDPA_UID_O,
  SDPA_UID_STATS,
  SDPA_UID_DO,
  SDPA_UID_DQ,
  SDPA_UID_DK,
  SDPA_UID_DV,
  SDPA_UID_SCALE,
  SDPA_UID_NEG,
  SDPA_UID_ONE,
  SDPA_UID_DQ_ACCUM,
  SDPA_UID_DSUM,
  SDPA_UID_VIRTUAL = 100
};

typedef struct {
  int64_t uid;
  sdpa_dtype_t dtype;
  int64_t dim[4], stride[4];
  int is_virtual;
  int by_value; /* a host scalar passed by value (dims and strides all 1) */
  float value;  /* its value */
  const char *name;
} sdpa_tensor_t;

/* y = op(x [, b [, t]]); indices into the graph's tensors, -1 when absent.
 * Matmul: y = x b (batched over the first two dims). Pointwise SELECT:
 * y = t ? x : b. Reduce: over the dims where y has extent 1. Reshape: the
 * same elements seen with y's dims and strides. */
typedef struct {
  sdpa_opkind_t kind;
  int mode; /* sdpa_pw_t or sdpa_red_t */
  int axis; /* GEN_INDEX: the dim whose index is generated */
  sdpa_dtype_t compute;
  int x, b, t, y;
  const char *name;
} sdpa_op_t;

typedef struct {
  int backward;
  int B, T, NH, hs;
  int ntensors, nops;
  sdpa_tensor_t t[SDPA_MAX_TENSORS];
  sdpa_op_t op[SDPA_MAX_OPS];
  /* Element offsets of K and V (and dK, dV) from Q (dQ) in the qkv buffers. */
  int64_t k_offset, v_offset;
  /* Bytes of f32 workspace the graph's own non-virtual tensors need (backward:
   * dQ accumulator and the rows sum(dO * O)), placed before cuDNN's workspace. */
  int64_t dq_accum_bytes, dsum_bytes;
} sdpa_graph_t;

/* Describes the causal attention forward (backward = 0: O and the natural-log
 * row statistics max + log sum exp, which is strata's lse) or backward
 * (backward = 1: dQ, dK, dV from Q, K, V, O, dO and the statistics) with
 * scale 1/sqrt(hs). Returns 0, or -1 when a size is not positive. */
int sdpa_graph_build(sdpa_graph_t *g, int backward, int B, int T, int NH, int hs);

/* The tensor with this unique id, or NULL. */
const sdpa_tensor_t *sdpa_graph_tensor(const sdpa_graph_t *g, int64_t uid);

#ifdef __cplusplus
}
#endif

#endif
