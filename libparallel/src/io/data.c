/* Token streams, the train/validation split and deterministic batches.
 *
 * Data is a list of shards (memory-mapped files, or one generated buffer).
 * Each split is a list of token ranges; a range of n tokens gives
 * floor((n-1)/T) samples, window w reading tokens [wT, wT+T] (inputs are the
 * first T, targets the last T). Samples never cross shard boundaries, as in
 * llm.c's loader. Training order is a keyed permutation per epoch
 * (a Feistel network with cycle walking), so the whole data position is one
 * counter and batches depend only on (seed, position, rank). */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <strata/parallel.h>

#include "data_rng.h"
#include "num.h"

#define LLMC_MAGIC 20240520
#define LLMC_HEADER_BYTES (256 * 4)

typedef struct {
  void *map;   /* mmap'd file (or malloc'd buffer when owned == 2) */
  size_t len;  /* bytes mapped */
  int owned;   /* 1: munmap, 2: free */
  const uint8_t *tokens; /* first token */
  int width;   /* bytes per token: 1, 2 or 4 */
  uint64_t n;  /* tokens */
} shard_t;

typedef struct {
  int shard;
  uint64_t start, n; /* token range inside the shard */
  uint64_t windows;  /* samples in this range */
  uint64_t first;    /* samples in the ranges before this one */
} range_t;

typedef struct {
  range_t *r;
  int count;
  uint64_t windows, tokens;
} split_t;

struct par_data {
  shard_t *shards;
  int nshards;
  split_t split[2];
  int seq, vocab;
  uint32_t next_max;  /* token files: the largest token id below the largest */
  uint64_t max_count; /* occurrences of the largest */
  uint64_t seed, position;
  double entropy;
  char err[512];
};

#define FAIL(code, ...)                                                                            \
  do {                                                                                             \
    rc = (code);                                                                                   \
    snprintf(msg, sizeof msg, __VA_ARGS__);                                                        \
    goto fail;                                                                                     \
  } while (0)

static uint32_t token_at(const shard_t *s, uint64_t i) {
  switch (s->width) {
  case 1: return s->tokens[i];
  case 2: {
    uint16_t v;
    memcpy(&v, s->tokens + 2 * i, 2);
    return v;
  }
  default: {
    uint32_t v;
    memcpy(&v, s->tokens + 4 * i, 4);
    return v;
  }
  }
}

static const char *format_name(par_data_format_t f) {
  switch (f) {
  case PAR_DATA_MARKOV: return "markov";
  case PAR_DATA_TEXT: return "text";
  case PAR_DATA_U16: return "uint16 tokens";
  case PAR_DATA_U32: return "uint32 tokens";
  case PAR_DATA_LLMC: return "llm.c shard";
  default: return "auto";
  }
}

/* data.source = auto: an llm.c shard by its magic number, .u16 and .u32 by
 * the extension, else text. A .bin file without the magic is refused: it is
 * no text, and its layout cannot be told (PAR_DATA_AUTO: *magic gets what
 * the file starts with). */
static par_data_format_t detect(const uint8_t *p, size_t len, const char *path, int32_t *magic) {
  *magic = 0;
  if (len >= 4) memcpy(magic, p, 4);
  if (*magic == LLMC_MAGIC) return PAR_DATA_LLMC;
  size_t l = strlen(path);
  if (l >= 4 && strcmp(path + l - 4, ".u16") == 0) return PAR_DATA_U16;
  if (l >= 4 && strcmp(path + l - 4, ".u32") == 0) return PAR_DATA_U32;
  if (l >= 4 && strcmp(path + l - 4, ".bin") == 0) return PAR_DATA_AUTO;
  return PAR_DATA_TEXT;
}

/* Maps one file into *s and checks its format. */
static int map_file(const char *path, par_data_format_t fmt, shard_t *s, char *msg, size_t ml) {
  int rc = STRATA_OK, fd = -1;
  struct stat sb;
  memset(s, 0, sizeof *s);
  fd = open(path, O_RDONLY);
  if (fd < 0) {
    snprintf(msg, ml, "data file '%s': %s", path, strerror(errno));
    return STRATA_EIO;
  }
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    snprintf(msg, ml, "data file '%s': not a regular file", path);
    rc = STRATA_EIO;
    goto done;
  }
  if (sb.st_size == 0) {
    snprintf(msg, ml, "data file '%s' is empty", path);
    rc = STRATA_ECORRUPT;
    goto done;
  }
  s->len = (size_t)sb.st_size;
  s->map = mmap(NULL, s->len, PROT_READ, MAP_PRIVATE, fd, 0);
  if (s->map == MAP_FAILED) {
    s->map = NULL;
    snprintf(msg, ml, "data file '%s': mmap: %s", path, strerror(errno));
    rc = STRATA_EIO;
    goto done;
  }
  s->owned = 1;
  const uint8_t *p = s->map;
  if (fmt == PAR_DATA_AUTO) {
    int32_t magic;
    if ((fmt = detect(p, s->len, path, &magic)) == PAR_DATA_AUTO) {
      snprintf(msg, ml,
               "data file '%s': data.source = auto takes an llm.c shard by its magic number %d, and this "
               ".bin file starts with %d (%zu bytes); name its format (llmc, uint16, uint32, text)",
               path, LLMC_MAGIC, magic, s->len);
      rc = STRATA_ECORRUPT;
      goto done;
    }
  }
  switch (fmt) {
  case PAR_DATA_TEXT:
    s->width = 1, s->tokens = p, s->n = s->len;
    break;
  case PAR_DATA_U16:
  case PAR_DATA_U32:
    s->width = fmt == PAR_DATA_U16 ? 2 : 4;
    if (s->len % (size_t)s->width) {
      snprintf(msg, ml, "data file '%s': size %zu bytes is not a multiple of %d (%s)", path,
               s->len, s->width, format_name(fmt));
      rc = STRATA_ECORRUPT;
      goto done;
    }
    s->tokens = p, s->n = s->len / (size_t)s->width;
    break;
  case PAR_DATA_LLMC: {
    int32_t h[3];
    if (s->len < LLMC_HEADER_BYTES) {
      snprintf(msg, ml, "data file '%s': %zu bytes, shorter than the llm.c header (%d bytes)",
               path, s->len, LLMC_HEADER_BYTES);
      rc = STRATA_ECORRUPT;
      goto done;
    }
    memcpy(h, p, sizeof h);
    if (h[0] != LLMC_MAGIC) {
      snprintf(msg, ml, "data file '%s': bad llm.c magic %d (expected %d)", path, h[0],
               LLMC_MAGIC);
      rc = STRATA_ECORRUPT;
      goto done;
    }
    if (h[1] != 1) {
      snprintf(msg, ml, "data file '%s': llm.c version %d is not supported (expected 1, uint16)",
               path, h[1]);
      rc = STRATA_ECORRUPT;
      goto done;
    }
    size_t body = s->len - LLMC_HEADER_BYTES;
    if (h[2] == 0 && body == 0) {
      snprintf(msg, ml, "data file '%s': an llm.c shard with no tokens (its header says 0)", path);
      rc = STRATA_ECORRUPT;
      goto done;
    }
    if (h[2] <= 0 || (size_t)h[2] * 2 != body) {
      snprintf(msg, ml,
               "data file '%s': llm.c header says %d tokens (%lld bytes) but the file holds %zu "
               "bytes of tokens",
               path, h[2], 2LL * h[2], body);
      rc = STRATA_ECORRUPT;
      goto done;
    }
    s->width = 2, s->tokens = p + LLMC_HEADER_BYTES, s->n = (uint64_t)h[2];
    break;
  }
  default:
    snprintf(msg, ml, "data file '%s': unknown format %d", path, (int)fmt);
    rc = STRATA_EINVAL;
    goto done;
  }
done:
  if (fd >= 0) close(fd);
  if (rc != STRATA_OK && s->map) {
    munmap(s->map, s->len);
    s->map = NULL;
  }
  return rc;
}

/* Expands a path or glob into shards appended to d; *first gets the index of
 * the first new shard. */
static int add_files(par_data_t *d, const char *pattern, par_data_format_t fmt, int *first,
                     char *msg, size_t ml) {
  int rc = STRATA_OK;
  glob_t g;
  memset(&g, 0, sizeof g);
  *first = d->nshards;
  int wild = strpbrk(pattern, "*?[") != NULL;
  if (wild) {
    int gr = glob(pattern, 0, NULL, &g);
    if (gr != 0 || g.gl_pathc == 0) {
      snprintf(msg, ml, "data: no file matches '%s'", pattern);
      globfree(&g);
      return STRATA_EIO;
    }
  }
  size_t n = wild ? g.gl_pathc : 1;
  shard_t *ns = realloc(d->shards, (size_t)(d->nshards + (int)n) * sizeof *ns);
  if (!ns) {
    snprintf(msg, ml, "data: out of memory");
    rc = STRATA_ENOMEM;
    goto done;
  }
  d->shards = ns;
  for (size_t i = 0; i < n; i++) {
    const char *p = wild ? g.gl_pathv[i] : pattern;
    rc = map_file(p, fmt, &d->shards[d->nshards], msg, ml);
    if (rc != STRATA_OK) goto done;
    d->nshards++;
  }
done:
  if (wild) globfree(&g);
  return rc;
}

static int add_range(split_t *sp, int shard, uint64_t start, uint64_t n, int seq) {
  range_t *r = realloc(sp->r, (size_t)(sp->count + 1) * sizeof *r);
  if (!r) return STRATA_ENOMEM;
  sp->r = r;
  range_t *x = &r[sp->count++];
  x->shard = shard, x->start = start, x->n = n;
  x->windows = n > 0 ? (n - 1) / (uint64_t)seq : 0;
  x->first = sp->windows;
  sp->windows += x->windows;
  sp->tokens += n;
  return STRATA_OK;
}

int par_data_open(const par_data_options_t *opts, par_data_t **out, char *err, size_t errlen) {
  par_data_options_t o = PAR_DATA_DEFAULTS;
  par_data_t *d = NULL;
  par_markov_t *mk = NULL;
  char msg[512] = "";
  int rc = STRATA_OK;
  if (opts) o = *opts;
  if (!out) return STRATA_EINVAL;
  *out = NULL;
  if (o.seq < 1) FAIL(STRATA_EINVAL, "data: seq %d must be >= 1", o.seq);
  if (!(o.val_fraction >= 0 && o.val_fraction < 1))
    FAIL(STRATA_EINVAL, "data: val_fraction %s is outside [0, 1)", par_num(o.val_fraction).s);
  if ((int)o.format < 0 || o.format > PAR_DATA_AUTO)
    FAIL(STRATA_EINVAL, "data: unknown format %d", (int)o.format);
  d = calloc(1, sizeof *d);
  if (!d) FAIL(STRATA_ENOMEM, "data: out of memory");
  d->seq = o.seq, d->seed = o.seed, d->entropy = -1, d->vocab = 256;

  if (o.format == PAR_DATA_MARKOV) {
    if (o.markov_tokens < 2 * (size_t)(o.seq + 1))
      FAIL(STRATA_EINVAL, "data: markov_tokens %zu is too small for seq %d", o.markov_tokens,
           o.seq);
    rc = par_markov_create(&o.markov, &mk, msg, sizeof msg);
    if (rc != STRATA_OK) goto fail;
    d->shards = calloc(1, sizeof *d->shards);
    uint8_t *buf = malloc(o.markov_tokens);
    if (!d->shards || !buf) {
      free(buf);
      FAIL(STRATA_ENOMEM, "data: out of memory for %zu generated tokens", o.markov_tokens);
    }
    par_markov_generate(mk, o.seed, o.markov_tokens, buf);
    d->shards[0] = (shard_t){.map = buf, .len = o.markov_tokens, .owned = 2, .tokens = buf,
                             .width = 1, .n = o.markov_tokens};
    d->nshards = 1;
    d->entropy = par_markov_entropy_rate(mk);
  } else {
    if (!o.path || !*o.path) FAIL(STRATA_EINVAL, "data: %s needs a path", format_name(o.format));
    int first;
    rc = add_files(d, o.path, o.format, &first, msg, sizeof msg);
    if (rc != STRATA_OK) goto fail;
  }
  int ntrain = d->nshards;
  if (o.val_path && *o.val_path && o.format != PAR_DATA_MARKOV) {
    int first;
    rc = add_files(d, o.val_path, o.format, &first, msg, sizeof msg);
    if (rc != STRATA_OK) goto fail;
    for (int i = 0; i < ntrain; i++)
      if ((rc = add_range(&d->split[0], i, 0, d->shards[i].n, o.seq))) goto oom;
    for (int i = ntrain; i < d->nshards; i++)
      if ((rc = add_range(&d->split[1], i, 0, d->shards[i].n, o.seq))) goto oom;
  } else {
    for (int i = 0; i < ntrain; i++) {
      uint64_t n = d->shards[i].n;
      uint64_t nv = (uint64_t)((double)n * o.val_fraction);
      if ((rc = add_range(&d->split[0], i, 0, n - nv, o.seq))) goto oom;
      if (nv && (rc = add_range(&d->split[1], i, n - nv, nv, o.seq))) goto oom;
    }
  }
  const char *what = o.format == PAR_DATA_MARKOV ? "generated corpus" : o.path;
  if (d->split[0].windows == 0)
    FAIL(STRATA_ECORRUPT,
         "data '%s': the training split holds %llu tokens per shard at most, fewer than "
         "seq+1 = %d",
         what, (unsigned long long)d->split[0].tokens, o.seq + 1);
  if (d->split[1].windows == 0 && (o.val_fraction > 0 || (o.val_path && *o.val_path)))
    FAIL(STRATA_ECORRUPT,
         "data '%s': the validation split holds %llu tokens, fewer than seq+1 = %d "
         "(raise val_fraction or use more data)",
         (o.val_path && *o.val_path) ? o.val_path : what,
         (unsigned long long)d->split[1].tokens, o.seq + 1);
  /* Vocabulary of token files: 1 + the largest token. */
  uint32_t vmax = 0;
  for (int i = 0; i < d->nshards; i++) {
    const shard_t *s = &d->shards[i];
    if (s->width == 1) {
      vmax = vmax > 255 ? vmax : 255;
      continue;
    }
    uint32_t m = 0;
#pragma omp parallel for reduction(max : m) schedule(static)
    for (uint64_t j = 0; j < s->n; j++) {
      uint32_t t = token_at(s, j);
      m = t > m ? t : m;
    }
    vmax = m > vmax ? m : vmax;
  }
  if (vmax >= 0x7fffffffu) FAIL(STRATA_ECORRUPT, "data '%s': token %u is too large", what, vmax);
  d->vocab = (int)vmax + 1;
  /* How the largest token stands among the others (par_data_vocab_note). */
  for (int i = 0; i < d->nshards; i++) {
    const shard_t *s = &d->shards[i];
    uint32_t below = 0;
    uint64_t count = 0;
    if (s->width == 1) {
      below = 254;
      continue;
    }
#pragma omp parallel for reduction(max : below) reduction(+ : count) schedule(static)
    for (uint64_t j = 0; j < s->n; j++) {
      uint32_t t = token_at(s, j);
      if (t == vmax) count++;
      else if (t > below) below = t;
    }
    d->max_count += count;
    if (below > d->next_max) d->next_max = below;
  }
  par_markov_destroy(mk);
  *out = d;
  return STRATA_OK;
oom:
  snprintf(msg, sizeof msg, "data: out of memory");
fail:
  par_markov_destroy(mk);
  par_data_destroy(d);
  if (err && errlen) snprintf(err, errlen, "%s", msg);
  return rc;
}

void par_data_destroy(par_data_t *d) {
  if (!d) return;
  for (int i = 0; i < d->nshards; i++) {
    if (d->shards[i].owned == 1) munmap(d->shards[i].map, d->shards[i].len);
    if (d->shards[i].owned == 2) free(d->shards[i].map);
  }
  free(d->shards);
  free(d->split[0].r);
  free(d->split[1].r);
  free(d);
}

const char *par_data_error(const par_data_t *d) { return d ? d->err : "no data handle"; }
const char *par_data_describe(const par_data_t *d, char *buf, size_t n) {
  if (!buf || !n) return buf;
  if (!d) return snprintf(buf, n, "none"), buf;
  snprintf(buf, n, "seed=%llu seq=%d train_samples=%llu val_samples=%llu", (unsigned long long)d->seed, d->seq,
           (unsigned long long)par_data_samples(d, PAR_SPLIT_TRAIN), (unsigned long long)par_data_samples(d, PAR_SPLIT_VAL));
  return buf;
}
int par_data_vocab(const par_data_t *d) { return d ? d->vocab : 0; }

const char *par_data_vocab_note(const par_data_t *d, char *buf, size_t n) {
  if (!buf || !n) return buf;
  buf[0] = 0;
  uint64_t total = d ? par_data_tokens(d, PAR_SPLIT_TRAIN) + par_data_tokens(d, PAR_SPLIT_VAL) : 0;
  if (!d || d->max_count == 0 || total == 0) return buf;
  uint32_t top = (uint32_t)d->vocab - 1;
  /* a few occurrences (at most 3, or 1 in 100000), at least twice every other token */
  if ((d->max_count <= 3 || d->max_count * 100000 <= total) && top >= 2 * (d->next_max + 1))
    snprintf(buf, n,
             "the vocabulary is %d because token %u occurs %llu time%s in %llu tokens, while every other token "
             "is at most %u",
             d->vocab, top, (unsigned long long)d->max_count, d->max_count == 1 ? "" : "s",
             (unsigned long long)total, d->next_max);
  return buf;
}
double par_data_entropy_rate(const par_data_t *d) { return d ? d->entropy : -1; }
uint64_t par_data_tokens(const par_data_t *d, par_split_t s) {
  return (d && (s == PAR_SPLIT_TRAIN || s == PAR_SPLIT_VAL)) ? d->split[s].tokens : 0;
}
uint64_t par_data_samples(const par_data_t *d, par_split_t s) {
  return (d && (s == PAR_SPLIT_TRAIN || s == PAR_SPLIT_VAL)) ? d->split[s].windows : 0;
}
uint64_t par_data_position(const par_data_t *d) { return d ? d->position : 0; }
void par_data_set_position(par_data_t *d, uint64_t p) {
  if (d) d->position = p;
}

/* A keyed bijection of [0, n): a 4-round balanced Feistel network on the
 * smallest even number of bits covering n, iterated until the value falls
 * inside [0, n) (cycle walking keeps it a bijection; Black & Rogaway 2002). */
static uint64_t permute(uint64_t i, uint64_t n, uint64_t key) {
  if (n <= 1) return 0;
  int bits = 2;
  while (bits < 64 && (1ULL << bits) < n) bits += 2;
  int half = bits / 2;
  uint64_t mask = (1ULL << half) - 1;
  do {
    uint64_t l = i >> half, r = i & mask;
    for (int round = 0; round < 4; round++) {
      uint64_t f = rng_mix(key ^ (r * 0x9e3779b97f4a7c15ULL) ^ ((uint64_t)round << 56)) & mask;
      uint64_t t = l ^ f;
      l = r;
      r = t;
    }
    i = (l << half) | r;
  } while (i >= n);
  return i;
}

static void window(const par_data_t *d, const split_t *sp, uint64_t w, int32_t *in, int32_t *tg) {
  int lo = 0, hi = sp->count - 1;
  while (lo < hi) { /* last range with first <= w */
    int mid = (lo + hi + 1) / 2;
    if (sp->r[mid].first <= w) lo = mid;
    else hi = mid - 1;
  }
  const range_t *r = &sp->r[lo];
  const shard_t *s = &d->shards[r->shard];
  uint64_t base = r->start + (w - r->first) * (uint64_t)d->seq;
  for (int t = 0; t < d->seq; t++) {
    in[t] = (int32_t)token_at(s, base + (uint64_t)t);
    tg[t] = (int32_t)token_at(s, base + (uint64_t)t + 1);
  }
}

int par_data_fill(const par_data_t *d, par_split_t split, uint64_t first, int batch,
                  int32_t *inputs, int32_t *targets) {
  if (!d) return STRATA_EINVAL;
  par_data_t *dm = (par_data_t *)d; /* last-error message only */
  if ((split != PAR_SPLIT_TRAIN && split != PAR_SPLIT_VAL) || batch < 0 ||
      (batch > 0 && (!inputs || !targets))) {
    snprintf(dm->err, sizeof dm->err, "data fill: bad arguments (split %d, batch %d)", (int)split,
             batch);
    return STRATA_EINVAL;
  }
  const split_t *sp = &d->split[split];
  if (sp->windows == 0) {
    snprintf(dm->err, sizeof dm->err, "data fill: the %s split is empty",
             split == PAR_SPLIT_TRAIN ? "training" : "validation");
    return STRATA_ESTATE;
  }
  uint64_t n = sp->windows;
  for (int b = 0; b < batch; b++) {
    uint64_t g = first + (uint64_t)b, w;
    if (split == PAR_SPLIT_TRAIN) w = permute(g % n, n, rng_mix(d->seed ^ rng_mix(g / n + 1)));
    else w = g % n;
    window(d, sp, w, inputs + (size_t)b * (size_t)d->seq, targets + (size_t)b * (size_t)d->seq);
  }
  return STRATA_OK;
}

int par_data_next(par_data_t *d, int rank, int ranks, int batch, int32_t *inputs,
                  int32_t *targets) {
  if (!d) return STRATA_EINVAL;
  if (ranks < 1 || rank < 0 || rank >= ranks || batch < 1) {
    snprintf(d->err, sizeof d->err, "data next: rank %d of %d, batch %d", rank, ranks, batch);
    return STRATA_EINVAL;
  }
  int rc = par_data_fill(d, PAR_SPLIT_TRAIN, d->position + (uint64_t)rank * (uint64_t)batch, batch,
                         inputs, targets);
  if (rc == STRATA_OK) d->position += (uint64_t)ranks * (uint64_t)batch;
  return rc;
}
