/* A small JSON reader: recursive descent over RFC 8259, nodes and
 * unescaped strings in two growing arrays owned by the document. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

#define MAX_DEPTH 64

struct json_doc {
  json_t *nodes;
  size_t nnodes, cap;
  char *strings; /* all strings, NUL-separated */
  size_t slen, scap;
  json_t *root;
};

typedef struct {
  const char *s, *end, *start;
  json_doc_t *d;
  char *err;
  size_t errlen;
  int failed;
} parser_t;

static int fail(parser_t *p, const char *fmt, ...) {
  if (p->failed) return -1;
  p->failed = 1;
  int line = 1, col = 1;
  for (const char *c = p->start; c < p->s && c < p->end; c++) {
    if (*c == '\n') line++, col = 1;
    else col++;
  }
  char what[200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  if (p->err && p->errlen) snprintf(p->err, p->errlen, "line %d, column %d: %s", line, col, what);
  return -1;
}

static void skip_ws(parser_t *p) {
  while (p->s < p->end && (*p->s == ' ' || *p->s == '\t' || *p->s == '\n' || *p->s == '\r')) p->s++;
}

/* Nodes are referenced by index while parsing (the array may move). */
static long new_node(parser_t *p, json_type_t t) {
  json_doc_t *d = p->d;
  if (d->nnodes == d->cap) {
    size_t cap = d->cap ? 2 * d->cap : 256;
    json_t *n = realloc(d->nodes, cap * sizeof *n);
    if (!n) return fail(p, "out of memory");
    d->nodes = n, d->cap = cap;
  }
  json_t *n = &d->nodes[d->nnodes];
  memset(n, 0, sizeof *n);
  n->type = t;
  return (long)d->nnodes++;
}

static int put_byte(parser_t *p, char c) {
  json_doc_t *d = p->d;
  if (d->slen == d->scap) {
    size_t cap = d->scap ? 2 * d->scap : 4096;
    char *s = realloc(d->strings, cap);
    if (!s) return fail(p, "out of memory");
    d->strings = s, d->scap = cap;
  }
  d->strings[d->slen++] = c;
  return 0;
}

static int put_utf8(parser_t *p, uint32_t cp) {
  if (cp < 0x80) return put_byte(p, (char)cp);
  if (cp < 0x800) return put_byte(p, (char)(0xC0 | (cp >> 6))) | put_byte(p, (char)(0x80 | (cp & 0x3F)));
  if (cp < 0x10000)
    return put_byte(p, (char)(0xE0 | (cp >> 12))) | put_byte(p, (char)(0x80 | ((cp >> 6) & 0x3F))) |
           put_byte(p, (char)(0x80 | (cp & 0x3F)));
  return put_byte(p, (char)(0xF0 | (cp >> 18))) | put_byte(p, (char)(0x80 | ((cp >> 12) & 0x3F))) |
         put_byte(p, (char)(0x80 | ((cp >> 6) & 0x3F))) | put_byte(p, (char)(0x80 | (cp & 0x3F)));
}

static int hex4(parser_t *p, uint32_t *out) {
  uint32_t v = 0;
  if (p->end - p->s < 4) return fail(p, "truncated \\u escape");
  for (int i = 0; i < 4; i++) {
    char c = *p->s++;
    v <<= 4;
    if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
    else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
    else return fail(p, "bad \\u escape");
  }
  *out = v;
  return 0;
}

/* Parses a string at p->s (on its opening quote); *off and *len locate it
 * in the string store. */
static int parse_string(parser_t *p, size_t *off, size_t *len) {
  p->s++; /* the quote */
  *off = p->d->slen;
  for (;;) {
    if (p->s >= p->end) return fail(p, "unterminated string");
    unsigned char c = (unsigned char)*p->s++;
    if (c == '"') break;
    if (c < 0x20) return fail(p, "control character in a string");
    if (c != '\\') {
      if (put_byte(p, (char)c)) return -1;
      continue;
    }
    if (p->s >= p->end) return fail(p, "unterminated escape");
    char e = *p->s++;
    uint32_t cp;
    switch (e) {
    case '"': case '\\': case '/': if (put_byte(p, e)) return -1; break;
    case 'b': if (put_byte(p, '\b')) return -1; break;
    case 'f': if (put_byte(p, '\f')) return -1; break;
    case 'n': if (put_byte(p, '\n')) return -1; break;
    case 'r': if (put_byte(p, '\r')) return -1; break;
    case 't': if (put_byte(p, '\t')) return -1; break;
    case 'u':
      if (hex4(p, &cp)) return -1;
      if (cp >= 0xD800 && cp < 0xDC00) { /* a surrogate pair */
        uint32_t lo;
        if (p->end - p->s < 6 || p->s[0] != '\\' || p->s[1] != 'u') return fail(p, "lone surrogate");
        p->s += 2;
        if (hex4(p, &lo)) return -1;
        if (lo < 0xDC00 || lo >= 0xE000) return fail(p, "bad surrogate pair");
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
      }
      if (put_utf8(p, cp)) return -1;
      break;
    default: return fail(p, "bad escape '\\%c'", e);
    }
  }
  *len = p->d->slen - *off;
  return put_byte(p, 0);
}

static long parse_value(parser_t *p, int depth);

/* Children are linked by index first (see finish), as the arrays grow. */
static long parse_container(parser_t *p, int depth, int object) {
  long self = new_node(p, object ? JSON_OBJECT : JSON_ARRAY);
  if (self < 0) return -1;
  p->s++;
  skip_ws(p);
  long prev = -1;
  size_t count = 0;
  if (p->s < p->end && *p->s == (object ? '}' : ']')) {
    p->s++;
    return self;
  }
  for (;;) {
    size_t koff = 0, klen = 0;
    skip_ws(p);
    if (object) {
      if (p->s >= p->end || *p->s != '"') return fail(p, "expected a key");
      if (parse_string(p, &koff, &klen)) return -1;
      skip_ws(p);
      if (p->s >= p->end || *p->s != ':') return fail(p, "expected ':'");
      p->s++;
    }
    long item = parse_value(p, depth + 1);
    if (item < 0) return -1;
    json_t *n = &p->d->nodes[item];
    if (object) n->key = (const char *)(uintptr_t)(koff + 1), n->key_len = klen; /* offset + 1 */
    if (prev < 0) p->d->nodes[self].child = (json_t *)(uintptr_t)(item + 1);
    else p->d->nodes[prev].next = (json_t *)(uintptr_t)(item + 1);
    prev = item;
    count++;
    skip_ws(p);
    if (p->s < p->end && *p->s == ',') {
      p->s++;
      continue;
    }
    if (p->s < p->end && *p->s == (object ? '}' : ']')) {
      p->s++;
      break;
    }
    return fail(p, "expected ',' or '%c'", object ? '}' : ']');
  }
  p->d->nodes[self].len = count;
  return self;
}

static long parse_value(parser_t *p, int depth) {
  if (depth > MAX_DEPTH) return fail(p, "nested deeper than %d", MAX_DEPTH);
  skip_ws(p);
  if (p->s >= p->end) return fail(p, "unexpected end");
  char c = *p->s;
  if (c == '{' || c == '[') return parse_container(p, depth, c == '{');
  if (c == '"') {
    long n = new_node(p, JSON_STRING);
    size_t off, len;
    if (n < 0 || parse_string(p, &off, &len)) return -1;
    p->d->nodes[n].string = (const char *)(uintptr_t)(off + 1), p->d->nodes[n].len = len;
    return n;
  }
  static const struct {
    const char *word;
    json_type_t t;
    double v;
  } words[] = {{"true", JSON_BOOL, 1}, {"false", JSON_BOOL, 0}, {"null", JSON_NULL, 0}};
  for (size_t i = 0; i < 3; i++) {
    size_t l = strlen(words[i].word);
    if ((size_t)(p->end - p->s) >= l && !memcmp(p->s, words[i].word, l)) {
      p->s += l;
      long n = new_node(p, words[i].t);
      if (n >= 0) p->d->nodes[n].number = words[i].v;
      return n;
    }
  }
  if (c == '-' || (c >= '0' && c <= '9')) {
    char buf[64];
    size_t k = 0;
    while (p->s < p->end && k < sizeof buf - 1 && strchr("+-0123456789.eE", *p->s)) buf[k++] = *p->s++;
    buf[k] = 0;
    char *e;
    double v = strtod(buf, &e);
    if (*e) return fail(p, "bad number '%s'", buf);
    long n = new_node(p, JSON_NUMBER);
    if (n >= 0) p->d->nodes[n].number = v;
    return n;
  }
  return fail(p, "unexpected character '%c'", c);
}

/* Turns the index + 1 links and string offsets + 1 into pointers. */
static void finish(json_doc_t *d) {
  for (size_t i = 0; i < d->nnodes; i++) {
    json_t *n = &d->nodes[i];
    if (n->child) n->child = &d->nodes[(uintptr_t)n->child - 1];
    if (n->next) n->next = &d->nodes[(uintptr_t)n->next - 1];
    if (n->key) n->key = d->strings + ((uintptr_t)n->key - 1);
    if (n->string) n->string = d->strings + ((uintptr_t)n->string - 1);
  }
  d->root = &d->nodes[0];
}

json_doc_t *json_parse(const char *text, size_t n, char *err, size_t errlen) {
  json_doc_t *d = calloc(1, sizeof *d);
  parser_t p = {text, text + n, text, d, err, errlen, 0};
  if (!d) return NULL;
  long root = parse_value(&p, 0);
  skip_ws(&p);
  if (root >= 0 && p.s < p.end) fail(&p, "trailing characters");
  if (p.failed || root != 0) {
    json_free(d);
    return NULL;
  }
  finish(d);
  return d;
}

void json_free(json_doc_t *d) {
  if (!d) return;
  free(d->nodes);
  free(d->strings);
  free(d);
}

const json_t *json_root(const json_doc_t *d) { return d ? d->root : NULL; }

const json_t *json_get(const json_t *obj, const char *key) {
  if (!obj || obj->type != JSON_OBJECT) return NULL;
  size_t kl = strlen(key);
  for (const json_t *c = obj->child; c; c = c->next)
    if (c->key_len == kl && !memcmp(c->key, key, kl)) return c;
  return NULL;
}
