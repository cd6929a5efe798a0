/* Models in and out of strata, from the command line and from recipes:
 *
 *   strata sample MODEL [PROMPT] [n= temperature= top_k= seed= tokenizer= ids=]
 *   strata eval MODEL DATA... [batch= seq= tokenizer= out=]
 *   strata convert SRC DEST [dtype=bf16]
 *
 * MODEL is a strata checkpoint, an llm.c model file or a Hugging Face
 * model.safetensors (told apart by their contents). Recipes get the same
 * through strata.gpt{init = PATH}, model:generate{...} and
 * strata.tokenizer(PATH). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <strata/parallel.h>

#include "strata_lua.h"

/* ------------------------------------------------------------ options */

typedef struct {
  const char *key, *value;
} kv_t;

/* key=value arguments after the positional ones; an unknown key is an error
 * naming the known ones. Returns the number of positional arguments. */
static int split_args(const char *cmd, int argc, char **argv, const char *const *known, kv_t *kv, int *nkv,
                      char **pos, int maxpos) {
  int np = 0;
  *nkv = 0;
  for (int i = 0; i < argc; i++) {
    const char *eq = strchr(argv[i], '=');
    int is_kv = eq && eq > argv[i] && strspn(argv[i], "abcdefghijklmnopqrstuvwxyz_") == (size_t)(eq - argv[i]);
    if (!is_kv) {
      if (np == maxpos) {
        fprintf(stderr, "strata %s: unexpected argument '%s'\n", cmd, argv[i]);
        return -1;
      }
      pos[np++] = argv[i];
      continue;
    }
    int ok = 0;
    for (int k = 0; known[k]; k++) ok |= strlen(known[k]) == (size_t)(eq - argv[i]) && !strncmp(known[k], argv[i], (size_t)(eq - argv[i]));
    if (!ok) {
      fprintf(stderr, "strata %s: unknown option '%.*s' (", cmd, (int)(eq - argv[i]), argv[i]);
      for (int k = 0; known[k]; k++) fprintf(stderr, "%s%s", k ? ", " : "", known[k]);
      fprintf(stderr, ")\n");
      return -1;
    }
    kv[*nkv].key = argv[i], kv[*nkv].value = eq + 1;
    (*nkv)++;
  }
  return np;
}

static const char *opt(const kv_t *kv, int n, const char *key, const char *def) {
  for (int i = n - 1; i >= 0; i--)
    if (!strncmp(kv[i].key, key, strlen(key)) && kv[i].key[strlen(key)] == '=') return kv[i].value;
  return def;
}

/* A number option in [lo, hi]; -1 with a message when it is not one. */
static int num_opt(const char *cmd, const kv_t *kv, int n, const char *key, double def, double lo, double hi,
                   int integer, double *out) {
  const char *s = opt(kv, n, key, NULL);
  char *end;
  *out = def;
  if (!s) return 0;
  errno = 0;
  double v = strtod(s, &end);
  if (!*s || *end || errno || !(v >= lo && v <= hi) || (integer && v != floor(v))) {
    fprintf(stderr, "strata %s: %s=%s: expected %s in [%g, %g]\n", cmd, key, s, integer ? "an integer" : "a number",
            lo, hi);
    return -1;
  }
  *out = v;
  return 0;
}

/* ------------------------------------------------------------ models */

static void mpi_start(void) {
  int init = 0;
  MPI_Initialized(&init);
  if (!init) {
    int provided;
    MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
  }
}

static void mpi_end(void) {
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin) MPI_Finalize();
}

int lstrata_load_model(const char *path, par_gpt_t **out, par_model_format_t *fmt, char *err, size_t n) {
  par_gpt_config_t c;
  par_model_format_t f;
  *out = NULL;
  int rc = par_model_probe(path, &f, &c, err, n);
  if (rc) return rc;
  par_gpt_options_t o = PAR_GPT_OPTIONS_DEFAULTS;
  o.threads = lstrata_threads(NULL, NULL);
  if ((rc = par_gpt_create_ex(out, &c, &o, 1))) {
    snprintf(err, n, "%s", par_gpt_create_error());
    return rc;
  }
  if ((rc = par_model_read(path, *out, err, n))) {
    par_gpt_destroy(*out);
    *out = NULL;
  }
  if (fmt) *fmt = f;
  return rc;
}

/* The tokenizer for a model of vocabulary V: the one named, else one found
 * beside the model (vocab.json, then gpt2_tokenizer.bin); NULL and no error
 * for byte-level models, which need none. */
static int find_tokenizer(const char *model, const char *named, int V, par_tokenizer_t **t, char *err,
                          size_t n) {
  *t = NULL;
  if (named) return par_tokenizer_open(named, t, err, n);
  if (V <= 256) return STRATA_OK;
  static const char *const names[] = {"vocab.json", "gpt2_tokenizer.bin"};
  const char *slash = strrchr(model, '/');
  for (int i = 0; i < 2; i++) {
    char p[4200];
    snprintf(p, sizeof p, "%.*s%s", slash ? (int)(slash - model + 1) : 0, model, names[i]);
    if (access(p, R_OK) == 0) return par_tokenizer_open(p, t, err, n);
  }
  snprintf(err, n,
           "a model of %d tokens needs its tokenizer: tokenizer=gpt2_tokenizer.bin (llm.c's, to "
           "decode) or tokenizer=vocab.json (GPT-2's, with merges.txt beside it, to encode a prompt too)",
           V);
  return STRATA_ENOTFOUND;
}

/* ------------------------------------------------------------ generation */

int lstrata_generate(par_gpt_t *m, const int32_t *prompt, int np, int n, const par_sample_options_t *so, int eot,
                     void (*emit)(void *, int32_t), void *ctx, int32_t **out, int *nout, char *err, size_t en) {
  const par_gpt_config_t *c = par_gpt_config(m);
  int V = c->vocab, rc;
  *out = NULL, *nout = 0;
  if (np < 1 || np >= c->seq) {
    snprintf(err, en, "the prompt has %d tokens; the model sees %d positions, so 1 to %d fit", np, c->seq, c->seq - 1);
    return STRATA_EINVAL;
  }
  if (n > c->seq - np) n = c->seq - np; /* the model's positions end there */
  par_gpt_kv_t *kv = NULL;
  float *logits = malloc((size_t)V * sizeof *logits);
  int32_t *gen = malloc((size_t)(n > 0 ? n : 1) * sizeof *gen);
  if (!logits || !gen) {
    free(logits), free(gen);
    snprintf(err, en, "out of memory");
    return STRATA_ENOMEM;
  }
  rc = par_gpt_kv_create(&kv, m, np + n > 0 ? np + n : 1);
  if (!rc) rc = par_gpt_kv_append(kv, prompt, np, logits);
  int k = 0;
  for (; !rc && k < n; k++) {
    if ((rc = par_gpt_sample(logits, V, so, (uint64_t)k, &gen[k]))) break;
    if (emit) emit(ctx, gen[k]);
    if (gen[k] == eot) {
      k++;
      break;
    }
    if (k + 1 < n) rc = par_gpt_kv_append(kv, &gen[k], 1, logits);
  }
  if (rc) snprintf(err, en, "%s", par_gpt_last_error(m));
  par_gpt_kv_destroy(kv);
  free(logits);
  if (rc) {
    free(gen);
    return rc;
  }
  *out = gen, *nout = k;
  return STRATA_OK;
}

typedef struct {
  par_tokenizer_t *tok;
} emit_ctx_t;

static void emit_text(void *p, int32_t id) {
  emit_ctx_t *e = p;
  if (e->tok) {
    size_t l;
    const char *s = par_tokenizer_token(e->tok, id, &l);
    if (s) fwrite(s, 1, l, stdout);
  } else {
    putchar(id); /* byte-level */
  }
  fflush(stdout);
}

int lstrata_cmd_sample(int argc, char **argv) {
  static const char *const known[] = {"n", "temperature", "top_k", "seed", "tokenizer", "ids", NULL};
  kv_t kv[16];
  char *pos[2], err[1024] = "";
  int nkv, rc = STRATA_EXIT_USAGE;
  if (argc > 16) argc = 16;
  int np = split_args("sample", argc, argv, known, kv, &nkv, pos, 2);
  if (np < 1) {
    if (np == 0)
      fprintf(stderr, "strata sample: usage: strata sample MODEL [PROMPT] [n=200 temperature=1 top_k=40 "
                      "seed=1 tokenizer=FILE ids=1,2,3]\n");
    return STRATA_EXIT_USAGE;
  }
  double n, temp, topk, seed;
  if (num_opt("sample", kv, nkv, "n", 200, 0, 1 << 24, 1, &n) ||
      num_opt("sample", kv, nkv, "temperature", 1.0, 0, 100, 0, &temp) ||
      num_opt("sample", kv, nkv, "top_k", 40, 0, 1 << 24, 1, &topk) ||
      num_opt("sample", kv, nkv, "seed", 1, 0, 9007199254740992.0, 1, &seed))
    return STRATA_EXIT_USAGE;
  const char *ids_s = opt(kv, nkv, "ids", NULL);
  if (np == 2 && ids_s) {
    fprintf(stderr, "strata sample: give the prompt as text or as ids=, not both\n");
    return STRATA_EXIT_USAGE;
  }
  mpi_start();
  par_gpt_t *m = NULL;
  par_tokenizer_t *tok = NULL;
  int32_t *prompt = NULL, *out = NULL;
  size_t npr = 0;
  int nout = 0;
  if (lstrata_load_model(pos[0], &m, NULL, err, sizeof err)) {
    rc = STRATA_EXIT_FAIL;
    goto done;
  }
  int V = par_gpt_config(m)->vocab;
  if (find_tokenizer(pos[0], opt(kv, nkv, "tokenizer", NULL), V, &tok, err, sizeof err)) {
    rc = STRATA_EXIT_FAIL;
    goto done;
  }
  if (tok && par_tokenizer_vocab(tok) > V) { /* GPT-2's padded vocabularies are larger, not smaller */
    snprintf(err, sizeof err, "the tokenizer has %d tokens, the model %d", par_tokenizer_vocab(tok), V);
    rc = STRATA_EXIT_FAIL;
    goto done;
  }
  if (ids_s) { /* a prompt of token ids */
    prompt = malloc((strlen(ids_s) / 2 + 1) * sizeof *prompt);
    for (const char *s = ids_s; prompt && *s;) {
      char *e;
      long v = strtol(s, &e, 10);
      if (e == s || v < 0 || v >= V || (*e && *e != ',')) {
        fprintf(stderr, "strata sample: ids=%s: expected token ids in [0, %d) separated by commas\n", ids_s, V);
        goto done;
      }
      prompt[npr++] = (int32_t)v;
      s = *e ? e + 1 : e;
    }
  } else if (np == 2 && *pos[1]) { /* a text prompt */
    if (!tok) { /* bytes */
      npr = strlen(pos[1]);
      prompt = malloc(npr * sizeof *prompt);
      for (size_t i = 0; prompt && i < npr; i++) prompt[i] = (unsigned char)pos[1][i];
    } else if (par_tokenizer_encode(tok, pos[1], strlen(pos[1]), &prompt, &npr, err, sizeof err)) {
      rc = STRATA_EXIT_FAIL;
      goto done;
    }
  } else { /* no prompt: the end-of-text token (GPT-2), or a newline */
    prompt = malloc(sizeof *prompt);
    if (prompt) prompt[0] = tok && par_tokenizer_eot(tok) >= 0 ? par_tokenizer_eot(tok) : '\n', npr = 1;
  }
  if (!prompt) {
    snprintf(err, sizeof err, "out of memory");
    rc = STRATA_EXIT_FAIL;
    goto done;
  }
  par_sample_options_t so = {.temperature = temp, .top_k = (int)topk, .seed = (uint64_t)seed};
  emit_ctx_t ec = {tok};
  if (np == 2) fputs(pos[1], stdout); /* the prompt, then what the model writes after it */
  rc = lstrata_generate(m, prompt, (int)npr, (int)n, &so, tok ? par_tokenizer_eot(tok) : -1, emit_text, &ec, &out,
                        &nout, err, sizeof err)
           ? STRATA_EXIT_FAIL
           : STRATA_EXIT_OK;
  putchar('\n');
done:
  if (rc == STRATA_EXIT_FAIL) fprintf(stderr, "strata sample: %s\n", err);
  free(prompt), free(out);
  par_tokenizer_destroy(tok);
  par_gpt_destroy(m);
  mpi_end();
  return rc;
}

/* ------------------------------------------------------------ evaluation */

int lstrata_cmd_eval(int argc, char **argv) {
  static const char *const known[] = {"batch", "seq", "tokenizer", "out", NULL};
  kv_t kv[16];
  char *pos[33], err[1024] = "";
  int nkv, rc = STRATA_EXIT_USAGE;
  if (argc > 48) argc = 48;
  int np = split_args("eval", argc, argv, known, kv, &nkv, pos, 33);
  if (np < 2) {
    if (np >= 0)
      fprintf(stderr, "strata eval: usage: strata eval MODEL DATA... [batch=8 seq=MODEL'S tokenizer=FILE out=FILE.h5]\n");
    return STRATA_EXIT_USAGE;
  }
  double batch, seq;
  if (num_opt("eval", kv, nkv, "batch", 8, 1, 1 << 16, 1, &batch) ||
      num_opt("eval", kv, nkv, "seq", 0, 0, 1 << 24, 1, &seq))
    return STRATA_EXIT_USAGE;
  mpi_start();
  par_gpt_t *m = NULL;
  par_tokenizer_t *tok = NULL;
  par_data_t *d = NULL;
  int32_t *in = NULL, *tg = NULL;
  double tokens = 0, bytes = 0, nats = 0;
  rc = STRATA_EXIT_FAIL;
  if (lstrata_load_model(pos[0], &m, NULL, err, sizeof err)) goto done;
  const par_gpt_config_t *c = par_gpt_config(m);
  int T = seq > 0 ? (int)seq : c->seq, B = (int)batch;
  if (T > c->seq) {
    snprintf(err, sizeof err, "seq=%d: the model sees at most %d positions", T, c->seq);
    goto done;
  }
  if (c->vocab > 256 && find_tokenizer(pos[0], opt(kv, nkv, "tokenizer", NULL), c->vocab, &tok, err, sizeof err) &&
      opt(kv, nkv, "tokenizer", NULL))
    goto done; /* a tokenizer named but unreadable; none found: no bits per byte */
  for (int f = 1; f < np; f++) {
    par_data_options_t o = PAR_DATA_DEFAULTS;
    o.format = PAR_DATA_AUTO, o.path = pos[f], o.val_fraction = 0, o.seq = T;
    if (par_data_open(&o, &d, err, sizeof err)) goto done;
    if (par_data_vocab(d) > c->vocab) {
      snprintf(err, sizeof err, "data '%s' holds token %d, beyond the model's %d", pos[f], par_data_vocab(d) - 1,
               c->vocab);
      goto done;
    }
    uint64_t N = par_data_samples(d, PAR_SPLIT_TRAIN);
    free(in), free(tg);
    in = malloc(sizeof *in * (size_t)B * T), tg = malloc(sizeof *tg * (size_t)B * T);
    if (!in || !tg) {
      snprintf(err, sizeof err, "out of memory");
      goto done;
    }
    /* the windows 0..N-1 of the (shuffled) first epoch: each once */
    for (uint64_t s = 0; s < N; s += (uint64_t)B) {
      int b = N - s < (uint64_t)B ? (int)(N - s) : B;
      float loss;
      if (par_data_fill(d, PAR_SPLIT_TRAIN, s, b, in, tg) ||
          par_gpt_forward(m, in, tg, b, T, &loss)) {
        snprintf(err, sizeof err, "%s", par_data_error(d)[0] ? par_data_error(d) : par_gpt_last_error(m));
        goto done;
      }
      nats += (double)loss * b * T;
      tokens += (double)b * T;
      for (int i = 0; i < b * T; i++) {
        size_t l = 1;
        if (tok) par_tokenizer_token(tok, tg[i], &l);
        bytes += (double)l;
      }
    }
    par_data_destroy(d);
    d = NULL;
  }
  if (tokens == 0) {
    snprintf(err, sizeof err, "no window of %d + 1 tokens in the data", T);
    goto done;
  }
  double loss = nats / tokens, ppl = exp(loss);
  int have_bpb = c->vocab <= 256 || tok;
  double bpb = have_bpb ? nats / (bytes * log(2.0)) : NAN;
  char out_default[4200];
  snprintf(out_default, sizeof out_default, "%s.eval.h5", pos[0]);
  const char *out = opt(kv, nkv, "out", out_default);
  printf("strata eval: %s on", pos[0]);
  for (int f = 1; f < np; f++) printf(" %s", pos[f]);
  printf(": %.0f tokens, loss %.4f nats/token, perplexity %.3f", tokens, loss, ppl);
  if (have_bpb) printf(", %.4f bits/byte", bpb);
  else printf(" (bits/byte: give tokenizer=)");
  printf("\n");
  static const char *const names[] = {"loss", "perplexity", "bits_per_byte", "tokens", "bytes"};
  static const char *const units[] = {"nats/token", "perplexity", "bits/byte", "tokens", "bytes"};
  double row[5] = {loss, ppl, bpb, tokens, have_bpb ? bytes : NAN};
  par_metrics_t *mt = NULL;
  int unit_rc = 0;
  if (par_metrics_create(out, names, 5, &mt, err, sizeof err) == STRATA_OK)
    for (int k = 0; k < 5 && !unit_rc; k++) unit_rc = par_metrics_set_unit(mt, names[k], units[k]);
  if (!mt || unit_rc || par_metrics_append(mt, row, 1) ||
      par_metrics_set_attr(mt, "model", pos[0]) || par_metrics_set_attr(mt, "data", pos[1])) {
    if (mt) snprintf(err, sizeof err, "%s", par_metrics_error(mt));
    par_metrics_destroy(mt);
    goto done;
  }
  par_metrics_destroy(mt);
  printf("strata eval: results in %s\n", out);
  rc = STRATA_EXIT_OK;
done:
  if (rc != STRATA_EXIT_OK) fprintf(stderr, "strata eval: %s\n", err);
  free(in), free(tg);
  par_data_destroy(d);
  par_tokenizer_destroy(tok);
  par_gpt_destroy(m);
  mpi_end();
  return rc;
}

/* ------------------------------------------------------------ conversion */

static int format_of_name(const char *path, par_model_format_t *f) {
  size_t l = strlen(path);
  if (l > 3 && !strcmp(path + l - 3, ".h5")) return *f = PAR_MODEL_STRATA, 0;
  if (l > 4 && !strcmp(path + l - 4, ".bin")) return *f = PAR_MODEL_LLMC, 0;
  if (l > 12 && !strcmp(path + l - 12, ".safetensors")) return *f = PAR_MODEL_SAFETENSORS, 0;
  return -1;
}

int lstrata_cmd_convert(int argc, char **argv) {
  static const char *const known[] = {"dtype", NULL};
  kv_t kv[4];
  char *pos[2], err[1024] = "";
  int nkv;
  if (argc > 4) argc = 4;
  int np = split_args("convert", argc, argv, known, kv, &nkv, pos, 2);
  par_model_format_t to;
  if (np != 2) {
    if (np >= 0) fprintf(stderr, "strata convert: usage: strata convert SRC DEST.{h5,bin,safetensors} [dtype=bf16]\n");
    return STRATA_EXIT_USAGE;
  }
  if (format_of_name(pos[1], &to)) {
    fprintf(stderr, "strata convert: '%s': name the format by the extension: .h5 (strata), .bin (llm.c), "
                    ".safetensors (Hugging Face)\n", pos[1]);
    return STRATA_EXIT_USAGE;
  }
  const char *dt = opt(kv, nkv, "dtype", "fp32");
  if (strcmp(dt, "fp32") && strcmp(dt, "bf16")) {
    fprintf(stderr, "strata convert: dtype=%s: expected fp32 or bf16\n", dt);
    return STRATA_EXIT_USAGE;
  }
  int bf16 = !strcmp(dt, "bf16");
  if (bf16 && to != PAR_MODEL_LLMC) {
    fprintf(stderr, "strata convert: dtype=bf16: only llm.c files (.bin, version 5) hold bf16 weights\n");
    return STRATA_EXIT_USAGE;
  }
  mpi_start();
  par_gpt_t *m = NULL;
  par_model_format_t from;
  int rc = STRATA_EXIT_FAIL;
  if (!lstrata_load_model(pos[0], &m, &from, err, sizeof err) && !par_model_write(pos[1], to, bf16, m, err, sizeof err)) {
    const par_gpt_config_t *c = par_gpt_config(m);
    printf("strata convert: %s (%s) -> %s (%s%s): layers=%d hidden=%d heads=%d seq=%d vocab=%d\n", pos[0],
           par_model_format_name(from), pos[1], par_model_format_name(to), bf16 ? ", bf16" : "", c->layers,
           c->hidden, c->heads, c->seq, c->vocab);
    rc = STRATA_EXIT_OK;
  } else {
    fprintf(stderr, "strata convert: %s\n", err);
  }
  par_gpt_destroy(m);
  mpi_end();
  return rc;
}
