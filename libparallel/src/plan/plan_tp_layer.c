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

/* ---- strata's engine under 2D, 2.5D and 3D: what a rank holds ----------- */

/* q, the weights' blocks per mesh layer (q^2; 3D q^3), the row blocks of a
 * batch (2D q, 2.5D d q, 3D q^2). */
static void md_shape(const par_layout_t *l, double *q, double *wblocks, double *rowblocks) {
  double d = l->tp_mode == PAR_TP_2P5D ? l->tp_depth : 1.0;
  *q = plan_tp_q(l);
  *wblocks = l->tp_mode == PAR_TP_3D ? *q * *q * *q : *q * *q;
  *rowblocks = l->tp_mode == PAR_TP_3D ? *q * *q : d * *q;
}

void plan_md_regions(const par_gpt_config_t *m, const par_layout_t *l, double *r0, double *blk, double *rl) {
  double q, w, rb, h = m->hidden;
  md_shape(l, &q, &w, &rb);
  /* the embeddings' columns of the residual stream (every row), each block's
   * weights in blocks and its 13 h vector elements by column (replicated
   * down them), the final layernorm's columns (libparallel/src/model/tp_md.c) */
  *r0 = ((double)m->vocab + m->seq) * h / q;
  *blk = 12.0 * h * h / w + 13.0 * h / q;
  *rl = 2.0 * h / q;
}

double plan_md_activations(const par_gpt_config_t *m, const par_layout_t *l) {
  double q, w, rb, h = m->hidden, V = m->vocab, S = m->seq, L = m->layers;
  md_shape(l, &q, &w, &rb);
  double R = (double)l->microbatch * S, rows = R / rb, A = h / q, hl = m->heads / q;
  /* a block's kept activations (tpl_acts_t): the layernorms' outputs and the
   * residual, 3 rows A; qkv, attention output, MLP hidden and its GELU,
   * 12 rows A; four row statistics and the log-sum-exp per head; under 3D
   * each product's gathered input (rows K) and weight (K N / q^2) */
  double keep = l->tp_mode == PAR_TP_3D ? rows * 7.0 * h + 12.0 * h * h / (q * q) : 0.0;
  double block = rows * (15.0 * A + 4.0 + hl) + keep;
  double sets = m->recompute ? 1.0 : L;
  /* the residual streams (L + 1), the head's final layernorm, statistics,
   * logits of the whole vocabulary, losses and log-sum-exp; the backward's
   * residual and layernorm gradients and the logits' gradient; the layer's
   * scratch (tpl_prepare: its backward's buffers, the vector gradients, the
   * transposed weight and its gradient); the embedding's gradient scratch;
   * the batch's tokens and targets (int32) */
  double streams = (L + 1.0) * rows * A, head = rows * (A + V + 4.0) + 2.0 * rows * A + rows * V;
  double scratch = rows * (15.0 * A + 2.0) + 13.0 * A + 2.0 * 4.0 * h * h / w, embg = (V + S + 2.0) * A;
  /* the largest product's transient buffers while it runs backward: SUMMA
   * a broadcast block and two partial sums of the input (fcproj: rows 4h/q)
   * and its weight (2.5D: and the weight gradient's sum over the depth); the
   * 3D product the gathered output gradient (rows 4h), the partial sums of
   * the gathered input and weight and their pieces */
  double trans = l->tp_mode == PAR_TP_3D ? rows * 4.0 * h + rows * 4.0 * h + 4.0 * h * h / (q * q) + rows * h / q + 4.0 * h * h / w
                                         : 2.0 * rows * 4.0 * h / q + (l->tp_mode == PAR_TP_2P5D ? 2.0 : 1.0) * 4.0 * h * h / w;
  return 4.0 * (sets * block + streams + head + scratch + embg + 2.0 * R + trans); /* fp32, as the model computes */
}
