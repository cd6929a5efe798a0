/* The bytes of one transformer layer under each tensor-parallel mode, as
 * strata's layer (libparallel/src/model/tplayer.c) sends them and libcomm's
 * counters count them (an allreduce of B bytes over n ranks sends
 * 2 (n - 1)/n B). */
#include <math.h>

#include <strata/par_plan.h>

#include "plan_internal.h"

static const double lin_k[4] = {1, 1, 1, 4}, lin_n[4] = {3, 1, 4, 1}; /* qkv, proj, fc, fcproj in units of C */

double par_plan_tp_layer_formula(par_tp_mode_t mode, int tp, int depth, double rows, double hidden, double e) {
  double sum = 0;
  for (int t = 0; t < 4; t++) sum += plan_tp_linear_bytes(mode, tp, depth, rows, lin_k[t] * hidden, lin_n[t] * hidden, e);
  return sum;
}

static double allreduce_sent(double n, double bytes) { return n > 1 ? 2.0 * (n - 1) / n * bytes : 0.0; }

double par_plan_tp_layer_sent(par_tp_mode_t mode, int tp, int depth, double rows, double hidden, double e) {
  const double *k = lin_k, *n = lin_n;
  double C = hidden, d = mode == PAR_TP_2P5D ? depth : 1.0, products = 0;
  double q = mode == PAR_TP_3D ? llround(cbrt((double)tp)) : llround(sqrt((double)tp / d));
  for (int t = 0; t < 4; t++) {
    if (mode != PAR_TP_3D) {
      products += par_plan_tp_linear_sent(mode, tp, (int)d, rows, k[t] * C, n[t] * C, e);
      continue;
    }
    /* the 3D products keep their gathered input and weight for the
     * backward (par_mm3d_forward_saved): three all-gathers and three
     * reduce-scatters of whole blocks, (q - 1)/q (2a + 2b + 2c) */
    double a = rows * k[t] * C * e / (q * q), b = k[t] * C * n[t] * C * e / (q * q), c = rows * n[t] * C * e / (q * q);
    products += (q - 1) / q * 2 * (a + b + c);
  }
  if (mode == PAR_TP_1D) return products; /* layernorms and vectors whole on every rank */
  double rl = mode == PAR_TP_3D ? rows / (q * q) : rows / (d * q); /* this rank's rows */
  /* each layernorm: the rows' sums and their squared deviations in the
   * forward, the two sums of the backward in one message, over the q ranks
   * of a row */
  double ln = 2 * (allreduce_sent(q, rl * e) * 2 + allreduce_sent(q, 2 * rl * e));
  /* the 13 C/q vector parameters a rank keeps (two layernorms' 4 C, the
   * biases' 3 C + C + 4 C + C): their gradients summed over the replicas,
   * one axis after the other (2D: the column, 2.5D then the depth; 3D: the
   * two axes that do not cut their columns) */
  double v = 13.0 * C / q * e;
  double vec = mode == PAR_TP_3D ? 2 * allreduce_sent(q, v) : allreduce_sent(q, v) + allreduce_sent(d, v);
  return products + ln + vec;
}
