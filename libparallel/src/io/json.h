/* A small JSON reader (internal), enough for the files strata reads: the
 * header of a safetensors file, a Hugging Face config.json, a GPT-2
 * vocab.json. The whole document is parsed into one allocation of nodes;
 * strings are unescaped to UTF-8 (\uXXXX, surrogate pairs included). */
#ifndef STRATA_PAR_JSON_H
#define STRATA_PAR_JSON_H

#include <stddef.h>

typedef enum { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } json_type_t;

typedef struct json json_t;
struct json {
  json_type_t type;
  double number;       /* JSON_NUMBER, JSON_BOOL (0 or 1) */
  const char *string;  /* JSON_STRING (NUL-terminated, may hold NULs: see len) */
  size_t len;          /* string length in bytes; items of an array or object */
  const char *key;     /* the key of a member of an object */
  size_t key_len;
  json_t *child;       /* first item or member */
  json_t *next;        /* next sibling */
};

typedef struct json_doc json_doc_t;

/* Parses text[0..n). NULL on error, with "line L, column C: what" in err. */
json_doc_t *json_parse(const char *text, size_t n, char *err, size_t errlen);
void json_free(json_doc_t *d);
const json_t *json_root(const json_doc_t *d);
/* The member `key` of an object (NULL when absent or not an object). */
const json_t *json_get(const json_t *obj, const char *key);

#endif
