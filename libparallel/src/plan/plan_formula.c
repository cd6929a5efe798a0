/* Closed-form counts the planner builds on: parameters, FLOPs, ZeRO model
 * states. Each cites the paper and equation it implements. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <strata/parallel.h>

double par_plan_param_count(const par_gpt_config_t *m) {
  if (!m) return 0.0;
  double l = m->layers, h = m->hidden, v = m->vocab, s = m->seq;
  /* Per block: ln1 2h, qkv 3h^2+3h, proj h^2+h, ln2 2h, fc 4h^2+4h, fc-proj
   * 4h^2+h = 12h^2 + 13h. Token (V h) and position (s h) embeddings, final
   * layernorm 2h; the LM head is the token embedding (tied), counted once. */
  return l * (12.0 * h * h + 13.0 * h) + (v + s) * h + 2.0 * h;
}

double par_megatron_param_count(const par_gpt_config_t *m) {
  if (!m) return 0.0;
  double l = m->layers, h = m->hidden, v = m->vocab, s = m->seq;
  /* arXiv 2104.04473 sec. 5.1: P = 12 l h^2 (1 + 13/(12h) + (V+s)/(12 l h)). */
  return 12.0 * l * h * h * (1.0 + 13.0 / (12.0 * h) + (v + s) / (12.0 * l * h));
}

double par_megatron_flops(const par_gpt_config_t *m, double batch, int recompute) {
  if (!m) return 0.0;
  double l = m->layers, h = m->hidden, v = m->vocab, s = m->seq, b = batch;
  /* arXiv 2104.04473 eq. 3. A block's forward is 24 b s h^2 + 4 b s^2 h
   * FLOPs, the logit layer's 2 b s h V; backward is twice the forward and
   * recompute adds one more forward of the blocks (not of the logit layer):
   * 4 (24 b s l h^2 + 4 b s^2 l h) + 3 * 2 b s h V = F. */
  double passes = recompute ? 4.0 : 3.0;
  return passes * (24.0 * b * s * l * h * h + 4.0 * b * s * s * l * h) + 6.0 * b * s * h * v;
}

double par_megatron_train_seconds(double tokens, double params, double gpus, double flops_per_gpu) {
  if (gpus <= 0 || flops_per_gpu <= 0) return 0.0;
  /* arXiv 2104.04473 sec. 5.1: end-to-end time ~ 8 T P / (n X). */
  return 8.0 * tokens * params / (gpus * flops_per_gpu);
}

int par_zero_model_states(double params, int nd, int stage, double k, double out[3]) {
  if (!out || nd < 1 || stage < 0 || stage > 3 || !(params >= 0) || !(k >= 0))
    return STRATA_EINVAL;
  /* arXiv 1910.02054 sec. 5.1 (Figure 1): fp16 parameters 2P, fp16
   * gradients 2P, optimizer states K P; stage 1 shards the optimizer states,
   * stage 2 also the gradients, stage 3 also the parameters, over Nd. */
  double n = nd;
  out[0] = stage >= 3 ? 2.0 * params / n : 2.0 * params;
  out[1] = stage >= 2 ? 2.0 * params / n : 2.0 * params;
  out[2] = stage >= 1 ? k * params / n : k * params;
  return STRATA_OK;
}

const char *par_zero_format_gb(double gb, char *buf, size_t n) {
  if (!buf || n == 0) return buf;
  /* ZeRO's Table 1 prints figures from 100 GB up as truncated integers
   * (4187.5 -> 4187), below 100 with one decimal and below 10 with two,
   * rounded half up (41.25 -> 41.3, 1.875 -> 1.88). printf rounds ties to
   * even, so the rounding is done here. */
  if (gb >= 100.0) {
    snprintf(buf, n, "%.0f", floor(gb));
  } else if (gb >= 10.0) {
    snprintf(buf, n, "%.1f", floor(gb * 10.0 + 0.5) / 10.0);
  } else {
    snprintf(buf, n, "%.2f", floor(gb * 100.0 + 0.5) / 100.0);
  }
  return buf;
}
