/* The 3D matrix product on a q^3 cube (strata/par_mm3d.h): pieces
 * all-gathered into whole blocks along one axis each, the block product,
 * and the sums reduce-scattered back into pieces. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <strata/par_mm3d.h>

struct par_mm3d {
  comm_mesh_t *mesh;
  comm_t *ax[3]; /* the groups along i, j, l */
  int q, c[3];
  char err[512];
};

static int fail(par_mm3d_t *m, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(par_mm3d_t *m, int rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m->err, sizeof m->err, fmt, ap);
  va_end(ap);
  return rc;
}

int par_mm3d_create(par_mm3d_t **out, comm_t *c, char *err, size_t errlen) {
  if (err && errlen) err[0] = 0;
  if (!out || !c) return STRATA_EINVAL;
  *out = NULL;
  int n = comm_size(c), q = (int)lround(cbrt((double)n));
  if (q * q * q != n) {
    if (err && errlen) snprintf(err, errlen, "3D tensor parallelism needs a cube number of ranks, not %d", n);
    return STRATA_EINVAL;
  }
  par_mm3d_t *m = calloc(1, sizeof *m);
  if (!m) return STRATA_ENOMEM;
  const char *names[3] = {"l", "j", "i"}; /* innermost first */
  int sizes[3] = {q, q, q}, rc;
  comm_mesh_config_t mc = COMM_MESH_CONFIG_DEFAULTS;
  mc.node_order = 0;
  if ((rc = comm_mesh_create(&m->mesh, c, 3, names, sizes, &mc)) || (rc = comm_mesh_group(m->mesh, "i", &m->ax[0])) ||
      (rc = comm_mesh_group(m->mesh, "j", &m->ax[1])) || (rc = comm_mesh_group(m->mesh, "l", &m->ax[2]))) {
    if (err && errlen) snprintf(err, errlen, "cube of %d: %s", q, m->mesh ? comm_mesh_last_error(m->mesh) : "");
    par_mm3d_destroy(m);
    return rc;
  }
  m->q = q;
  m->c[0] = comm_mesh_coord(m->mesh, "i"), m->c[1] = comm_mesh_coord(m->mesh, "j"), m->c[2] = comm_mesh_coord(m->mesh, "l");
  *out = m;
  return STRATA_OK;
}

void par_mm3d_destroy(par_mm3d_t *m) {
  if (!m) return;
  comm_mesh_destroy(m->mesh);
  free(m);
}

void par_mm3d_coords(const par_mm3d_t *m, int *i, int *j, int *l, int *q) {
  if (i) *i = m->c[0];
  if (j) *j = m->c[1];
  if (l) *l = m->c[2];
  if (q) *q = m->q;
}

comm_t *par_mm3d_axis(par_mm3d_t *m, const char *axis) {
  if (!m || !axis || !axis[0] || axis[1]) return NULL;
  return axis[0] == 'i' ? m->ax[0] : axis[0] == 'j' ? m->ax[1] : axis[0] == 'l' ? m->ax[2] : NULL;
}

const char *par_mm3d_error(const par_mm3d_t *m) { return m ? m->err : ""; }

/* A buffer on `dev` (the pieces' device: the CPU, or a CUDA device whose
 * caching allocator serves it and whose collectives go through NCCL). */
static int buf(par_mm3d_t *m, tensor_ctx_t *tc, tensor_t *t, int64_t r, int64_t c, int dev) {
  int64_t s[2] = {r, c};
  int rc = tensor_alloc(tc, t, TENSOR_F32, dev, 2, s);
  return rc ? fail(m, rc, "3D: %s", tensor_last_error(tc)) : STRATA_OK;
}

/* whole (q pieces by rows) = the pieces of g's ranks, in rank order. */
static int gather(par_mm3d_t *m, int a, tensor_t *whole, const tensor_t *piece) {
  int rc = comm_allgather(m->ax[a], whole->data, piece->data, (size_t)tensor_numel(piece), COMM_F32);
  return rc ? fail(m, rc, "3D: %s", comm_last_error(m->ax[a])) : STRATA_OK;
}

/* dst += this rank's piece (by rows) of the sum over axis a of whole. */
static int scatter_add(par_mm3d_t *m, tensor_ctx_t *tc, int a, tensor_t *dst, const tensor_t *whole, tensor_t *piece,
                       int add) {
  int rc = comm_reduce_scatter(m->ax[a], piece->data, whole->data, (size_t)tensor_numel(piece), COMM_F32, COMM_SUM);
  if (rc) return fail(m, rc, "3D: %s", comm_last_error(m->ax[a]));
  if (!add) return STRATA_OK;
  rc = tensor_add_forward(tc, dst, dst, piece);
  return rc ? fail(m, rc, "3D: %s", tensor_last_error(tc)) : STRATA_OK;
}

/* A 2-D fp32 piece on `dev` (the first piece's device). */
static int check2(par_mm3d_t *m, const char *what, const tensor_t *t, int dev) {
  if (!t || t->ndim != 2 || t->dtype != TENSOR_F32 || t->device != dev) {
    char d[32] = "cpu";
    if (dev != TENSOR_CPU) snprintf(d, sizeof d, "cuda:%d", dev);
    return fail(m, STRATA_ESHAPE, "3D: %s must be a 2-D fp32 piece on the device of the others (%s)", what, d);
  }
  return STRATA_OK;
}

void par_mm3d_saved_free(tensor_ctx_t *tc, par_mm3d_saved_t *keep) {
  if (!keep) return;
  tensor_free(tc, &keep->x), tensor_free(tc, &keep->w);
}

/* keep = X_il gathered along j and W_lj along i. */
static int gather_xw(par_mm3d_t *m, tensor_ctx_t *tc, const tensor_t *x, const tensor_t *w, par_mm3d_saved_t *keep) {
  int rc, q = m->q;
  if (keep->x.data && keep->x.device == x->device && keep->x.shape[0] == x->shape[0] * q &&
      keep->x.shape[1] == x->shape[1] && keep->w.data && keep->w.shape[0] == w->shape[0] * q &&
      keep->w.shape[1] == w->shape[1]) {
    /* the buffers of the last forward serve again */
  } else {
    par_mm3d_saved_free(tc, keep);
    if ((rc = buf(m, tc, &keep->x, x->shape[0] * q, x->shape[1], x->device)) ||
        (rc = buf(m, tc, &keep->w, w->shape[0] * q, w->shape[1], x->device)))
      return rc;
  }
  return (rc = gather(m, 1, &keep->x, x)) ? rc : gather(m, 0, &keep->w, w);
}

int par_mm3d_forward_saved(par_mm3d_t *m, tensor_ctx_t *tc, tensor_t *y, const tensor_t *x, const tensor_t *w,
                           par_mm3d_saved_t *keep) {
  if (!m || !tc || !keep) return STRATA_EINVAL;
  int rc, q = m->q;
  if ((rc = check2(m, "x", x, x ? x->device : TENSOR_CPU)) || (rc = check2(m, "w", w, x->device)) ||
      (rc = check2(m, "y", y, x->device)))
    return rc;
  if (x->shape[1] != w->shape[0] * q || y->shape[0] != x->shape[0] || y->shape[1] != w->shape[1])
    return fail(m, STRATA_ESHAPE, "3D: pieces x %lld x %lld, w %lld x %lld, y %lld x %lld do not make a product",
                (long long)x->shape[0], (long long)x->shape[1], (long long)w->shape[0], (long long)w->shape[1],
                (long long)y->shape[0], (long long)y->shape[1]);
  tensor_t yc = {0};
  if ((rc = gather_xw(m, tc, x, w, keep)) || (rc = buf(m, tc, &yc, y->shape[0] * q, y->shape[1], x->device))) goto done;
  if ((rc = tensor_matmul(tc, &yc, &keep->x, &keep->w, 0, 0, 1.f, 0.f))) {
    rc = fail(m, rc, "3D: %s", tensor_last_error(tc));
    goto done;
  }
  rc = scatter_add(m, tc, 2, y, &yc, y, 0);
done:
  tensor_free(tc, &yc);
  return rc;
}

int par_mm3d_forward(par_mm3d_t *m, tensor_ctx_t *tc, tensor_t *y, const tensor_t *x, const tensor_t *w) {
  par_mm3d_saved_t keep = {0};
  int rc = par_mm3d_forward_saved(m, tc, y, x, w, &keep);
  par_mm3d_saved_free(tc, &keep);
  return rc;
}

int par_mm3d_backward_saved(par_mm3d_t *m, tensor_ctx_t *tc, tensor_t *dx, tensor_t *dw, const tensor_t *dy,
                            const par_mm3d_saved_t *keep) {
  if (!m || !tc || !keep) return STRATA_EINVAL;
  int rc, q = m->q;
  int dev = dy ? dy->device : TENSOR_CPU;
  if ((rc = check2(m, "dy", dy, dev)) || (rc = check2(m, "dx", dx, dev)) || (rc = check2(m, "dw", dw, dev)) ||
      (rc = check2(m, "the saved x", &keep->x, dev)) || (rc = check2(m, "the saved w", &keep->w, dev)))
    return rc;
  const tensor_t *xa = &keep->x, *wb = &keep->w;
  tensor_t gc = {0}, pa = {0}, pb = {0}, px = {0}, pw = {0};
  if ((rc = buf(m, tc, &gc, dy->shape[0] * q, dy->shape[1], dev)) ||
      (rc = buf(m, tc, &pa, xa->shape[0], xa->shape[1], dev)) ||
      (rc = buf(m, tc, &pb, wb->shape[0], wb->shape[1], dev)) ||
      (rc = buf(m, tc, &px, dx->shape[0], dx->shape[1], dev)) ||
      (rc = buf(m, tc, &pw, dw->shape[0], dw->shape[1], dev)) || (rc = gather(m, 2, &gc, dy)))
    goto done;
  /* dX_il = sum_j dY_ij W_lj^T (along j), dW_lj = sum_i X_il^T dY_ij (along i) */
  if ((rc = tensor_matmul(tc, &pa, &gc, wb, 0, 1, 1.f, 0.f)) || (rc = tensor_matmul(tc, &pb, xa, &gc, 1, 0, 1.f, 0.f))) {
    rc = fail(m, rc, "3D: %s", tensor_last_error(tc));
    goto done;
  }
  if ((rc = scatter_add(m, tc, 1, dx, &pa, &px, 1))) goto done;
  rc = scatter_add(m, tc, 0, dw, &pb, &pw, 1);
done:
  tensor_free(tc, &gc), tensor_free(tc, &pa), tensor_free(tc, &pb), tensor_free(tc, &px), tensor_free(tc, &pw);
  return rc;
}

int par_mm3d_backward(par_mm3d_t *m, tensor_ctx_t *tc, tensor_t *dx, tensor_t *dw, const tensor_t *dy,
                      const tensor_t *x, const tensor_t *w) {
  if (!m || !tc) return STRATA_EINVAL;
  int rc;
  if ((rc = check2(m, "x", x, x ? x->device : TENSOR_CPU)) || (rc = check2(m, "w", w, x->device))) return rc;
  par_mm3d_saved_t keep = {0};
  if (!(rc = gather_xw(m, tc, x, w, &keep))) rc = par_mm3d_backward_saved(m, tc, dx, dw, dy, &keep);
  par_mm3d_saved_free(tc, &keep);
  return rc;
}
