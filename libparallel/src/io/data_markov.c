/* The generated corpus: a seeded sparse first-order Markov chain over bytes.
 *
 * For a stationary ergodic Markov source the entropy rate is
 *   H = -sum_i pi_i sum_j P_ij ln P_ij            (Cover & Thomas, Thm 4.2.4)
 * where pi is the stationary distribution (pi P = pi). No model can reach a
 * lower expected per-byte cross-entropy, so a training run can report its
 * validation loss minus H as "distance from the best possible". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <strata/parallel.h>

#include "data_rng.h"
#include "num.h"

#define NS 256

struct par_markov {
  int fanout;
  uint8_t next[NS][NS];  /* next[s][0..fanout): successor states */
  double prob[NS][NS];   /* prob[s][k]: probability of next[s][k] */
  double cum[NS][NS];    /* running sums of prob[s][..], cum[s][fanout-1] == 1 */
  double pi[NS];         /* stationary distribution */
  double entropy;        /* nats per byte */
};

static void seterr(char *err, size_t errlen, const char *msg) {
  if (err && errlen) snprintf(err, errlen, "%s", msg);
}

/* pi <- pi (P + I) / 2 until the L1 change is below 1e-14 (the lazy chain
 * is aperiodic, so the iteration converges whenever P is irreducible). */
static void stationary(par_markov_t *m) {
  double cur[NS], nxt[NS];
  for (int s = 0; s < NS; s++) cur[s] = 1.0 / NS;
  for (int it = 0; it < 1000000; it++) {
    for (int s = 0; s < NS; s++) nxt[s] = 0.5 * cur[s];
    for (int s = 0; s < NS; s++)
      for (int k = 0; k < m->fanout; k++) nxt[m->next[s][k]] += 0.5 * cur[s] * m->prob[s][k];
    double diff = 0, sum = 0;
    for (int s = 0; s < NS; s++) {
      diff += fabs(nxt[s] - cur[s]);
      sum += nxt[s];
    }
    for (int s = 0; s < NS; s++) cur[s] = nxt[s] / sum;
    if (diff < 1e-14) break;
  }
  memcpy(m->pi, cur, sizeof cur);
}

int par_markov_create(const par_markov_options_t *opts, par_markov_t **out, char *err,
                      size_t errlen) {
  par_markov_options_t o = PAR_MARKOV_DEFAULTS;
  char msg[160];
  if (opts) o = *opts;
  if (!out) return STRATA_EINVAL;
  *out = NULL;
  if (o.fanout < 1 || o.fanout > NS) {
    snprintf(msg, sizeof msg, "markov fanout %d is outside 1..%d", o.fanout, NS);
    seterr(err, errlen, msg);
    return STRATA_EINVAL;
  }
  if (!(o.skew >= 0 && o.skew <= 16)) {
    snprintf(msg, sizeof msg, "markov skew %s is outside 0..16", par_num(o.skew).s);
    seterr(err, errlen, msg);
    return STRATA_EINVAL;
  }
  par_markov_t *m = calloc(1, sizeof *m);
  if (!m) {
    seterr(err, errlen, "out of memory for the Markov table");
    return STRATA_ENOMEM;
  }
  m->fanout = o.fanout;
  uint64_t st = o.seed ^ 0x6d61726b6f76ULL; /* "markov" */
  for (int s = 0; s < NS; s++) {
    /* Successors: s+1 first (irreducibility), then distinct random states
     * (partial Fisher-Yates over the others). */
    uint8_t pool[NS];
    int n = 0;
    for (int t = 0; t < NS; t++)
      if (t != (s + 1) % NS) pool[n++] = (uint8_t)t;
    m->next[s][0] = (uint8_t)((s + 1) % NS);
    for (int k = 1; k < o.fanout; k++) {
      int j = k - 1 + (int)(rng_next(&st) % (uint64_t)(n - (k - 1)));
      uint8_t tmp = pool[k - 1];
      pool[k - 1] = pool[j];
      pool[j] = tmp;
      m->next[s][k] = pool[k - 1];
    }
    double w[NS], sum = 0;
    for (int k = 0; k < o.fanout; k++) {
      double u = rng_uniform(&st);
      w[k] = o.skew == 0 ? 1.0 : pow(-log(u), o.skew);
      sum += w[k];
    }
    double c = 0;
    for (int k = 0; k < o.fanout; k++) {
      m->prob[s][k] = w[k] / sum;
      c += m->prob[s][k];
      m->cum[s][k] = c;
    }
    m->cum[s][o.fanout - 1] = 1.0;
  }
  stationary(m);
  double h = 0;
  for (int s = 0; s < NS; s++) {
    double hs = 0;
    for (int k = 0; k < m->fanout; k++)
      if (m->prob[s][k] > 0) hs -= m->prob[s][k] * log(m->prob[s][k]);
    h += m->pi[s] * hs;
  }
  m->entropy = h;
  *out = m;
  return STRATA_OK;
}

void par_markov_destroy(par_markov_t *m) { free(m); }

double par_markov_entropy_rate(const par_markov_t *m) { return m ? m->entropy : -1; }

double par_markov_prob(const par_markov_t *m, int from, int to) {
  if (!m || from < 0 || from >= NS || to < 0 || to >= NS) return 0;
  double p = 0;
  for (int k = 0; k < m->fanout; k++)
    if (m->next[from][k] == to) p += m->prob[from][k];
  return p;
}

double par_markov_stationary(const par_markov_t *m, int s) {
  return (m && s >= 0 && s < NS) ? m->pi[s] : 0;
}

static int pick(const double *cum, int n, double u) {
  int k = 0;
  while (k < n - 1 && u >= cum[k]) k++;
  return k;
}

void par_markov_generate(const par_markov_t *m, uint64_t seed, size_t n, uint8_t *out) {
  if (!m || !out || n == 0) return;
  uint64_t st = seed ^ 0x636f72707573ULL; /* "corpus" */
  double cpi[NS], c = 0;
  for (int s = 0; s < NS; s++) {
    c += m->pi[s];
    cpi[s] = c;
  }
  cpi[NS - 1] = 1.0;
  int s = pick(cpi, NS, rng_uniform(&st));
  out[0] = (uint8_t)s;
  for (size_t i = 1; i < n; i++) {
    s = m->next[s][pick(m->cum[s], m->fanout, rng_uniform(&st))];
    out[i] = (uint8_t)s;
  }
}
