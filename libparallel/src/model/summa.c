/* SUMMA on a q x q mesh of tensor ranks (strata/par_summa.h): blocks
 * broadcast along rows and columns, partial products reduced to their
 * owners, the local products by libtensor's GEMMs. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <strata/par_summa.h>

struct par_summa {
  comm_mesh_t *mesh;
  comm_t *row, *col; /* this rank's row (ordered by column) and column (ordered by row) */
  comm_t *dep;       /* its place in every layer (2.5D), or NULL */
  int q, i, j, d, layer;
  char err[512];
};

static int fail(par_summa_t *s, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(par_summa_t *s, int rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->err, sizeof s->err, fmt, ap);
  va_end(ap);
  return rc;
}

int par_summa_create(par_summa_t **out, comm_t *c, int depth, char *err, size_t errlen) {
  if (err && errlen) err[0] = 0;
  if (!out || !c) return STRATA_EINVAL;
  *out = NULL;
  int n = comm_size(c), q = depth > 0 && n % depth == 0 ? (int)lround(sqrt((double)(n / depth))) : 0;
  if (depth < 1 || q * q * depth != n) {
    if (err && errlen) {
      if (depth == 1) snprintf(err, errlen, "2D tensor parallelism needs a square number of ranks, not %d", n);
      else snprintf(err, errlen, "2.5D tensor parallelism of depth %d needs q^2 x %d ranks, not %d", depth, depth, n);
    }
    return STRATA_EINVAL;
  }
  par_summa_t *s = calloc(1, sizeof *s);
  if (!s) return STRATA_ENOMEM;
  const char *names[3] = {"col", "row", "dep"}; /* innermost first: the column index varies fastest */
  int sizes[3] = {q, q, depth}, rc;
  comm_mesh_config_t mc = COMM_MESH_CONFIG_DEFAULTS;
  mc.node_order = 0; /* rank r is (r / q^2, r / q % q, r % q) */
  if ((rc = comm_mesh_create(&s->mesh, c, 3, names, sizes, &mc)) || (rc = comm_mesh_group(s->mesh, "col", &s->row)) ||
      (rc = comm_mesh_group(s->mesh, "row", &s->col)) || (depth > 1 && (rc = comm_mesh_group(s->mesh, "dep", &s->dep)))) {
    if (err && errlen)
      snprintf(err, errlen, "mesh of %d x %d x %d: %s", q, q, depth, s->mesh ? comm_mesh_last_error(s->mesh) : "");
    par_summa_destroy(s);
    return rc;
  }
  s->q = q, s->i = comm_mesh_coord(s->mesh, "row"), s->j = comm_mesh_coord(s->mesh, "col");
  s->d = depth, s->layer = comm_mesh_coord(s->mesh, "dep");
  *out = s;
  return STRATA_OK;
}

void par_summa_destroy(par_summa_t *s) {
  if (!s) return;
  comm_mesh_destroy(s->mesh);
  free(s);
}

void par_summa_coords(const par_summa_t *s, int *row, int *col, int *q) {
  if (row) *row = s->i;
  if (col) *col = s->j;
  if (q) *q = s->q;
}

void par_summa_depth(const par_summa_t *s, int *layer, int *depth) {
  if (layer) *layer = s->layer;
  if (depth) *depth = s->d;
}

comm_t *par_summa_dep(par_summa_t *s) { return s ? s->dep : NULL; }
comm_t *par_summa_row(par_summa_t *s) { return s ? s->row : NULL; }
comm_t *par_summa_col(par_summa_t *s) { return s ? s->col : NULL; }
const char *par_summa_error(const par_summa_t *s) { return s ? s->err : ""; }

/* A 2-D fp32 block on `dev` (the product's x's: the CPU or a CUDA device). */
static int check2(par_summa_t *s, const char *what, const tensor_t *t, int64_t r, int64_t c, int dev) {
  if (!t || t->ndim != 2 || t->dtype != TENSOR_F32 || t->device != dev || (r >= 0 && t->shape[0] != r) ||
      (c >= 0 && t->shape[1] != c)) {
    char d[32] = "cpu";
    if (dev != TENSOR_CPU) snprintf(d, sizeof d, "cuda:%d", dev);
    return fail(s, STRATA_ESHAPE, "SUMMA: %s must be a 2-D fp32 block on x's device (%s)%s", what, d,
                r >= 0 || c >= 0 ? " of the shape its product needs" : "");
  }
  return STRATA_OK;
}

/* A block buffer on `dev` (counted by tc's accountant; on a CUDA device
 * from its caching allocator). */
static int block(par_summa_t *s, tensor_ctx_t *tc, tensor_t *t, int64_t r, int64_t c, int dev) {
  int64_t sh[2] = {r, c};
  int rc = tensor_alloc(tc, t, TENSOR_F32, dev, 2, sh);
  return rc ? fail(s, rc, "SUMMA: %s", tensor_last_error(tc)) : STRATA_OK;
}

/* buf on every rank of g = src on its rank `root` (copied there first); on
 * a device, through NCCL (libcomm sees the device pointer). */
static int bcast(par_summa_t *s, tensor_ctx_t *tc, comm_t *g, tensor_t *buf, const tensor_t *src, int root, int me) {
  int rc;
  if (me == root && (rc = tensor_copy(tc, buf, src))) return fail(s, rc, "SUMMA: %s", tensor_last_error(tc));
  rc = comm_broadcast(g, buf->data, (size_t)tensor_numel(buf), COMM_F32, root);
  return rc ? fail(s, rc, "SUMMA: %s", comm_last_error(g)) : STRATA_OK;
}

/* dst (on root only) += the sum over g of part. */
static int reduce_add(par_summa_t *s, tensor_ctx_t *tc, comm_t *g, tensor_t *dst, tensor_t *part, tensor_t *sum,
                      int root, int me) {
  int rc = comm_reduce(g, me == root ? sum->data : NULL, part->data, (size_t)tensor_numel(part), COMM_F32, COMM_SUM,
                       root);
  if (rc) return fail(s, rc, "SUMMA: %s", comm_last_error(g));
  if (me == root && (rc = tensor_add_forward(tc, dst, dst, sum))) return fail(s, rc, "SUMMA: %s", tensor_last_error(tc));
  return STRATA_OK;
}

int par_summa_forward(par_summa_t *s, tensor_ctx_t *tc, tensor_t *y, const tensor_t *x, const tensor_t *w) {
  if (!s || !tc) return STRATA_EINVAL;
  int rc;
  if ((rc = check2(s, "x", x, -1, -1, x ? x->device : TENSOR_CPU))) return rc;
  int dev = x->device; /* (every block on x's device) */
  if ((rc = check2(s, "w", w, x->shape[1], -1, dev)) || (rc = check2(s, "y", y, x->shape[0], w->shape[1], dev)))
    return rc;
  tensor_t xb = {0}, wb = {0};
  if ((rc = block(s, tc, &xb, x->shape[0], x->shape[1], dev)) || (rc = block(s, tc, &wb, w->shape[0], w->shape[1], dev)))
    goto done;
  for (int k = 0; k < s->q && !rc; k++) {
    if ((rc = bcast(s, tc, s->row, &xb, x, k, s->j)) || (rc = bcast(s, tc, s->col, &wb, w, k, s->i))) break;
    if ((rc = tensor_matmul(tc, y, &xb, &wb, 0, 0, 1.f, k ? 1.f : 0.f)))
      rc = fail(s, rc, "SUMMA: %s", tensor_last_error(tc));
  }
done:
  tensor_free(tc, &xb), tensor_free(tc, &wb);
  return rc;
}

int par_summa_backward(par_summa_t *s, tensor_ctx_t *tc, tensor_t *dx, tensor_t *dw, const tensor_t *dy,
                       const tensor_t *x, const tensor_t *w) {
  if (!s || !tc) return STRATA_EINVAL;
  int rc;
  if ((rc = check2(s, "x", x, -1, -1, x ? x->device : TENSOR_CPU))) return rc;
  int dev = x->device;
  if ((rc = check2(s, "w", w, x->shape[1], -1, dev)) || (rc = check2(s, "dy", dy, x->shape[0], w->shape[1], dev)) ||
      (dx && (rc = check2(s, "dx", dx, x->shape[0], x->shape[1], dev))) ||
      (dw && (rc = check2(s, "dw", dw, w->shape[0], w->shape[1], dev))))
    return rc;
  tensor_t b = {0}, part = {0}, sum = {0}, acc = {0};
  if (dx) { /* dX_il += sum_j dY_ij W_lj^T */
    if ((rc = block(s, tc, &b, w->shape[0], w->shape[1], dev)) ||
        (rc = block(s, tc, &part, x->shape[0], x->shape[1], dev)) ||
        (rc = block(s, tc, &sum, x->shape[0], x->shape[1], dev)))
      goto done;
    for (int l = 0; l < s->q && !rc; l++) {
      if ((rc = bcast(s, tc, s->col, &b, w, l, s->i))) break;
      if ((rc = tensor_matmul(tc, &part, dy, &b, 0, 1, 1.f, 0.f))) {
        rc = fail(s, rc, "SUMMA: %s", tensor_last_error(tc));
        break;
      }
      rc = reduce_add(s, tc, s->row, dx, &part, &sum, l, s->j);
    }
    tensor_free(tc, &b), tensor_free(tc, &part), tensor_free(tc, &sum);
  }
  if (dw && !rc) { /* dW_lj += sum_i X_il^T dY_ij (2.5D: this layer's rows, then summed over the layers) */
    if ((rc = block(s, tc, &b, x->shape[0], x->shape[1], dev)) ||
        (rc = block(s, tc, &part, w->shape[0], w->shape[1], dev)) ||
        (rc = block(s, tc, &sum, w->shape[0], w->shape[1], dev)) ||
        (s->dep && (rc = block(s, tc, &acc, w->shape[0], w->shape[1], dev))))
      goto done;
    tensor_t *into = s->dep ? &acc : dw;
    for (int l = 0; l < s->q && !rc; l++) {
      if ((rc = bcast(s, tc, s->row, &b, x, l, s->j))) break;
      if ((rc = tensor_matmul(tc, &part, &b, dy, 1, 0, 1.f, 0.f))) {
        rc = fail(s, rc, "SUMMA: %s", tensor_last_error(tc));
        break;
      }
      rc = reduce_add(s, tc, s->col, into, &part, &sum, l, s->i);
    }
    if (!rc && s->dep) {
      if ((rc = comm_allreduce(s->dep, acc.data, acc.data, (size_t)tensor_numel(&acc), COMM_F32, COMM_SUM)))
        rc = fail(s, rc, "2.5D: %s", comm_last_error(s->dep));
      else if ((rc = tensor_add_forward(tc, dw, dw, &acc)))
        rc = fail(s, rc, "2.5D: %s", tensor_last_error(tc));
    }
  }
done:
  tensor_free(tc, &b), tensor_free(tc, &part), tensor_free(tc, &sum), tensor_free(tc, &acc);
  return rc;
}
