/* The device checks of the multi-dimensional tensor-parallel pieces, on
 * one rank and any machine (tensor descriptors that name a CUDA device are
 * only looked at, never touched): SUMMA's and the 3D product's blocks
 * must all be on x's device, the layer's blocks on the layer's, each
 * refused otherwise (STRATA_ESHAPE) with a message naming the device it
 * wanted; a layer asked for a device where there is none fails at
 * creation naming why. (The device runs themselves: gpu_tpmd_engine.) */
#include <stdio.h>
#include <string.h>

#include <strata/par_mm3d.h>
#include <strata/par_summa.h>
#include <strata/par_tplayer.h>

#include "gpt/mpi_check.h"

int main(void) {
  comm_t *world;
  tensor_ctx_t *tc;
  check_start("tp_device_args", &world, &tc);
  float a[6] = {0}, b[6] = {0}, c[4] = {0};
  tensor_t x = tensor_view2(a, TENSOR_F32, TENSOR_CPU, 2, 3), w = tensor_view2(b, TENSOR_F32, TENSOR_CPU, 3, 2),
           y = tensor_view2(c, TENSOR_F32, TENSOR_CPU, 2, 2);
  tensor_t wd = tensor_view2(b, TENSOR_F32, 0, 3, 2), yd = tensor_view2(c, TENSOR_F32, 1, 2, 2);
  char err[512];
  par_summa_t *s = NULL;
  if (par_summa_create(&s, world, 1, err, sizeof err) == STRATA_OK) {
    CHECK(par_summa_forward(s, tc, &y, &x, &w) == STRATA_OK, "SUMMA on the CPU: %s", par_summa_error(s));
    CHECK(par_summa_forward(s, tc, &y, &x, &wd) == STRATA_ESHAPE && strstr(par_summa_error(s), "w must") &&
              strstr(par_summa_error(s), "on x's device (cpu)"),
          "SUMMA with w on cuda:0: '%s'", par_summa_error(s));
    CHECK(par_summa_backward(s, tc, NULL, &y, &yd, &x, &w) == STRATA_ESHAPE && strstr(par_summa_error(s), "dy must"),
          "SUMMA backward with dy on cuda:1: '%s'", par_summa_error(s));
  } else {
    CHECK(0, "SUMMA on one rank: %s", err);
  }
  par_summa_destroy(s);
  par_mm3d_t *m = NULL;
  if (par_mm3d_create(&m, world, err, sizeof err) == STRATA_OK) {
    CHECK(par_mm3d_forward(m, tc, &y, &x, &w) == STRATA_OK, "3D on the CPU: %s", par_mm3d_error(m));
    CHECK(par_mm3d_forward(m, tc, &yd, &x, &w) == STRATA_ESHAPE && strstr(par_mm3d_error(m), "y must") &&
              strstr(par_mm3d_error(m), "(cpu)"),
          "3D with y on cuda:1: '%s'", par_mm3d_error(m));
  } else {
    CHECK(0, "3D on one rank: %s", err);
  }
  par_mm3d_destroy(m);
  par_tplayer_config_t cfg = {.mode = PAR_TP_2D, .batch = 2, .seq = 4, .hidden = 8, .heads = 2, .seed = 1};
  par_tplayer_t *L = NULL;
  if (par_tplayer_create(&L, world, tc, &cfg, err, sizeof err) == STRATA_OK) {
    int64_t rows, cols;
    par_tplayer_block(L, &rows, &cols, NULL, NULL);
    float xb[64] = {0}, yb[64] = {0};
    tensor_t hx = tensor_view2(xb, TENSOR_F32, TENSOR_CPU, rows, cols),
             hy = tensor_view2(yb, TENSOR_F32, TENSOR_CPU, rows, cols);
    tensor_t dx = tensor_view2(xb, TENSOR_F32, 0, rows, cols);
    CHECK(rows * cols == 64 && par_tplayer_forward(L, &hy, &hx) == STRATA_OK, "the CPU layer: %s",
          par_tplayer_error(L));
    CHECK(par_tplayer_forward(L, &hy, &dx) == STRATA_ESHAPE && strstr(par_tplayer_error(L), "layer's device (cpu)"),
          "the CPU layer given x on cuda:0: '%s'", par_tplayer_error(L));
  } else {
    CHECK(0, "the 2D layer on one rank: %s", err);
  }
  par_tplayer_destroy(L);
  if (tensor_cuda_device_count() == 0) { /* (with a GPU the layer would be made) */
    cfg.on_device = 1, cfg.device = 0;
    int rc = par_tplayer_create(&L, world, tc, &cfg, err, sizeof err);
    CHECK(rc != STRATA_OK && !L && strstr(err, "cuda"), "a layer on cuda:0 without a GPU: %d, '%s'", rc, err);
    par_tplayer_destroy(L);
  }
  return check_finish(world, tc);
}
