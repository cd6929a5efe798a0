/* Layout validation: the one check both the planner and the runtime run
 * before anything is allocated. Every rejection names the numbers. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>

#include <strata/parallel.h>

static int reject(char *why, size_t n, const char *fmt, ...) {
  if (why && n) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
  }
  return STRATA_EINVAL;
}

/* Integer k-th root of x when exact, else 0. */
static int exact_root(int x, int k) {
  int r = (int)llround(pow((double)x, 1.0 / k));
  for (int c = r > 1 ? r - 1 : 1; c <= r + 1; c++) {
    long long p = 1;
    for (int i = 0; i < k; i++) p *= c;
    if (p == x) return c;
  }
  return 0;
}

static const char *mode_name(par_tp_mode_t m) {
  switch (m) {
  case PAR_TP_1D: return "1d";
  case PAR_TP_2D: return "2d";
  case PAR_TP_2P5D: return "2.5d";
  case PAR_TP_3D: return "3d";
  }
  return "?";
}

int par_layout_validate(const par_gpt_config_t *m, const par_layout_t *l, int world, char *why,
                        size_t n) {
  if (why && n) why[0] = '\0';
  if (!m || !l) return reject(why, n, "model or layout is NULL");
  if (m->layers < 1 || m->hidden < 1 || m->heads < 1 || m->seq < 1 || m->vocab < 1)
    return reject(why, n, "model sizes must be >= 1 (layers %d, hidden %d, heads %d, seq %d, vocab %d)",
                  m->layers, m->hidden, m->heads, m->seq, m->vocab);
  if (m->hidden % m->heads)
    return reject(why, n, "hidden %d is not divisible by heads %d", m->hidden, m->heads);
  if (world < 1) return reject(why, n, "world size %d must be >= 1", world);
  if (l->dp < 1 || l->tp < 1 || l->pp < 1 || l->sp < 1)
    return reject(why, n, "degrees must be >= 1 (dp %d, tp %d, pp %d, sp %d)", l->dp, l->tp, l->pp,
                  l->sp);
  double prod = (double)l->dp * l->tp * l->pp * l->sp; /* exact up to 2^53, any int degrees */
  if (prod != world)
    return reject(why, n, "dp %d x tp %d x pp %d x sp %d = %.0f, not the %d devices", l->dp, l->tp,
                  l->pp, l->sp, prod, world);
  if ((int)l->tp_mode < PAR_TP_1D || (int)l->tp_mode > PAR_TP_3D)
    return reject(why, n, "unknown tensor mode %d", (int)l->tp_mode);
  if ((int)l->schedule < PAR_SCHED_GPIPE || (int)l->schedule > PAR_SCHED_INTERLEAVED)
    return reject(why, n, "unknown pipeline schedule %d", (int)l->schedule);
  if ((int)l->precision < PAR_PREC_FP32 || (int)l->precision > PAR_PREC_FP16)
    return reject(why, n, "unknown precision %d", (int)l->precision);
  if (l->seq_parallel && (l->tp < 2 || l->tp_mode != PAR_TP_1D))
    return reject(why, n, "sequence parallelism (Megatron's) needs 1d tensor parallelism over tp > 1 ranks (tp %d)",
                  l->tp);
  const par_tier_t tiers[3] = {l->offload_optimizer, l->offload_gradients, l->offload_params};
  for (int i = 0; i < 3; i++)
    if ((int)tiers[i] < PAR_TIER_DEVICE || (int)tiers[i] > PAR_TIER_NVME)
      return reject(why, n, "unknown offload tier %d", (int)tiers[i]);
  if (l->zero_stage < 0 || l->zero_stage > 3)
    return reject(why, n, "ZeRO stage %d is not 0..3", l->zero_stage);
  if (l->microbatch < 1 || l->global_batch < 1)
    return reject(why, n, "microbatch %d and global batch %d must be >= 1", l->microbatch,
                  l->global_batch);

  /* Tensor parallelism: the split of heads, hidden, vocabulary and rows. */
  const char *mn = mode_name(l->tp_mode);
  long long rows = (long long)l->microbatch * (m->seq / l->sp);
  int q = l->tp, d = l->tp_depth;
  if (l->tp_mode != PAR_TP_2P5D && d != 1)
    return reject(why, n, "tp_depth %d is only for 2.5d tensor parallelism (mode %s)", d, mn);
  switch (l->tp_mode) {
  case PAR_TP_1D: break;
  case PAR_TP_2D:
    q = exact_root(l->tp, 2);
    if (!q) return reject(why, n, "2d tensor parallelism needs a square tp, got %d", l->tp);
    break;
  case PAR_TP_2P5D:
    if (d < 1) return reject(why, n, "2.5d tp_depth %d must be >= 1", d);
    if (l->tp % d) return reject(why, n, "2.5d tp %d is not divisible by depth %d", l->tp, d);
    q = exact_root(l->tp / d, 2);
    if (!q)
      return reject(why, n, "2.5d tensor parallelism needs tp = q^2 x depth; tp %d / depth %d = %d is not a square",
                    l->tp, d, l->tp / d);
    break;
  case PAR_TP_3D:
    q = exact_root(l->tp, 3);
    if (!q) return reject(why, n, "3d tensor parallelism needs a cubic tp, got %d", l->tp);
    break;
  }
  /* Heads and the hidden size split across q (1d: across tp). */
  if (m->heads % q)
    return reject(why, n, "heads %d are not divisible by the %s tensor split %d", m->heads, mn, q);
  if (m->hidden % q)
    return reject(why, n, "hidden %d is not divisible by the %s tensor split %d", m->hidden, mn, q);
  if (m->vocab % q)
    return reject(why, n, "vocabulary %d is not divisible by the %s tensor split %d (pad it)",
                  m->vocab, mn, q);
  if (m->seq % l->sp)
    return reject(why, n, "sequence %d is not divisible by sequence-parallel degree %d", m->seq,
                  l->sp);
  if (l->tp_mode == PAR_TP_2D && rows % q)
    return reject(why, n, "2d: microbatch %d x sequence %d/%d = %lld rows not divisible by q %d",
                  l->microbatch, m->seq, l->sp, rows, q);
  if (l->tp_mode == PAR_TP_2P5D && rows % ((long long)q * d))
    return reject(why, n, "2.5d: microbatch %d x sequence %d/%d = %lld rows not divisible by q %d x depth %d",
                  l->microbatch, m->seq, l->sp, rows, q, d);
  if (l->tp_mode == PAR_TP_3D) {
    if (rows % ((long long)q * q))
      return reject(why, n, "3d: microbatch %d x sequence %d/%d = %lld rows not divisible by q^2 = %d",
                    l->microbatch, m->seq, l->sp, rows, q * q);
    if (m->hidden % (q * q))
      return reject(why, n, "3d: hidden %d is not divisible by q^2 = %d", m->hidden, q * q);
  }

  /* Pipeline: contiguous blocks, at least one per stage; the interleaved
   * schedule's chunks the same number each. Other schedules may split the
   * layers unevenly (the planner costs the heaviest stage, ceil(layers / pp);
   * strata's engine checks for an even split itself). */
  if (m->layers < l->pp)
    return reject(why, n, "layers %d are fewer than %d pipeline stages", m->layers, l->pp);
  if (l->interleave < 1) return reject(why, n, "interleave %d must be >= 1", l->interleave);
  if (l->schedule != PAR_SCHED_INTERLEAVED && l->interleave != 1)
    return reject(why, n, "interleave %d needs the interleaved schedule", l->interleave);
  if (l->schedule == PAR_SCHED_INTERLEAVED && m->layers % ((long long)l->pp * l->interleave))
    return reject(why, n, "layers %d are not divisible by %d stages x %d chunks", m->layers, l->pp,
                  l->interleave);

  /* Batch: whole microbatches on every data-parallel replica. */
  long long per_step = (long long)l->microbatch * l->dp;
  if (l->global_batch % per_step)
    return reject(why, n, "global batch %d is not a multiple of microbatch %d x dp %d = %lld",
                  l->global_batch, l->microbatch, l->dp, per_step);
  int mb = (int)(l->global_batch / per_step);
  if (l->schedule == PAR_SCHED_INTERLEAVED && mb % l->pp)
    return reject(why, n, "interleaved schedule: %d microbatches per replica not divisible by %d stages",
                  mb, l->pp);

  /* ZeRO and offload. */
  if (l->zero_stage >= 2 && l->pp > 1)
    return reject(why, n, "ZeRO stage %d shards gradients, which pipeline parallelism (pp %d) "
                  "accumulates over microbatches: use stage 0 or 1 with pp > 1",
                  l->zero_stage, l->pp);
  if (l->offload_params != PAR_TIER_DEVICE && l->zero_stage != 3)
    return reject(why, n, "parameter offload needs ZeRO stage 3 (stage %d)", l->zero_stage);
  if (l->offload_gradients != PAR_TIER_DEVICE && l->offload_optimizer == PAR_TIER_DEVICE)
    return reject(why, n, "gradient offload needs the optimizer offloaded too (it updates on the host)");
  if (l->offload_gradients == PAR_TIER_NVME)
    return reject(why, n, "gradients offload to the CPU only, not to NVMe");
  return STRATA_OK;
}
