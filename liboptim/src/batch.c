/* Batch-size warm-up and the learning-rate rules that follow a batch change
 * (strata/optim.h). Pure functions: a training loop asks for the batch and
 * the factor of each update, so a resumed run recomputes them from the step
 * alone. */
#include <math.h>
#include <stdio.h>

#include <strata/optim.h>

#include "internal.h"

int optim_batch_schedule_check(const optim_batch_schedule *s, char *err, size_t errlen) {
  if (!s) return optim_fail_msg(err, errlen, STRATA_EINVAL, "batch schedule: NULL");
  if (s->start < 1 || s->end < s->start)
    return optim_fail_msg(err, errlen, STRATA_EINVAL, "batch schedule: start %ld and end %ld need 1 <= start <= end",
                          s->start, s->end);
  if (s->quantum < 1 || s->start % s->quantum || s->end % s->quantum)
    return optim_fail_msg(err, errlen, STRATA_EINVAL, "batch schedule: quantum %ld must divide start %ld and end %ld",
                          s->quantum, s->start, s->end);
  if (s->warmup < 0 || !(s->warmup_tokens >= 0) || isinf(s->warmup_tokens) || (s->warmup > 0 && s->warmup_tokens > 0))
    return optim_fail_msg(err, errlen, STRATA_EINVAL,
                          "batch schedule: warm-up of %ld updates and %g tokens (one of them, >= 0)", s->warmup,
                          s->warmup_tokens);
  if (s->seq < 1) return optim_fail_msg(err, errlen, STRATA_EINVAL, "batch schedule: seq %ld must be >= 1", s->seq);
  return STRATA_OK;
}

/* start + quantum floor(n q) for q = num / den in [0, 1], in integers where
 * the warm-up counts updates (so q = 1 gives end exactly). */
static long by_updates(const optim_batch_schedule *s, long t) {
  long n = (s->end - s->start) / s->quantum;
  if (t >= s->warmup) return s->end;
  return s->start + s->quantum * (long)((__int128)n * t / s->warmup);
}

static long by_tokens(const optim_batch_schedule *s, double before) {
  long n = (s->end - s->start) / s->quantum;
  if (before >= s->warmup_tokens) return s->end;
  long k = (long)floor((double)n * before / s->warmup_tokens);
  if (k > n) k = n;
  return s->start + s->quantum * k;
}

long optim_batch_at(const optim_batch_schedule *s, long t) {
  if (t < 0) t = 0;
  if (s->start == s->end) return s->end;
  if (s->warmup_tokens > 0) {
    double before = 0;
    for (long u = 0; u < t; u++) {
      long b = by_tokens(s, before);
      if (b == s->end) return s->end; /* the batch never shrinks: the warm-up is over */
      before += (double)b * (double)s->seq;
    }
    return by_tokens(s, before);
  }
  if (s->warmup == 0) return s->end;
  return by_updates(s, t);
}

double optim_batch_tokens_before(const optim_batch_schedule *s, long t) {
  double before = 0;
  long u = 0;
  for (; u < t; u++) { /* through the warm-up, then end per update */
    long b = s->warmup_tokens > 0 ? by_tokens(s, before)
             : s->start == s->end || s->warmup == 0 ? s->end : by_updates(s, u);
    if (b == s->end) break;
    before += (double)b * (double)s->seq;
  }
  return before + (double)(t - u) * (double)s->end * (double)s->seq;
}

double optim_lr_batch_factor(int rule, double batch, double ref) {
  if (!(batch > 0) || !(ref > 0)) return 1.0;
  switch (rule) {
  case OPTIM_LR_RULE_LINEAR: return batch / ref;
  case OPTIM_LR_RULE_SQRT: return sqrt(batch / ref);
  default: return 1.0;
  }
}
