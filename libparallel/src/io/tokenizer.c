/* GPT-2's byte-level BPE tokens (Radford et al. 2019; openai/gpt-2
 * encoder.py, which this follows step by step):
 *
 *   decode  the bytes of each token, concatenated: from llm.c's
 *           gpt2_tokenizer.bin (uint32 header 20240328, version, count, end
 *           of text; then a length byte and the bytes of each token) or
 *           from vocab.json, whose keys spell bytes in GPT-2's printable
 *           byte-to-unicode alphabet;
 *   encode  (vocab.json + merges.txt) the text split by GPT-2's pattern
 *             's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *           each piece spelled in the byte alphabet, its symbols merged by
 *           the lowest-ranked pair of merges.txt until none applies, each
 *           symbol looked up in vocab.json. Letters and numbers are told by
 *           the C library's Unicode classes (glibc's C.UTF-8 locale). */
#define _GNU_SOURCE /* newlocale, iswalpha_l */
#include <ctype.h>
#include <errno.h>
#include <locale.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wctype.h>

#include <strata/parallel.h>

#include "json.h"

#define LLMC_TOKENIZER_MAGIC 20240328

/* A string -> int map, open addressing. */
typedef struct {
  char **keys;
  int *vals;
  size_t cap, n;
} smap_t;

static uint64_t hash(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ULL; /* FNV-1a */
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
  return h;
}

static int smap_put(smap_t *m, const char *k, size_t kl, int v) {
  if (2 * (m->n + 1) > m->cap) {
    smap_t g = {NULL, NULL, m->cap ? 2 * m->cap : 1024, 0};
    if (!(g.keys = calloc(g.cap, sizeof *g.keys)) || !(g.vals = malloc(g.cap * sizeof *g.vals))) {
      free(g.keys);
      return -1;
    }
    for (size_t i = 0; i < m->cap; i++)
      if (m->keys[i]) {
        size_t j = hash(m->keys[i], strlen(m->keys[i])) & (g.cap - 1);
        while (g.keys[j]) j = (j + 1) & (g.cap - 1);
        g.keys[j] = m->keys[i], g.vals[j] = m->vals[i], g.n++;
      }
    free(m->keys), free(m->vals);
    *m = g;
  }
  size_t j = hash(k, kl) & (m->cap - 1);
  while (m->keys[j]) {
    if (strlen(m->keys[j]) == kl && !memcmp(m->keys[j], k, kl)) return m->vals[j] = v, 0;
    j = (j + 1) & (m->cap - 1);
  }
  if (!(m->keys[j] = malloc(kl + 1))) return -1;
  memcpy(m->keys[j], k, kl);
  m->keys[j][kl] = 0;
  m->vals[j] = v;
  m->n++;
  return 0;
}

static int smap_get(const smap_t *m, const char *k, size_t kl) {
  if (!m->cap) return -1;
  size_t j = hash(k, kl) & (m->cap - 1);
  while (m->keys[j]) {
    if (strlen(m->keys[j]) == kl && !memcmp(m->keys[j], k, kl)) return m->vals[j];
    j = (j + 1) & (m->cap - 1);
  }
  return -1;
}

static void smap_free(smap_t *m) {
  for (size_t i = 0; i < m->cap; i++) free(m->keys[i]);
  free(m->keys), free(m->vals);
}

struct par_tokenizer {
  int vocab, eot;
  char **tok; /* the bytes of each token */
  size_t *tlen;
  int can_encode;
  smap_t ids;    /* vocab.json: byte-alphabet spelling -> id */
  smap_t ranks;  /* merges.txt: "a b" -> rank */
  char bytes_u[256][4]; /* GPT-2's byte -> printable character (UTF-8) */
  int byte_of[512];     /* its inverse, by code point */
  locale_t utf8;
};

static int fail(char *err, size_t n, int code, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t n, int code, const char *fmt, ...) {
  if (err && n) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
  }
  return code;
}

void par_tokenizer_destroy(par_tokenizer_t *t) {
  if (!t) return;
  for (int i = 0; t->tok && i < t->vocab; i++) free(t->tok[i]);
  free(t->tok), free(t->tlen);
  smap_free(&t->ids), smap_free(&t->ranks);
  if (t->utf8) freelocale(t->utf8);
  free(t);
}

static size_t put_utf8(char *o, uint32_t cp) {
  if (cp < 0x80) return o[0] = (char)cp, 1;
  if (cp < 0x800) return o[0] = (char)(0xC0 | (cp >> 6)), o[1] = (char)(0x80 | (cp & 0x3F)), 2;
  o[0] = (char)(0xE0 | (cp >> 12)), o[1] = (char)(0x80 | ((cp >> 6) & 0x3F)), o[2] = (char)(0x80 | (cp & 0x3F));
  return 3;
}

/* One code point of UTF-8 at s (n bytes left); *len its bytes. A bad
 * sequence is taken as its first byte alone. */
static uint32_t get_utf8(const unsigned char *s, size_t n, size_t *len) {
  uint32_t c = s[0];
  int k = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : -1;
  if (k < 0 || (size_t)k >= n) return *len = 1, c;
  c &= k == 0 ? 0x7F : k == 1 ? 0x1F : k == 2 ? 0x0F : 0x07;
  for (int i = 1; i <= k; i++) {
    if ((s[i] & 0xC0) != 0x80) return *len = 1, s[0];
    c = (c << 6) | (s[i] & 0x3F);
  }
  return *len = (size_t)k + 1, c;
}

/* encoder.py's bytes_to_unicode: printable bytes stand for themselves, the
 * others for 256, 257, ... in byte order. */
static void byte_alphabet(par_tokenizer_t *t) {
  int next = 256;
  for (int b = 0; b < 512; b++) t->byte_of[b] = -1;
  for (int b = 0; b < 256; b++) {
    int keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    uint32_t cp = keep ? (uint32_t)b : (uint32_t)next++;
    size_t l = put_utf8(t->bytes_u[b], cp);
    t->bytes_u[b][l] = 0;
    t->byte_of[cp] = b;
  }
}

static char *read_all(const char *path, size_t *n, char *err, size_t en) {
  FILE *f = fopen(path, "rb");
  if (!f) return fail(err, en, 0, "tokenizer '%s': %s", path, strerror(errno)), NULL;
  fseek(f, 0, SEEK_END);
  long sz = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = sz >= 0 ? malloc((size_t)sz + 1) : NULL;
  if (!b || fread(b, 1, (size_t)sz, f) != (size_t)sz) {
    fclose(f);
    free(b);
    return fail(err, en, 0, "tokenizer '%s': cannot read", path), NULL;
  }
  fclose(f);
  b[sz] = 0;
  *n = (size_t)sz;
  return b;
}

static int alloc_tokens(par_tokenizer_t *t, int n) {
  t->vocab = n;
  t->tok = calloc((size_t)n, sizeof *t->tok);
  t->tlen = calloc((size_t)n, sizeof *t->tlen);
  return t->tok && t->tlen ? 0 : -1;
}

static int open_llmc(par_tokenizer_t *t, const char *path, const char *b, size_t n, char *err, size_t en) {
  uint32_t h[256];
  if (n < sizeof h) return fail(err, en, STRATA_ECORRUPT, "tokenizer '%s': shorter than its header", path);
  memcpy(h, b, sizeof h);
  if (h[1] != 1 && h[1] != 2)
    return fail(err, en, STRATA_ECORRUPT, "tokenizer '%s': version %u (strata reads 1 and 2)", path, h[1]);
  if (h[2] < 1 || h[2] > (1u << 24)) return fail(err, en, STRATA_ECORRUPT, "tokenizer '%s': %u tokens", path, h[2]);
  if (alloc_tokens(t, (int)h[2])) return fail(err, en, STRATA_ENOMEM, "out of memory");
  t->eot = h[1] == 2 ? (int)h[3] : 50256; /* version 1: GPT-2's <|endoftext|> */
  size_t p = sizeof h;
  for (int i = 0; i < t->vocab; i++) {
    if (p >= n) return fail(err, en, STRATA_ECORRUPT, "tokenizer '%s': ends at token %d of %d", path, i, t->vocab);
    size_t l = (unsigned char)b[p++];
    if (l == 0 || p + l > n)
      return fail(err, en, STRATA_ECORRUPT, "tokenizer '%s': token %d has length %zu", path, i, l);
    if (!(t->tok[i] = malloc(l))) return fail(err, en, STRATA_ENOMEM, "out of memory");
    memcpy(t->tok[i], b + p, l);
    t->tlen[i] = l;
    p += l;
  }
  return STRATA_OK;
}

/* vocab.json, then merges.txt beside it (encoding needs both). */
static int open_bpe(par_tokenizer_t *t, const char *path, const char *b, size_t n, char *err, size_t en) {
  char why[300];
  json_doc_t *d = json_parse(b, n, why, sizeof why);
  if (!d) return fail(err, en, STRATA_ECORRUPT, "tokenizer '%s': %s", path, why);
  const json_t *root = json_root(d);
  int rc = STRATA_OK, maxid = -1;
  if (root->type != JSON_OBJECT) rc = fail(err, en, STRATA_ECORRUPT, "tokenizer '%s': not a JSON object", path);
  for (const json_t *c = rc ? NULL : root->child; c; c = c->next) {
    if (c->type != JSON_NUMBER || c->number < 0 || c->number >= (1 << 24)) {
      rc = fail(err, en, STRATA_ECORRUPT, "tokenizer '%s': token '%s' has no id", path, c->key);
      break;
    }
    if ((int)c->number > maxid) maxid = (int)c->number;
    if (smap_put(&t->ids, c->key, c->key_len, (int)c->number)) rc = fail(err, en, STRATA_ENOMEM, "out of memory");
  }
  if (rc == STRATA_OK && alloc_tokens(t, maxid + 1)) rc = fail(err, en, STRATA_ENOMEM, "out of memory");
  for (const json_t *c = rc ? NULL : root->child; c; c = c->next) { /* spell each in bytes */
    int id = (int)c->number;
    char *bytes = malloc(c->key_len + 1);
    size_t k = 0;
    if (!bytes) {
      rc = fail(err, en, STRATA_ENOMEM, "out of memory");
      break;
    }
    for (size_t i = 0, l; i < c->key_len; i += l) {
      uint32_t cp = get_utf8((const unsigned char *)c->key + i, c->key_len - i, &l);
      int byte = cp < 512 ? t->byte_of[cp] : -1;
      if (byte < 0) { /* special tokens (<|endoftext|>) are spelled as they are */
        memcpy(bytes, c->key, c->key_len);
        k = c->key_len;
        break;
      }
      bytes[k++] = (char)byte;
    }
    free(t->tok[id]);
    t->tok[id] = bytes, t->tlen[id] = k;
  }
  int e = smap_get(&t->ids, "<|endoftext|>", 13);
  t->eot = e;
  json_free(d);
  if (rc) return rc;
  /* merges.txt */
  char mpath[4200];
  const char *slash = strrchr(path, '/');
  snprintf(mpath, sizeof mpath, "%.*smerges.txt", slash ? (int)(slash - path + 1) : 0, path);
  size_t mn;
  char *mb = read_all(mpath, &mn, why, sizeof why);
  if (!mb) return STRATA_OK; /* decode only */
  int rank = 0;
  for (char *line = mb, *next; line && *line; line = next) {
    next = strchr(line, '\n');
    if (next) *next++ = 0;
    size_t l = strlen(line);
    if (l && line[l - 1] == '\r') line[--l] = 0;
    if (!l || !strncmp(line, "#version", 8)) continue;
    if (!strchr(line, ' ')) {
      free(mb);
      return fail(err, en, STRATA_ECORRUPT, "merges '%s': line '%s' is not a pair", mpath, line);
    }
    if (smap_put(&t->ranks, line, l, rank++)) {
      free(mb);
      return fail(err, en, STRATA_ENOMEM, "out of memory");
    }
  }
  free(mb);
  t->can_encode = 1;
  return STRATA_OK;
}

int par_tokenizer_open(const char *path, par_tokenizer_t **out, char *err, size_t en) {
  if (!path || !out) return fail(err, en, STRATA_EINVAL, "par_tokenizer_open: NULL argument");
  *out = NULL;
  par_tokenizer_t *t = calloc(1, sizeof *t);
  if (!t) return fail(err, en, STRATA_ENOMEM, "out of memory");
  byte_alphabet(t);
  t->eot = -1;
  t->utf8 = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
  size_t n = 0;
  char *b = read_all(path, &n, err, en);
  int rc;
  if (!b) rc = STRATA_EIO;
  else if (n >= 4 && *(const uint32_t *)b == LLMC_TOKENIZER_MAGIC) rc = open_llmc(t, path, b, n, err, en);
  else if (n > 0 && b[strspn(b, " \t\r\n")] == '{') rc = open_bpe(t, path, b, n, err, en);
  else
    rc = fail(err, en, STRATA_ECORRUPT,
              "tokenizer '%s' is neither llm.c's tokenizer (magic %d) nor a GPT-2 vocab.json", path,
              LLMC_TOKENIZER_MAGIC);
  free(b);
  if (rc) {
    par_tokenizer_destroy(t);
    return rc;
  }
  *out = t;
  return STRATA_OK;
}

int par_tokenizer_vocab(const par_tokenizer_t *t) { return t ? t->vocab : 0; }
int par_tokenizer_eot(const par_tokenizer_t *t) { return t ? t->eot : -1; }
int par_tokenizer_can_encode(const par_tokenizer_t *t) { return t && t->can_encode; }

const char *par_tokenizer_token(const par_tokenizer_t *t, int id, size_t *len) {
  if (!t || id < 0 || id >= t->vocab || !t->tok[id]) return NULL;
  if (len) *len = t->tlen[id];
  return t->tok[id];
}

size_t par_tokenizer_decode(const par_tokenizer_t *t, const int32_t *ids, size_t n, char *buf, size_t cap) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    size_t l;
    const char *s = par_tokenizer_token(t, ids[i], &l);
    if (!s) continue;
    if (buf && k + l < cap) memcpy(buf + k, s, l);
    k += l;
  }
  if (buf && cap) buf[k < cap ? k : cap - 1] = 0;
  return k;
}

/* ---- encoding ---- */

enum { C_SPACE, C_LETTER, C_NUMBER, C_OTHER };

static int cls(const par_tokenizer_t *t, uint32_t cp) {
  if (cp < 0x80) return isspace((int)cp) ? C_SPACE : isalpha((int)cp) ? C_LETTER : isdigit((int)cp) ? C_NUMBER : C_OTHER;
  if (!t->utf8) return C_LETTER;
  wint_t w = (wint_t)cp;
  if (iswspace_l(w, t->utf8)) return C_SPACE;
  if (iswalpha_l(w, t->utf8)) return C_LETTER;
  if (iswdigit_l(w, t->utf8)) return C_NUMBER;
  return C_OTHER;
}

/* The length of GPT-2's pre-token at s[0..n). */
static size_t pretoken(const par_tokenizer_t *t, const unsigned char *s, size_t n) {
  static const char *const contr[] = {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d"};
  for (int i = 0; i < 7; i++) {
    size_t l = strlen(contr[i]);
    if (n >= l && !memcmp(s, contr[i], l)) return l;
  }
  size_t l0, l;
  uint32_t c0 = get_utf8(s, n, &l0);
  size_t start = c0 == ' ' ? l0 : 0; /* the optional leading space */
  if (start < n) {
    uint32_t c = get_utf8(s + start, n - start, &l);
    int k = cls(t, c);
    if (k != C_SPACE) { /* ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+` */
      size_t p = start + l;
      while (p < n && cls(t, get_utf8(s + p, n - p, &l)) == k) p += l;
      return p;
    }
  }
  /* whitespace: `\s+(?!\S)` leaves the last one to the next piece, `\s+` */
  size_t p = 0, last = 0;
  while (p < n && cls(t, get_utf8(s + p, n - p, &l)) == C_SPACE) last = p, p += l;
  if (p == n || last == 0) return p;
  return last;
}

typedef struct {
  char *s;
  size_t n;
} sym_t;

/* BPE over the symbols of one pre-token, appending ids. */
static int bpe(par_tokenizer_t *t, const unsigned char *piece, size_t n, int32_t **ids, size_t *nids,
               size_t *cap) {
  sym_t *sy = malloc(n * sizeof *sy);
  char *buf = malloc(n * 8 + 1), *pair = malloc(n * 8 + 2);
  int rc = 0;
  if (!sy || !buf || !pair) {
    rc = -1;
    goto done;
  }
  size_t ns = 0, bl = 0;
  for (size_t i = 0; i < n; i++) { /* each byte, spelled in the alphabet */
    size_t l = strlen(t->bytes_u[piece[i]]);
    memcpy(buf + bl, t->bytes_u[piece[i]], l);
    sy[ns].s = buf + bl, sy[ns].n = l, ns++;
    bl += l;
  }
  for (;;) { /* merge the lowest-ranked pair, everywhere, until none applies */
    int best = -1;
    size_t bi = 0;
    for (size_t i = 0; i + 1 < ns; i++) {
      memcpy(pair, sy[i].s, sy[i].n);
      pair[sy[i].n] = ' ';
      memcpy(pair + sy[i].n + 1, sy[i + 1].s, sy[i + 1].n);
      int r = smap_get(&t->ranks, pair, sy[i].n + 1 + sy[i + 1].n);
      if (r >= 0 && (best < 0 || r < best)) best = r, bi = i;
    }
    if (best < 0) break;
    const char *a = sy[bi].s, *b = sy[bi + 1].s;
    size_t al = sy[bi].n, bl2 = sy[bi + 1].n, k = 0;
    for (size_t i = 0; i < ns; i++) {
      if (i + 1 < ns && sy[i].n == al && sy[i + 1].n == bl2 && !memcmp(sy[i].s, a, al) &&
          !memcmp(sy[i + 1].s, b, bl2)) {
        sy[k].s = sy[i].s, sy[k].n = al + bl2; /* adjacent in buf: the merged spelling */
        k++, i++;
      } else {
        sy[k++] = sy[i];
      }
    }
    ns = k;
  }
  for (size_t i = 0; i < ns; i++) {
    int id = smap_get(&t->ids, sy[i].s, sy[i].n);
    if (id < 0) {
      rc = -2;
      goto done;
    }
    if (*nids == *cap) {
      size_t c = *cap ? 2 * *cap : 256;
      int32_t *g = realloc(*ids, c * sizeof *g);
      if (!g) {
        rc = -1;
        goto done;
      }
      *ids = g, *cap = c;
    }
    (*ids)[(*nids)++] = id;
  }
done:
  free(sy), free(buf), free(pair);
  return rc;
}

int par_tokenizer_encode(par_tokenizer_t *t, const char *text, size_t len, int32_t **ids, size_t *n,
                         char *err, size_t en) {
  if (!t || !text || !ids || !n) return fail(err, en, STRATA_EINVAL, "par_tokenizer_encode: NULL argument");
  *ids = NULL, *n = 0;
  if (!t->can_encode)
    return fail(err, en, STRATA_EUNSUPPORTED,
                "this tokenizer decodes only: encoding needs GPT-2's vocab.json with merges.txt beside it");
  size_t cap = 0;
  const unsigned char *s = (const unsigned char *)text;
  for (size_t p = 0; p < len;) {
    size_t l = pretoken(t, s + p, len - p);
    int r = bpe(t, s + p, l, ids, n, &cap);
    if (r) {
      free(*ids);
      *ids = NULL, *n = 0;
      return r == -1 ? fail(err, en, STRATA_ENOMEM, "out of memory")
                     : fail(err, en, STRATA_ECORRUPT, "vocab.json lacks a symbol that merges.txt builds, in '%.*s'",
                            (int)l, (const char *)s + p);
    }
    p += l;
  }
  return STRATA_OK;
}
