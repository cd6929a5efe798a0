/* GPT-2 weights in and out (strata/par_io.h, par_model_*), one rank:
 *  1. GPT-2 124M: a model with random weights is written in llm.c's layout
 *     by this test itself (its own writer, kind by kind, padded vocabulary
 *     of zeros), read back by strata's reader into a second model: every
 *     parameter and the logits of a forward are the same bits; strata's
 *     writer then gives the same bytes as the test's file, in fp32 and bf16.
 *  2. safetensors written by this test (its own JSON header, Conv1D
 *     weights stored (in, out), the "transformer." prefix, heads from a
 *     config.json beside it) read exactly; F16 and BF16 widened exactly;
 *     strata's export read and written again gives the same bytes.
 *  3. A strata checkpoint of weights round-trips; the model each file holds
 *     is probed from the file alone.
 *  4. Truncated files, bad magic and version, another model's shapes are
 *     refused with a message naming the file and the numbers.
 * Exits non-zero on failure. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <strata/half.h>
#include <strata/parallel.h>

static int fails;
#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "model_files: line %d: ", __LINE__);                                         \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
      fails++;                                                                                     \
    }                                                                                              \
  } while (0)

static char dir[] = "/tmp/strata-model-files-XXXXXX";

static const char *at(const char *name) {
  static char buf[8][600];
  static int k;
  k = (k + 1) % 8;
  snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
  return buf[k];
}

static par_gpt_t *model(const par_gpt_config_t *c, uint64_t seed) {
  par_gpt_t *m = NULL;
  if (par_gpt_create(&m, c, seed)) {
    fprintf(stderr, "model_files: %s\n", par_gpt_create_error());
    exit(1);
  }
  return m;
}

static const float *view(par_gpt_t *m, const char *name) {
  return par_gpt_params(m, NULL) + par_gpt_find_view(m, name)->offset;
}

/* Gives the layernorm weights and biases random values too (they start at
 * 1 and 0), so a misplaced one cannot hide. */
static void perturb(par_gpt_t *m) {
  float *p = par_gpt_params(m, NULL);
  for (int i = 0; i < par_gpt_num_views(m); i++) {
    const par_gpt_view_t *v = par_gpt_view(m, i);
    if (v->decay) continue;
    for (size_t j = 0; j < v->numel; j++) p[v->offset + j] += 0.001f * (float)((j * 7919 + (size_t)i * 31) % 97) - 0.048f;
  }
}

static int same_bits(par_gpt_t *a, par_gpt_t *b) {
  size_t n, nb;
  const float *pa = par_gpt_params(a, &n), *pb = par_gpt_params(b, &nb);
  return n == nb && !memcmp(pa, pb, n * sizeof *pa);
}

static int same_file(const char *x, const char *y) {
  FILE *a = fopen(x, "rb"), *b = fopen(y, "rb");
  int same = a && b;
  char ba[1 << 16], bb[1 << 16];
  while (same) {
    size_t na = fread(ba, 1, sizeof ba, a), nb = fread(bb, 1, sizeof bb, b);
    if (na != nb || memcmp(ba, bb, na)) same = 0;
    if (na == 0) break;
  }
  if (a) fclose(a);
  if (b) fclose(b);
  return same;
}

/* ---- the test's own llm.c writer ---- */

static void put(FILE *f, const float *x, size_t n, int bf16) {
  for (size_t i = 0; i < n; i++) {
    if (bf16) {
      uint16_t h = strata_f32_to_bf16(x[i]);
      fwrite(&h, 2, 1, f);
    } else {
      fwrite(&x[i], 4, 1, f);
    }
  }
}

static void write_llmc(const char *path, par_gpt_t *m, int bf16, int Vp) {
  const par_gpt_config_t *c = par_gpt_config(m);
  int32_t hd[256] = {20240326, bf16 ? 5 : 3, c->seq, c->vocab, c->layers, c->heads, c->hidden, Vp};
  FILE *f = fopen(path, "wb");
  fwrite(hd, sizeof hd, 1, f);
  put(f, view(m, "wte"), (size_t)c->vocab * c->hidden, bf16);
  float zero = 0;
  for (size_t i = 0; i < (size_t)(Vp - c->vocab) * c->hidden; i++) put(f, &zero, 1, bf16);
  put(f, view(m, "wpe"), (size_t)c->seq * c->hidden, bf16);
  static const char *kinds[] = {"ln_1.w", "ln_1.b", "attn.qkv.w", "attn.qkv.b", "attn.proj.w", "attn.proj.b",
                                "ln_2.w", "ln_2.b", "mlp.fc.w", "mlp.fc.b", "mlp.proj.w", "mlp.proj.b"};
  for (int k = 0; k < 12; k++)
    for (int l = 0; l < c->layers; l++) {
      char name[64];
      snprintf(name, sizeof name, "h.%d.%s", l, kinds[k]);
      const par_gpt_view_t *v = par_gpt_find_view(m, name);
      put(f, par_gpt_params(m, NULL) + v->offset, v->numel, bf16);
    }
  put(f, view(m, "ln_f.w"), (size_t)c->hidden, bf16);
  put(f, view(m, "ln_f.b"), (size_t)c->hidden, bf16);
  fclose(f);
}

static void gpt2_124m(void) {
  par_gpt_config_t c = {.layers = 12, .hidden = 768, .heads = 12, .seq = 1024, .vocab = 50257};
  char err[512];
  par_gpt_t *a = model(&c, 7), *b = model(&c, 8);
  perturb(a);
  write_llmc(at("gpt2_124M.bin"), a, 0, 50304);
  par_model_format_t fmt;
  par_gpt_config_t pc;
  int rc = par_model_probe(at("gpt2_124M.bin"), &fmt, &pc, err, sizeof err);
  CHECK(rc == 0 && fmt == PAR_MODEL_LLMC && pc.layers == 12 && pc.hidden == 768 && pc.heads == 12 &&
            pc.seq == 1024 && pc.vocab == 50257,
        "probe 124M: rc %d fmt %d: %s", rc, (int)fmt, err);
  rc = par_model_read(at("gpt2_124M.bin"), b, err, sizeof err);
  CHECK(rc == 0 && same_bits(a, b), "124M fp32: rc %d, parameters differ: %s", rc, err);
  /* the same logits, bit for bit */
  int32_t tok[16];
  for (int i = 0; i < 16; i++) tok[i] = (i * 3163 + 17) % 50257;
  par_gpt_forward(a, tok, NULL, 1, 16, NULL);
  par_gpt_forward(b, tok, NULL, 1, 16, NULL);
  CHECK(!memcmp(par_gpt_logits(a), par_gpt_logits(b), 16 * 50257 * sizeof(float)), "124M logits differ");
  rc = par_model_write(at("back.bin"), PAR_MODEL_LLMC, 0, b, err, sizeof err);
  CHECK(rc == 0 && same_file(at("gpt2_124M.bin"), at("back.bin")), "124M fp32 export differs: %s", err);
  /* bf16 (version 5): widened exactly, written back to the same bytes */
  write_llmc(at("gpt2_124M_bf16.bin"), a, 1, 50304);
  rc = par_model_read(at("gpt2_124M_bf16.bin"), b, err, sizeof err);
  const float *wa = view(a, "h.11.mlp.proj.w"), *wb = view(b, "h.11.mlp.proj.w");
  int ok = rc == 0;
  for (int i = 0; ok && i < 768 * 3072; i++) ok = wb[i] == strata_bf16_to_f32(strata_f32_to_bf16(wa[i]));
  CHECK(ok, "124M bf16 read: rc %d: %s", rc, err);
  rc = par_model_write(at("back_bf16.bin"), PAR_MODEL_LLMC, 1, b, err, sizeof err);
  CHECK(rc == 0 && same_file(at("gpt2_124M_bf16.bin"), at("back_bf16.bin")), "124M bf16 export differs");
  unlink(at("gpt2_124M.bin")), unlink(at("back.bin")), unlink(at("gpt2_124M_bf16.bin")), unlink(at("back_bf16.bin"));
  par_gpt_destroy(a);
  par_gpt_destroy(b);
}

/* ---- the test's own safetensors writer ---- */

typedef struct {
  char name[128];
  const float *x;
  int64_t d0, d1; /* d1 = 0: 1-D */
  int transpose;  /* write x (d1, d0) transposed into (d0, d1) */
} st_entry_t;

static void write_st(const char *path, st_entry_t *e, int n, const char *dtype) {
  size_t w = !strcmp(dtype, "F32") ? 4 : 2, off = 0;
  char *hdr = malloc(1 << 20);
  size_t hl = (size_t)sprintf(hdr, "{\n  \"__metadata__\": {\"format\": \"pt\"}");
  for (int i = n - 1; i >= 0; i--) { /* reverse order, spaces: not strata's style */
    size_t numel = (size_t)e[i].d0 * (size_t)(e[i].d1 ? e[i].d1 : 1);
    if (e[i].d1)
      hl += (size_t)sprintf(hdr + hl, ",\n  \"%s\": {\"dtype\": \"%s\", \"shape\": [%lld, %lld], \"data_offsets\": [%zu, %zu]}",
                            e[i].name, dtype, (long long)e[i].d0, (long long)e[i].d1, off, off + numel * w);
    else
      hl += (size_t)sprintf(hdr + hl, ",\n  \"%s\": {\"dtype\": \"%s\", \"shape\": [%lld], \"data_offsets\": [%zu, %zu]}",
                            e[i].name, dtype, (long long)e[i].d0, off, off + numel * w);
    off += numel * w;
  }
  hl += (size_t)sprintf(hdr + hl, "\n}");
  FILE *f = fopen(path, "wb");
  uint64_t h64 = hl;
  fwrite(&h64, 8, 1, f);
  fwrite(hdr, 1, hl, f);
  for (int i = n - 1; i >= 0; i--) {
    size_t d0 = (size_t)e[i].d0, d1 = (size_t)(e[i].d1 ? e[i].d1 : 1);
    for (size_t r = 0; r < d0; r++)
      for (size_t c = 0; c < d1; c++) {
        float v = e[i].transpose ? e[i].x[c * d0 + r] : e[i].x[r * d1 + c];
        if (w == 4) fwrite(&v, 4, 1, f);
        else {
          uint16_t h = !strcmp(dtype, "BF16") ? strata_f32_to_bf16(v) : strata_f32_to_f16(v);
          fwrite(&h, 2, 1, f);
        }
      }
  }
  fclose(f);
  free(hdr);
}

static float round_to(const char *dtype, float v) {
  if (!strcmp(dtype, "BF16")) return strata_bf16_to_f32(strata_f32_to_bf16(v));
  if (!strcmp(dtype, "F16")) return strata_f16_to_f32(strata_f32_to_f16(v));
  return v;
}

static void safetensors(void) {
  par_gpt_config_t c = {.layers = 2, .hidden = 32, .heads = 4, .seq = 16, .vocab = 64};
  char err[512];
  par_gpt_t *a = model(&c, 3), *b = model(&c, 4);
  perturb(a);
  st_entry_t e[64];
  int n = 0;
  int64_t C = c.hidden;
#define E(nm, v, a0, a1, t) snprintf(e[n].name, sizeof e[n].name, "transformer.%s", nm), e[n].x = view(a, v), e[n].d0 = a0, e[n].d1 = a1, e[n].transpose = t, n++
  E("wte.weight", "wte", c.vocab, C, 0);
  E("wpe.weight", "wpe", c.seq, C, 0);
  for (int l = 0; l < c.layers; l++) {
    char hf[96], sv[64];
#define B(hfn, svn, a0, a1, t) snprintf(hf, sizeof hf, "h.%d.%s", l, hfn), snprintf(sv, sizeof sv, "h.%d.%s", l, svn), E(hf, sv, a0, a1, t)
    B("ln_1.weight", "ln_1.w", C, 0, 0);
    B("ln_1.bias", "ln_1.b", C, 0, 0);
    B("attn.c_attn.weight", "attn.qkv.w", C, 3 * C, 1);
    B("attn.c_attn.bias", "attn.qkv.b", 3 * C, 0, 0);
    B("attn.c_proj.weight", "attn.proj.w", C, C, 1);
    B("attn.c_proj.bias", "attn.proj.b", C, 0, 0);
    B("ln_2.weight", "ln_2.w", C, 0, 0);
    B("ln_2.bias", "ln_2.b", C, 0, 0);
    B("mlp.c_fc.weight", "mlp.fc.w", C, 4 * C, 1);
    B("mlp.c_fc.bias", "mlp.fc.b", 4 * C, 0, 0);
    B("mlp.c_proj.weight", "mlp.proj.w", 4 * C, C, 1);
    B("mlp.c_proj.bias", "mlp.proj.b", C, 0, 0);
  }
  E("ln_f.weight", "ln_f.w", C, 0, 0);
  E("ln_f.bias", "ln_f.b", C, 0, 0);
  /* Without n_head anywhere the model is refused by name. */
  write_st(at("model.safetensors"), e, n, "F32");
  par_model_format_t fmt;
  par_gpt_config_t pc;
  int rc = par_model_probe(at("model.safetensors"), &fmt, &pc, err, sizeof err);
  CHECK(rc == STRATA_ENOTFOUND && strstr(err, "n_head") && strstr(err, "config.json"), "no heads: rc %d: %s", rc, err);
  FILE *f = fopen(at("config.json"), "w");
  fprintf(f, "{\"model_type\": \"gpt2\", \"n_head\": 4, \"n_layer\": 2, \"n_embd\": 32}\n");
  fclose(f);
  rc = par_model_probe(at("model.safetensors"), &fmt, &pc, err, sizeof err);
  CHECK(rc == 0 && fmt == PAR_MODEL_SAFETENSORS && pc.layers == 2 && pc.hidden == 32 && pc.heads == 4 &&
            pc.seq == 16 && pc.vocab == 64,
        "probe safetensors: rc %d: %s", rc, err);
  rc = par_model_read(at("model.safetensors"), b, err, sizeof err);
  CHECK(rc == 0 && same_bits(a, b), "safetensors F32: rc %d, parameters differ: %s", rc, err);
  /* strata's export, read and written again: the same bytes */
  rc = par_model_write(at("out.safetensors"), PAR_MODEL_SAFETENSORS, 0, b, err, sizeof err);
  par_gpt_t *d = model(&c, 5);
  if (rc == 0) rc = par_model_read(at("out.safetensors"), d, err, sizeof err);
  CHECK(rc == 0 && same_bits(a, d), "safetensors export read back: rc %d: %s", rc, err);
  if (rc == 0) rc = par_model_write(at("out2.safetensors"), PAR_MODEL_SAFETENSORS, 0, d, err, sizeof err);
  CHECK(rc == 0 && same_file(at("out.safetensors"), at("out2.safetensors")), "safetensors round trip differs");
  /* BF16 and F16: widened exactly */
  const char *dts[] = {"BF16", "F16"};
  for (int k = 0; k < 2; k++) {
    write_st(at("half.safetensors"), e, n, dts[k]);
    rc = par_model_read(at("half.safetensors"), b, err, sizeof err);
    const float *xa = view(a, "h.1.attn.qkv.w"), *xb = view(b, "h.1.attn.qkv.w");
    int ok = rc == 0;
    for (int i = 0; ok && i < 96 * 32; i++) ok = xb[i] == round_to(dts[k], xa[i]);
    CHECK(ok, "safetensors %s: rc %d: %s", dts[k], rc, err);
  }
  /* another model's shapes */
  par_gpt_config_t c2 = c;
  c2.hidden = 64;
  par_gpt_t *wrong = model(&c2, 1);
  rc = par_model_read(at("out.safetensors"), wrong, err, sizeof err);
  CHECK(rc == STRATA_ESHAPE && strstr(err, "holds layers=2 hidden=32 heads=4 seq=16 vocab=64, the model is layers=2 hidden=64"),
        "other model: rc %d: %s", rc, err);
  /* strata's own weights checkpoint */
  rc = par_model_write(at("w.h5"), PAR_MODEL_STRATA, 0, a, err, sizeof err);
  if (rc == 0) rc = par_model_probe(at("w.h5"), &fmt, &pc, err, sizeof err);
  CHECK(rc == 0 && fmt == PAR_MODEL_STRATA && pc.hidden == 32 && pc.vocab == 64, "strata probe: rc %d: %s", rc, err);
  if (rc == 0) rc = par_model_read(at("w.h5"), d, err, sizeof err);
  CHECK(rc == 0 && same_bits(a, d), "strata weights: rc %d: %s", rc, err);
  par_gpt_destroy(wrong), par_gpt_destroy(a), par_gpt_destroy(b), par_gpt_destroy(d);
  unlink(at("model.safetensors")), unlink(at("config.json")), unlink(at("out.safetensors"));
  unlink(at("out2.safetensors")), unlink(at("half.safetensors")), unlink(at("w.h5"));
}

static void refusals(void) {
  par_gpt_config_t c = {.layers = 1, .hidden = 16, .heads = 2, .seq = 8, .vocab = 40};
  char err[512];
  par_gpt_t *a = model(&c, 1);
  write_llmc(at("m.bin"), a, 0, 128);
  par_model_format_t fmt;
  par_gpt_config_t pc;
  /* truncated */
  FILE *f = fopen(at("m.bin"), "r+b");
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fclose(f);
  if (truncate(at("m.bin"), size - 4) != 0) fails++;
  int rc = par_model_probe(at("m.bin"), &fmt, &pc, err, sizeof err);
  CHECK(rc == STRATA_ECORRUPT && strstr(err, "the header's model takes") && strstr(err, "the file holds"),
        "truncated: rc %d: %s", rc, err);
  /* bad version */
  write_llmc(at("m.bin"), a, 0, 128);
  f = fopen(at("m.bin"), "r+b");
  int32_t v = 4;
  fseek(f, 4, SEEK_SET);
  fwrite(&v, 4, 1, f);
  fclose(f);
  rc = par_model_probe(at("m.bin"), &fmt, &pc, err, sizeof err);
  CHECK(rc == STRATA_ECORRUPT && strstr(err, "version 4"), "version: rc %d: %s", rc, err);
  /* neither format */
  f = fopen(at("m.bin"), "wb");
  fputs("hello, not a model at all", f);
  fclose(f);
  rc = par_model_probe(at("m.bin"), &fmt, &pc, err, sizeof err);
  CHECK(rc == STRATA_ECORRUPT && strstr(err, "is neither a strata checkpoint"), "garbage: rc %d: %s", rc, err);
  /* a safetensors header that is not JSON */
  f = fopen(at("m.bin"), "wb");
  uint64_t hl = 8;
  fwrite(&hl, 8, 1, f);
  fputs("{\"a\": [1", f);
  fclose(f);
  rc = par_model_probe(at("m.bin"), &fmt, &pc, err, sizeof err);
  CHECK(rc == STRATA_ECORRUPT && strstr(err, "header: line 1, column 9"), "bad json: rc %d: %s", rc, err);
  unlink(at("m.bin"));
  par_gpt_destroy(a);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  if (!mkdtemp(dir)) return 1;
  refusals();
  safetensors();
  if (argc < 2 || strcmp(argv[1], "small")) gpt2_124m();
  rmdir(dir);
  printf("model_files: %d failed checks\n", fails);
  MPI_Finalize();
  return fails ? 1 : 0;
}
