/* The names of a model's arrays in strata checkpoints (internal), shared by
 * the engine's checkpoints and the weight files of strata convert.
 *
 * Format 2 (format_version = 2) names them as a person reads them:
 *   model/embed/tokens/weight, model/embed/positions/weight,
 *   model/blocks/3/attn/qkv/weight, model/blocks/3/mlp/proj/bias, ...,
 *   model/ln_f/weight, and the optimizer state beside them:
 *   optim/adamw/m/blocks/3/attn/qkv/weight, optim/adamw/v/...
 * Format 1 (no format_version attribute) used the view names:
 *   params/h.3.attn.qkv.w, optim/m/h.3.attn.qkv.w. */
#ifndef STRATA_PAR_CKPT_NAMES_H
#define STRATA_PAR_CKPT_NAMES_H

#include <stdio.h>
#include <string.h>

#define CKPT_FORMAT "strata checkpoint"
#define CKPT_FORMAT_VERSION 2

/* The path of a view ("h.3.attn.qkv.w" -> "blocks/3/attn/qkv/weight"). */
static inline void ckpt_view_path(const char *view, char *out, size_t n) {
  int l;
  char kind[32];
  if (!strcmp(view, "wte")) snprintf(out, n, "embed/tokens/weight");
  else if (!strcmp(view, "wpe")) snprintf(out, n, "embed/positions/weight");
  else if (!strcmp(view, "ln_f.w")) snprintf(out, n, "ln_f/weight");
  else if (!strcmp(view, "ln_f.b")) snprintf(out, n, "ln_f/bias");
  else if (sscanf(view, "h.%d.%31s", &l, kind) == 2) {
    size_t k = strlen(kind);
    int bias = k > 2 && !strcmp(kind + k - 2, ".b");
    kind[k - 2] = 0; /* drop ".w" / ".b" */
    for (char *p = kind; *p; p++)
      if (*p == '.') *p = '/';
    snprintf(out, n, "blocks/%d/%s/%s", l, kind, bias ? "bias" : "weight");
  } else {
    snprintf(out, n, "%s", view);
  }
}

/* The array of a view: what = 'p' (parameters), 'm' or 'v' (optimizer
 * state of optimizer `optim`), in format `version`. */
static inline void ckpt_array_name(int version, char what, const char *optim, const char *view, char *out,
                                   size_t n) {
  char path[160];
  if (version < 2) {
    if (what == 'p') snprintf(out, n, "params/%s", view);
    else snprintf(out, n, "optim/%c/%s", what, view);
    return;
  }
  ckpt_view_path(view, path, sizeof path);
  if (what == 'p') snprintf(out, n, "model/%s", path);
  else snprintf(out, n, "optim/%s/%c/%s", optim, what, path);
}

#endif
