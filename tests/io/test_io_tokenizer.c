/* GPT-2 tokens (strata/par_io.h, par_tokenizer_*): llm.c's tokenizer file
 * and GPT-2's vocab.json + merges.txt, both written here, with expected
 * encodings derived by hand from GPT-2's pattern and merge rule
 * (openai/gpt-2 encoder.py). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <strata/parallel.h>

static char dir[64];

static void setup(void) {
  snprintf(dir, sizeof dir, "/tmp/strata-tok-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
}
static void teardown(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  cr_assert_eq(system(cmd), 0);
}

static const char *path(const char *name) {
  static char b[160];
  snprintf(b, sizeof b, "%s/%s", dir, name);
  return b;
}

/* GPT-2's printable spelling of byte b (encoder.py's bytes_to_unicode). */
static void spell(unsigned b, char *out) {
  unsigned cp, n = 256;
  for (unsigned x = 0; x < 256; x++) {
    int keep = (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF);
    if (x == b) {
      cp = keep ? x : n;
      break;
    }
    if (!keep) n++;
  }
  if (cp < 0x80) out[0] = (char)cp, out[1] = 0;
  else out[0] = (char)(0xC0 | (cp >> 6)), out[1] = (char)(0x80 | (cp & 0x3F)), out[2] = 0;
}

/* vocab.json: the 256 bytes (id = byte), then the merged symbols. */
static const char *merged[] = {"he", "ll", "hell", "hello", "Ġw", "or", "Ġwor", "Ġworl", "Ġworld",
                               "ĠĠ", "Ġo", "Ġok", "Ã©", "<|endoftext|>"};
static const char *merges[] = {"h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "Ġwor l",
                               "Ġworl d", "Ġ Ġ", "Ġ o", "Ġo k", "Ã ©"};
#define NM (sizeof merged / sizeof *merged)
#define NR (sizeof merges / sizeof *merges)

static void write_bpe(void) {
  FILE *f = fopen(path("vocab.json"), "w");
  fprintf(f, "{");
  for (unsigned b = 0; b < 256; b++) {
    char s[4];
    spell(b, s);
    fprintf(f, "%s\"%s%s\": %u", b ? ", " : "", (b == '"' || b == '\\') ? "\\" : "", s, b);
  }
  for (size_t i = 0; i < NM; i++) fprintf(f, ", \"%s\": %zu", merged[i], 256 + i);
  fprintf(f, "}\n");
  fclose(f);
  f = fopen(path("merges.txt"), "w");
  fprintf(f, "#version: 0.2\n");
  for (size_t i = 0; i < NR; i++) fprintf(f, "%s\n", merges[i]);
  fclose(f);
}

static int id_of(const char *sym) {
  for (size_t i = 0; i < NM; i++)
    if (!strcmp(merged[i], sym)) return 256 + (int)i;
  for (unsigned b = 0; b < 256; b++) { /* a single byte, by its spelling */
    char s[4];
    spell(b, s);
    if (!strcmp(s, sym)) return (int)b;
  }
  cr_assert_fail("no id for '%s'", sym);
  return -1;
}

static void expect(par_tokenizer_t *t, const char *text, const int *want, size_t nw) {
  int32_t *ids;
  size_t n;
  char err[256];
  cr_assert_eq(par_tokenizer_encode(t, text, strlen(text), &ids, &n, err, sizeof err), 0, "%s", err);
  cr_assert_eq(n, nw, "'%s': %zu tokens, want %zu", text, n, nw);
  for (size_t i = 0; i < n; i++) cr_expect_eq(ids[i], want[i], "'%s' token %zu: %d, want %d", text, i, ids[i], want[i]);
  char back[256];
  par_tokenizer_decode(t, ids, n, back, sizeof back);
  cr_expect_str_eq(back, text);
  free(ids);
}

Test(tokenizer, gpt2_bpe, .init = setup, .fini = teardown) {
  write_bpe();
  par_tokenizer_t *t;
  char err[256];
  cr_assert_eq(par_tokenizer_open(path("vocab.json"), &t, err, sizeof err), 0, "%s", err);
  cr_assert(par_tokenizer_can_encode(t));
  cr_assert_eq(par_tokenizer_vocab(t), 256 + (int)NM);
  cr_assert_eq(par_tokenizer_eot(t), id_of("<|endoftext|>"));
  /* "hello": h e l l o -> he l l o -> he ll o -> hell o -> hello; " world"
   * is its own piece (` ?\p{L}+`) and merges to Ġworld. */
  expect(t, "hello world", (int[]){id_of("hello"), id_of("Ġworld")}, 2);
  /* "I'm  ok\n\n": I | 'm | " " | " ok" | "\n\n": `\s+(?!\S)` keeps the last
   * space for " ok", so the two spaces never meet (ĠĠ is in the vocabulary,
   * and a wrong split would use it). */
  expect(t, "I'm  ok\n\n", (int[]){'I', '\'', 'm', id_of("Ġ"), id_of("Ġok"), '\n', '\n'}, 7);
  /* trailing spaces: one piece, merged */
  expect(t, "ok  ", (int[]){'o', 'k', id_of("ĠĠ")}, 3);
  /* é is a letter: "café" is one piece, its two bytes spelled Ã© and merged */
  expect(t, "caf\xc3\xa9!", (int[]){'c', 'a', 'f', id_of("Ã©"), '!'}, 5);
  /* numbers and symbols are pieces of their own: " 42" and "!?" */
  expect(t, "x 42!?", (int[]){'x', ' ', '4', '2', '!', '?'}, 6);
  /* any bytes at all come back, invalid UTF-8 included */
  const char raw[] = "\x01\xff\xfe a\tb\r\n\x80";
  int32_t *ids;
  size_t n;
  cr_assert_eq(par_tokenizer_encode(t, raw, sizeof raw - 1, &ids, &n, err, sizeof err), 0, "%s", err);
  char back[64];
  cr_assert_eq(par_tokenizer_decode(t, ids, n, back, sizeof back), sizeof raw - 1);
  cr_assert_eq(memcmp(back, raw, sizeof raw - 1), 0);
  free(ids);
  par_tokenizer_destroy(t);
}

Test(tokenizer, llmc_file, .init = setup, .fini = teardown) {
  FILE *f = fopen(path("gpt2_tokenizer.bin"), "wb");
  uint32_t h[256] = {20240328, 2, 259, 258};
  fwrite(h, sizeof h, 1, f);
  for (int b = 0; b < 256; b++) {
    unsigned char l = 1, c = (unsigned char)b;
    fwrite(&l, 1, 1, f), fwrite(&c, 1, 1, f);
  }
  const char *extra[] = {" world", "hello", "<|endoftext|>"};
  for (int i = 0; i < 3; i++) {
    unsigned char l = (unsigned char)strlen(extra[i]);
    fwrite(&l, 1, 1, f), fwrite(extra[i], 1, l, f);
  }
  fclose(f);
  par_tokenizer_t *t;
  char err[256];
  cr_assert_eq(par_tokenizer_open(path("gpt2_tokenizer.bin"), &t, err, sizeof err), 0, "%s", err);
  cr_assert_eq(par_tokenizer_vocab(t), 259);
  cr_assert_eq(par_tokenizer_eot(t), 258);
  cr_assert_not(par_tokenizer_can_encode(t));
  int32_t ids[] = {257, 256, '!', 9999};
  char out[64];
  cr_assert_eq(par_tokenizer_decode(t, ids, 4, out, sizeof out), 12);
  cr_assert_str_eq(out, "hello world!");
  int32_t *e;
  size_t n;
  cr_assert_eq(par_tokenizer_encode(t, "hi", 2, &e, &n, err, sizeof err), STRATA_EUNSUPPORTED);
  cr_assert(strstr(err, "merges.txt"));
  par_tokenizer_destroy(t);
  /* a truncated file is refused by name */
  f = fopen(path("gpt2_tokenizer.bin"), "r+b");
  cr_assert_eq(ftruncate(fileno(f), 1024 + 100), 0);
  fclose(f);
  cr_assert_eq(par_tokenizer_open(path("gpt2_tokenizer.bin"), &t, err, sizeof err), STRATA_ECORRUPT);
  cr_assert(strstr(err, "ends at token 50 of 259"), "%s", err);
}
