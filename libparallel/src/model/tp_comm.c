/* The model's communication over libcomm (tensor parallelism, ring
 * self-attention), apart from the layers so that the GPU bundles can build
 * the model without MPI. */
#include <strata/comm.h>
#include <strata/par_ring.h>

#include "gpt_internal.h"

int gpt_tp_query(struct comm *tp, int *rank, int *size) {
  *rank = comm_rank(tp), *size = comm_size(tp);
  return *size >= 1 ? STRATA_OK : STRATA_EINVAL;
}

/* libcomm's dtype of a tensor dtype: the 16-bit activations travel (and
 * NCCL sums them) in 16 bits, with the byte counters counting 2 a value. */
static comm_dtype_t comm_dtype(tensor_dtype_t dt) {
  return dt == TENSOR_BF16 ? COMM_BF16 : dt == TENSOR_F16 ? COMM_F16 : COMM_F32;
}

int gpt_tp_allreduce(par_gpt_t *m, tensor_t *t) {
  if (!m->tp || m->tp_size < 2) return STRATA_OK;
  int rc = comm_allreduce(m->tp, t->data, t->data, (size_t)tensor_numel(t), comm_dtype(t->dtype), COMM_SUM);
  return rc ? gpt_seterr(m, rc, "tensor parallelism: %s", comm_last_error(m->tp)) : STRATA_OK;
}

int gpt_tp_allgather(par_gpt_t *m, void *recv, const void *send, size_t n, tensor_dtype_t dt) {
  int rc = comm_allgather(m->tp, recv, send, n, comm_dtype(dt));
  return rc ? gpt_seterr(m, rc, "tensor parallelism: %s", comm_last_error(m->tp)) : STRATA_OK;
}

int gpt_tp_reduce_scatter(par_gpt_t *m, void *recv, const void *send, size_t n, tensor_dtype_t dt) {
  int rc = comm_reduce_scatter(m->tp, recv, send, n, comm_dtype(dt), COMM_SUM);
  return rc ? gpt_seterr(m, rc, "tensor parallelism: %s", comm_last_error(m->tp)) : STRATA_OK;
}

int gpt_ring_forward(par_gpt_t *m, gpt_acts_t *a) {
  char err[512];
  int rc = par_ring_attention_forward(m->ring, m->tc, &a->atty, &a->lse, &a->qkv, m->cfg.heads / m->tp_size, err,
                                      sizeof err); /* this tensor rank's heads */
  return rc ? gpt_seterr(m, rc, "%s", err) : STRATA_OK;
}

int gpt_ring_backward(par_gpt_t *m, gpt_acts_t *a) {
  char err[512];
  int rc = par_ring_attention_backward(m->ring, m->tc, &m->dqkv, &m->datty, &a->qkv, &a->atty, &a->lse,
                                       m->cfg.heads / m->tp_size, err, sizeof err);
  return rc ? gpt_seterr(m, rc, "%s", err) : STRATA_OK;
}
