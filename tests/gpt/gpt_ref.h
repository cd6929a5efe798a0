/* A double-precision GPT-2 forward written from the model's definition (not
 * from libparallel's code), reading parameters in the documented flat layout
 * of strata/par_gpt.h. Used for the whole-model gradient check. */
#ifndef STRATA_TESTS_GPT_REF_H
#define STRATA_TESTS_GPT_REF_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  int L, C, NH, Tmax, V;
} ref_cfg_t;

static void ref_ln(double *out, const double *x, const double *w, const double *b, int C) {
  double m = 0, v = 0;
  for (int i = 0; i < C; i++) m += x[i];
  m /= C;
  for (int i = 0; i < C; i++) v += (x[i] - m) * (x[i] - m);
  v /= C;
  for (int i = 0; i < C; i++) out[i] = (x[i] - m) / sqrt(v + 1e-5) * w[i] + b[i];
}

/* out(N) = W(N,K) x(K) + b */
static void ref_lin(double *out, const double *x, const double *W, const double *b, int N, int K) {
  for (int n = 0; n < N; n++) {
    double s = b ? b[n] : 0;
    for (int k = 0; k < K; k++) s += W[(size_t)n * K + k] * x[k];
    out[n] = s;
  }
}

static double ref_gelu1(double x) { return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }

/* Mean cross-entropy over targets >= 0 of B sequences of T tokens. */
static double ref_gpt_loss(const ref_cfg_t *c, const double *p, const int *tok, const int *tgt, int B, int T) {
  int C = c->C, V = c->V, L = c->L, NH = c->NH, hs = C / NH;
  const double *wte = p, *wpe = wte + (size_t)V * C, *blk = wpe + (size_t)c->Tmax * C;
  size_t bsz = 12 * (size_t)C * C + 13 * (size_t)C;
  const double *lnf = blk + L * bsz;
  double *x = calloc((size_t)T * C, sizeof(double)), *h = calloc((size_t)T * 4 * C, sizeof(double));
  double *qkv = calloc((size_t)T * 3 * C, sizeof(double)), *y = calloc((size_t)T * C, sizeof(double));
  double *t1 = calloc((size_t)4 * C, sizeof(double)), *t2 = calloc((size_t)4 * C, sizeof(double));
  double *w = calloc((size_t)T, sizeof(double)), *logit = calloc((size_t)V, sizeof(double));
  double total = 0;
  int count = 0;
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < T; t++)
      for (int i = 0; i < C; i++) x[t * C + i] = wte[(size_t)tok[b * T + t] * C + i] + wpe[t * C + i];
    for (int l = 0; l < L; l++) {
      const double *q = blk + l * bsz;
      const double *ln1w = q, *ln1b = ln1w + C, *qkvw = ln1b + C, *qkvb = qkvw + 3 * C * C;
      const double *pw = qkvb + 3 * C, *pb = pw + C * C, *ln2w = pb + C, *ln2b = ln2w + C;
      const double *fw = ln2b + C, *fb = fw + 4 * C * C, *f2w = fb + 4 * C, *f2b = f2w + 4 * C * C;
      for (int t = 0; t < T; t++) {
        ref_ln(t1, x + t * C, ln1w, ln1b, C);
        ref_lin(qkv + t * 3 * C, t1, qkvw, qkvb, 3 * C, C);
      }
      for (int hh = 0; hh < NH; hh++)
        for (int i = 0; i < T; i++) {
          double m = -1e300, s = 0;
          for (int j = 0; j <= i; j++) {
            double d = 0;
            for (int k = 0; k < hs; k++) d += qkv[i * 3 * C + hh * hs + k] * qkv[j * 3 * C + C + hh * hs + k];
            w[j] = d / sqrt((double)hs);
            if (w[j] > m) m = w[j];
          }
          for (int j = 0; j <= i; j++) s += (w[j] = exp(w[j] - m));
          for (int k = 0; k < hs; k++) {
            double a = 0;
            for (int j = 0; j <= i; j++) a += w[j] / s * qkv[j * 3 * C + 2 * C + hh * hs + k];
            y[i * C + hh * hs + k] = a;
          }
        }
      for (int t = 0; t < T; t++) {
        ref_lin(t1, y + t * C, pw, pb, C, C);
        for (int i = 0; i < C; i++) x[t * C + i] += t1[i];
        ref_ln(t1, x + t * C, ln2w, ln2b, C);
        ref_lin(h, t1, fw, fb, 4 * C, C);
        for (int i = 0; i < 4 * C; i++) h[i] = ref_gelu1(h[i]);
        ref_lin(t2, h, f2w, f2b, C, 4 * C);
        for (int i = 0; i < C; i++) x[t * C + i] += t2[i];
      }
    }
    for (int t = 0; t < T; t++) {
      int target = tgt[b * T + t];
      if (target < 0) continue;
      ref_ln(t1, x + t * C, lnf, lnf + C, C);
      ref_lin(logit, t1, wte, NULL, V, C);
      double m = -1e300, s = 0;
      for (int v = 0; v < V; v++) m = logit[v] > m ? logit[v] : m;
      for (int v = 0; v < V; v++) s += exp(logit[v] - m);
      total += m + log(s) - logit[target];
      count++;
    }
  }
  free(x), free(h), free(qkv), free(y), free(t1), free(t2), free(w), free(logit);
  return count ? total / count : 0;
}

#endif
