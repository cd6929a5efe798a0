/* Generation with a KV cache: each new token runs one row through the
 * blocks, its keys and values are appended to the cache, and its query
 * attends over the cache (tensor_attention_decode) instead of over the
 * whole sequence again. A prompt is prefilled by one ordinary forward,
 * whose qkv activations already hold the keys and values. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpt_internal.h"

struct par_gpt_kv {
  par_gpt_t *m; /* borrowed */
  int tmax, len;
  tensor_t store;       /* K and V of every layer, then the row buffers */
  tensor_t *k, *v;      /* per layer (1, Tmax, C) */
  tensor_t x, ln, mean, rstd, qkv, att, tmp, res, fch, fchg, logits; /* one row */
  tensor_t ids;         /* (1, 1) i32 */
  float *host_logits;   /* V */
};

#define T_(call)                                                                                   \
  do {                                                                                             \
    rc = (call);                                                                                   \
    if (rc != STRATA_OK) {                                                                         \
      gpt_tensor_err(m, rc);                                                                       \
      goto fail;                                                                                   \
    }                                                                                              \
  } while (0)

void par_gpt_kv_destroy(par_gpt_kv_t *kv) {
  if (!kv) return;
  if (kv->m) {
    tensor_free(kv->m->tc, &kv->store);
    tensor_free(kv->m->tc, &kv->ids);
  }
  free(kv->k), free(kv->v), free(kv->host_logits);
  free(kv);
}

int par_gpt_kv_create(par_gpt_kv_t **out, par_gpt_t *m, int max_len) {
  int rc = STRATA_OK;
  if (!out || !m) return STRATA_EINVAL;
  *out = NULL;
  if (m->tp_size > 1)
    return gpt_seterr(m, STRATA_EUNSUPPORTED, "par_gpt_kv_create: generation runs on a model without tensor parallelism");
  if (max_len < 1 || max_len > m->cfg.seq)
    return gpt_seterr(m, STRATA_EINVAL, "par_gpt_kv_create: length %d outside [1, %d] (the model's positions)",
                      max_len, m->cfg.seq);
  par_gpt_kv_t *kv = calloc(1, sizeof *kv);
  if (!kv) return gpt_seterr(m, STRATA_ENOMEM, "par_gpt_kv_create: out of memory");
  kv->m = m, kv->tmax = max_len;
  int L = m->cfg.layers, dev = m->device;
  int64_t C = m->cfg.hidden, V = m->cfg.vocab, cache = (int64_t)max_len * C;
  int64_t n = 2 * L * cache + 9 * C + 3 * C + 8 * C + 2 + V;
  kv->k = calloc((size_t)L, sizeof *kv->k);
  kv->v = calloc((size_t)L, sizeof *kv->v);
  kv->host_logits = malloc((size_t)V * sizeof(float));
  if (!kv->k || !kv->v || !kv->host_logits) {
    rc = gpt_seterr(m, STRATA_ENOMEM, "par_gpt_kv_create: out of memory");
    goto fail;
  }
  int64_t two[2] = {1, 1};
  T_(tensor_alloc(m->tc, &kv->store, TENSOR_F32, dev, 1, &n));
  T_(tensor_alloc(m->tc, &kv->ids, TENSOR_I32, dev, 2, two));
  float *p = kv->store.data;
  for (int l = 0; l < L; l++) {
    kv->k[l] = tensor_view3(p, TENSOR_F32, dev, 1, max_len, C), p += cache;
    kv->v[l] = tensor_view3(p, TENSOR_F32, dev, 1, max_len, C), p += cache;
  }
#define ROW(t, c) (t) = tensor_view3(p, TENSOR_F32, dev, 1, 1, (c)), p += (c)
  ROW(kv->x, C), ROW(kv->ln, C), ROW(kv->qkv, 3 * C), ROW(kv->att, C), ROW(kv->tmp, C), ROW(kv->res, C);
  ROW(kv->fch, 4 * C), ROW(kv->fchg, 4 * C), ROW(kv->logits, V);
#undef ROW
  kv->mean = tensor_view2(p, TENSOR_F32, dev, 1, 1), p++;
  kv->rstd = tensor_view2(p, TENSOR_F32, dev, 1, 1), p++;
  *out = kv;
  return STRATA_OK;
fail:
  par_gpt_kv_destroy(kv);
  return rc;
}

int par_gpt_kv_len(const par_gpt_kv_t *kv) { return kv ? kv->len : 0; }
void par_gpt_kv_reset(par_gpt_kv_t *kv) {
  if (kv) kv->len = 0;
}

/* Copies n floats between two places of the model's device. */
static int dcopy(par_gpt_t *m, float *dst, const float *src, int64_t n) {
  tensor_t d = tensor_view1(dst, TENSOR_F32, m->device, n), s = tensor_view1((void *)src, TENSOR_F32, m->device, n);
  return tensor_copy(m->tc, &d, &s);
}

static int logits_to_host(par_gpt_kv_t *kv, const float *dev_row, float *logits) {
  par_gpt_t *m = kv->m;
  int64_t V = m->cfg.vocab;
  tensor_t h = tensor_view1(logits ? logits : kv->host_logits, TENSOR_F32, TENSOR_CPU, V);
  tensor_t d = tensor_view1((void *)dev_row, TENSOR_F32, m->device, V);
  int rc = tensor_copy(m->tc, &h, &d);
  return rc ? gpt_tensor_err(m, rc) : STRATA_OK;
}

/* One token at position kv->len. */
static int step(par_gpt_kv_t *kv, int32_t token, float *logits) {
  par_gpt_t *m = kv->m;
  tensor_ctx_t *tc = m->tc;
  int rc = STRATA_OK, pos = kv->len, C = m->cfg.hidden;
  tensor_t h = tensor_view2(&token, TENSOR_I32, TENSOR_CPU, 1, 1);
  T_(tensor_copy(tc, &kv->ids, &h));
  /* the position table from row pos: the embedding adds its row 0 */
  tensor_t wpe = tensor_view2((float *)m->wpe.data + (size_t)pos * C, TENSOR_F32, m->device, m->cfg.seq - pos, C);
  T_(tensor_embedding_forward(tc, &kv->x, &kv->ids, &m->wte, &wpe));
  for (int l = 0; l < m->cfg.layers; l++) {
    gpt_block_t *k = &m->blocks[l];
    T_(tensor_layernorm_forward(tc, &kv->ln, &kv->mean, &kv->rstd, &kv->x, &k->ln1.w, &k->ln1.b, GPT_LN_EPS));
    T_(tensor_linear_forward(tc, &kv->qkv, &kv->ln, &k->qkv.w, &k->qkv.b));
    float *row = kv->qkv.data;
    T_(dcopy(m, (float *)kv->k[l].data + (size_t)pos * C, row + C, C));
    T_(dcopy(m, (float *)kv->v[l].data + (size_t)pos * C, row + 2 * C, C));
    tensor_t q = tensor_view2(row, TENSOR_F32, m->device, 1, C);
    tensor_t att = tensor_view2(kv->att.data, TENSOR_F32, m->device, 1, C);
    T_(tensor_attention_decode(tc, &att, &q, &kv->k[l], &kv->v[l], pos + 1, m->cfg.heads));
    T_(tensor_linear_forward(tc, &kv->tmp, &kv->att, &k->proj.w, &k->proj.b));
    T_(tensor_add_forward(tc, &kv->res, &kv->x, &kv->tmp));
    T_(tensor_layernorm_forward(tc, &kv->ln, &kv->mean, &kv->rstd, &kv->res, &k->ln2.w, &k->ln2.b, GPT_LN_EPS));
    T_(tensor_linear_act_forward(tc, &kv->fchg, &kv->fch, &kv->ln, &k->fc.w, &k->fc.b, TENSOR_ACT_GELU));
    T_(tensor_linear_forward(tc, &kv->tmp, &kv->fchg, &k->fcproj.w, &k->fcproj.b));
    T_(tensor_add_forward(tc, &kv->x, &kv->res, &kv->tmp));
  }
  T_(tensor_layernorm_forward(tc, &kv->ln, &kv->mean, &kv->rstd, &kv->x, &m->lnf.w, &m->lnf.b, GPT_LN_EPS));
  T_(tensor_linear_forward(tc, &kv->logits, &kv->ln, &m->wte, NULL));
  kv->len++;
  rc = logits_to_host(kv, kv->logits.data, logits);
fail:
  return rc;
}

/* A prompt at the start: one forward; the keys and values are the middle
 * and last thirds of each block's qkv rows. */
static int prefill(par_gpt_kv_t *kv, const int32_t *tokens, int n, float *logits) {
  par_gpt_t *m = kv->m;
  int rc = par_gpt_forward(m, tokens, NULL, 1, n, NULL), C = m->cfg.hidden;
  if (rc) return rc;
  for (int l = 0; l < m->cfg.layers; l++) {
    const float *qkv = m->acts[l].qkv.data;
    for (int t = 0; t < n; t++) {
      if ((rc = dcopy(m, (float *)kv->k[l].data + (size_t)t * C, qkv + (size_t)t * 3 * C + C, C)) ||
          (rc = dcopy(m, (float *)kv->v[l].data + (size_t)t * C, qkv + (size_t)t * 3 * C + 2 * C, C)))
        return gpt_tensor_err(m, rc);
    }
  }
  kv->len = n;
  return logits_to_host(kv, (const float *)m->logits.data + (size_t)(n - 1) * m->cfg.vocab, logits);
}

int par_gpt_kv_append(par_gpt_kv_t *kv, const int32_t *tokens, int n, float *logits) {
  if (!kv || !tokens || n < 1) return STRATA_EINVAL;
  par_gpt_t *m = kv->m;
  if (kv->len + n > kv->tmax)
    return gpt_seterr(m, STRATA_EINVAL, "par_gpt_kv_append: %d + %d tokens exceed the cache's %d",
                      kv->len, n, kv->tmax);
  for (int i = 0; i < n; i++)
    if (tokens[i] < 0 || tokens[i] >= m->cfg.vocab)
      return gpt_seterr(m, STRATA_EINVAL, "par_gpt_kv_append: token %d outside [0, %d)", tokens[i], m->cfg.vocab);
  /* The forward keeps every block's qkv unless it recomputes them (or
   * keeps them in 16 bits: the cache is f32; decode then goes step by step). */
  if (kv->len == 0 && n > 1 && !m->cfg.recompute && m->act_dtype == TENSOR_F32) return prefill(kv, tokens, n, logits);
  int rc = STRATA_OK;
  for (int i = 0; i < n && rc == STRATA_OK; i++) rc = step(kv, tokens[i], logits);
  return rc;
}

const float *par_gpt_kv_logits(const par_gpt_kv_t *kv) { return kv ? kv->host_logits : NULL; }

/* ---- sampling ---- */

int par_gpt_sample(const float *logits, int V, const par_sample_options_t *o, uint64_t step,
                   int32_t *token) {
  if (!logits || V < 1 || !o || !token || !(o->temperature >= 0)) return STRATA_EINVAL;
  int best = 0;
  for (int i = 1; i < V; i++)
    if (logits[i] > logits[best]) best = i;
  if (o->temperature == 0 || o->top_k == 1) {
    *token = best; /* greedy: the first of the largest */
    return STRATA_OK;
  }
  /* The top_k largest (all when top_k <= 0), by a threshold: the k-th
   * largest value, found by selection on a copy. */
  double cut = -INFINITY;
  if (o->top_k > 0 && o->top_k < V) {
    float *c = malloc((size_t)V * sizeof *c);
    if (!c) return STRATA_ENOMEM;
    memcpy(c, logits, (size_t)V * sizeof *c);
    int lo = 0, hi = V - 1, k = o->top_k - 1; /* quickselect for the k-th largest */
    while (lo < hi) {
      float pivot = c[(lo + hi) / 2];
      int i = lo, j = hi;
      while (i <= j) {
        while (c[i] > pivot) i++;
        while (c[j] < pivot) j--;
        if (i <= j) {
          float t = c[i];
          c[i++] = c[j], c[j--] = t;
        }
      }
      if (k <= j) hi = j;
      else if (k >= i) lo = i;
      else break;
    }
    cut = c[k];
    free(c);
  }
  double m = logits[best], sum = 0;
  for (int i = 0; i < V; i++)
    if (logits[i] >= cut) sum += exp((logits[i] - m) / o->temperature);
  /* u in [0, 1) from Philox keyed by the seed, counter the step. */
  uint32_t key[2], ctr[4] = {(uint32_t)step, (uint32_t)(step >> 32), 0x53414d50u, 0}, r[4];
  tensor_rng_key(key, o->seed, "sample");
  tensor_philox(r, key, ctr);
  double u = ((double)(r[0] >> 5) * 67108864.0 + (double)(r[1] >> 6)) / 9007199254740992.0;
  double acc = 0, target = u * sum;
  int last = best;
  for (int i = 0; i < V; i++) {
    if (logits[i] < cut) continue;
    acc += exp((logits[i] - m) / o->temperature);
    last = i;
    if (acc > target) break;
  }
  *token = last;
  return STRATA_OK;
}
