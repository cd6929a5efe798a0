/* Dynamic loss scaling for fp16 training (Micikevicius et al., "Mixed
 * Precision Training", arXiv 1710.03740, Section 3.2): a step whose
 * gradients overflowed on any shard is skipped and the scale shrinks; after
 * `window` good steps in a row it grows again. */
#include <stdio.h>
#include <stdlib.h>

#include <strata/optim.h>

#include "internal.h"

struct optim_scaler {
  optim_scaler_config cfg;
  float scale;
  int good;     /* good steps since the scale last changed */
  long skipped; /* steps skipped so far */
};

int optim_scaler_create(optim_scaler **out, const optim_scaler_config *cfg, char *err,
                        size_t errlen) {
  int rc = STRATA_OK;
  optim_scaler_config c = OPTIM_SCALER_DEFAULTS;
  optim_scaler *s = NULL;
  if (err && errlen) err[0] = 0;
  if (!out) return optim_fail_msg(err, errlen, STRATA_EINVAL, "optim_scaler_create: out is NULL");
  *out = NULL;
  if (cfg) c = *cfg;
  if (!(c.min_scale > 0.0f) || !(c.max_scale >= c.min_scale) || !(c.init_scale >= c.min_scale) ||
      !(c.init_scale <= c.max_scale)) {
    rc = optim_fail_msg(
        err, errlen, STRATA_EINVAL,
        "optim_scaler_create: need 0 < min_scale <= init_scale <= max_scale, got %g, %g, %g",
        (double)c.min_scale, (double)c.init_scale, (double)c.max_scale);
    goto fail;
  }
  if (!(c.growth > 1.0f) || !(c.backoff > 0.0f && c.backoff < 1.0f) || c.window < 1) {
    rc = optim_fail_msg(
        err, errlen, STRATA_EINVAL,
        "optim_scaler_create: need growth > 1, 0 < backoff < 1, window >= 1; got %g, %g, %d",
        (double)c.growth, (double)c.backoff, c.window);
    goto fail;
  }
  s = calloc(1, sizeof *s);
  if (!s) {
    rc = optim_fail_msg(err, errlen, STRATA_ENOMEM, "optim_scaler_create: out of memory");
    goto fail;
  }
  s->cfg = c;
  s->scale = c.init_scale;
  *out = s;
fail:
  return rc;
}

void optim_scaler_destroy(optim_scaler *s) {
  free(s);
}

float optim_scaler_scale(const optim_scaler *s) {
  return s ? s->scale : 1.0f;
}

int optim_scaler_update(optim_scaler *s, int found_nonfinite, int *skip) {
  if (!s || !skip) return STRATA_EINVAL;
  if (found_nonfinite) {
    float ns = s->scale * s->cfg.backoff;
    s->scale = ns < s->cfg.min_scale ? s->cfg.min_scale : ns;
    s->good = 0;
    s->skipped++;
    *skip = 1;
  } else {
    *skip = 0;
    if (++s->good >= s->cfg.window) {
      float ns = s->scale * s->cfg.growth;
      s->scale = ns > s->cfg.max_scale ? s->cfg.max_scale : ns;
      s->good = 0;
    }
  }
  return STRATA_OK;
}

int optim_scaler_restore(optim_scaler *s, float scale, int good, long skipped) {
  if (!s || !(scale >= s->cfg.min_scale && scale <= s->cfg.max_scale) || good < 0 ||
      good >= s->cfg.window || skipped < 0)
    return STRATA_EINVAL;
  s->scale = scale, s->good = good, s->skipped = skipped;
  return STRATA_OK;
}

long optim_scaler_skipped(const optim_scaler *s) {
  return s ? s->skipped : 0;
}

int optim_scaler_good_steps(const optim_scaler *s) {
  return s ? s->good : 0;
}
