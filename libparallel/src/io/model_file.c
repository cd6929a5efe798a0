/* GPT-2 weights in and out: llm.c model files, Hugging Face safetensors
 * and strata's own checkpoints, read into and written from a par_gpt.
 *
 * llm.c (train_gpt2.c, gpt2_124M.bin): 256 int32 of header (magic
 * 20240326, version 3 = fp32 or 5 = bf16, maxT, V, L, heads, C, padded V),
 * then the parameters kind by kind across layers: wte (Vp, C), wpe (maxT,
 * C), ln1w (L, C), ln1b, qkvw (L, 3C, C), qkvb, attprojw (L, C, C),
 * attprojb, ln2w, ln2b, fcw (L, 4C, C), fcb, fcprojw (L, C, 4C), fcprojb,
 * lnfw (C), lnfb. Linear weights are (out, in), as strata's; the rows of
 * wte beyond V are padding (zeros when llm.c writes them; strata writes
 * zeros, and reads only the first V).
 *
 * safetensors (huggingface/safetensors, format.md): an 8-byte little-endian
 * header length, a JSON header naming each tensor's dtype, shape and byte
 * range, then the data. GPT-2's names (GPT2Model; a "transformer." prefix
 * is accepted) with its Conv1D weights stored (in, out): strata transposes
 * c_attn, c_proj and c_fc on the way in and out. The number of heads is not
 * in the tensors: it comes from the header's __metadata__ (strata writes
 * n_head there) or from a config.json beside the file. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <strata/half.h>
#include <strata/parallel.h>

#include "ckpt_names.h"
#include "json.h"

#define LLMC_MAGIC 20240326

static int fail(char *err, size_t n, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t n, int code, const char *fmt, ...) {
  if (err && n) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
  }
  return code;
}

const char *par_model_format_name(par_model_format_t f) {
  switch (f) {
  case PAR_MODEL_STRATA: return "strata checkpoint";
  case PAR_MODEL_LLMC: return "llm.c model";
  case PAR_MODEL_SAFETENSORS: return "safetensors";
  }
  return "?";
}

/* ------------------------------------------------------------ mapped files */

typedef struct {
  const unsigned char *p;
  size_t n;
} mapped_t;

static int map_file(const char *path, mapped_t *m, char *err, size_t n) {
  struct stat sb;
  int fd = open(path, O_RDONLY);
  m->p = NULL, m->n = 0;
  if (fd < 0) return fail(err, n, STRATA_EIO, "model file '%s': %s", path, strerror(errno));
  if (fstat(fd, &sb) != 0 || sb.st_size == 0) {
    close(fd);
    return fail(err, n, STRATA_ECORRUPT, "model file '%s' is empty", path);
  }
  void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return fail(err, n, STRATA_EIO, "model file '%s': mmap: %s", path, strerror(errno));
  m->p = p, m->n = (size_t)sb.st_size;
  return STRATA_OK;
}

static void unmap(mapped_t *m) {
  if (m->p) munmap((void *)m->p, m->n);
  m->p = NULL;
}

/* ------------------------------------------------------------ llm.c */

typedef struct {
  int version, maxT, V, L, NH, C, Vp;
} llmc_hdr_t;

/* Element offset of each parameter kind in an llm.c file. */
enum { K_WTE, K_WPE, K_LN1W, K_LN1B, K_QKVW, K_QKVB, K_PROJW, K_PROJB, K_LN2W, K_LN2B, K_FCW, K_FCB,
       K_FCPROJW, K_FCPROJB, K_LNFW, K_LNFB, K_N };

static void llmc_offsets(const llmc_hdr_t *h, size_t off[K_N + 1]) {
  size_t C = (size_t)h->C, L = (size_t)h->L, sizes[K_N] = {
      (size_t)h->Vp * C, (size_t)h->maxT * C, L * C, L * C, L * 3 * C * C, L * 3 * C, L * C * C, L * C,
      L * C, L * C, L * 4 * C * C, L * 4 * C, L * C * 4 * C, L * C, C, C};
  off[0] = 0;
  for (int k = 0; k < K_N; k++) off[k + 1] = off[k] + sizes[k];
}

static int llmc_header(const mapped_t *m, const char *path, llmc_hdr_t *h, char *err, size_t n) {
  if (m->n < 256 * 4) return fail(err, n, STRATA_ECORRUPT, "llm.c model '%s': shorter than its 1 KiB header", path);
  int32_t hd[256];
  memcpy(hd, m->p, sizeof hd);
  if (hd[0] != LLMC_MAGIC)
    return fail(err, n, STRATA_ECORRUPT, "llm.c model '%s': magic %d, not %d", path, hd[0], LLMC_MAGIC);
  *h = (llmc_hdr_t){hd[1], hd[2], hd[3], hd[4], hd[5], hd[6], hd[7]};
  if (h->version != 3 && h->version != 5)
    return fail(err, n, STRATA_ECORRUPT, "llm.c model '%s': version %d (strata reads 3, fp32, and 5, bf16)",
                path, h->version);
  if (h->maxT < 1 || h->V < 1 || h->L < 1 || h->NH < 1 || h->C < 1 || h->Vp < h->V || h->C % h->NH)
    return fail(err, n, STRATA_ECORRUPT,
                "llm.c model '%s': header maxT %d, V %d, L %d, heads %d, C %d, padded V %d is not a GPT-2",
                path, h->maxT, h->V, h->L, h->NH, h->C, h->Vp);
  size_t off[K_N + 1], w = h->version == 3 ? 4 : 2;
  llmc_offsets(h, off);
  if (m->n != 1024 + off[K_N] * w)
    return fail(err, n, STRATA_ECORRUPT,
                "llm.c model '%s': the header's model takes %zu bytes of %s parameters, the file holds %zu",
                path, off[K_N] * w, w == 4 ? "fp32" : "bf16", m->n - 1024);
  return STRATA_OK;
}

/* The place of strata view v in an llm.c file: kind and element offset. */
static size_t llmc_place(const par_gpt_view_t *v, const size_t off[K_N + 1]) {
  int l = 0;
  char kind[32] = "";
  if (!strcmp(v->name, "wte")) return off[K_WTE];
  if (!strcmp(v->name, "wpe")) return off[K_WPE];
  if (!strcmp(v->name, "ln_f.w")) return off[K_LNFW];
  if (!strcmp(v->name, "ln_f.b")) return off[K_LNFB];
  sscanf(v->name, "h.%d.%31s", &l, kind);
  static const struct {
    const char *name;
    int k;
  } kinds[] = {{"ln_1.w", K_LN1W}, {"ln_1.b", K_LN1B}, {"attn.qkv.w", K_QKVW}, {"attn.qkv.b", K_QKVB},
               {"attn.proj.w", K_PROJW}, {"attn.proj.b", K_PROJB}, {"ln_2.w", K_LN2W}, {"ln_2.b", K_LN2B},
               {"mlp.fc.w", K_FCW}, {"mlp.fc.b", K_FCB}, {"mlp.proj.w", K_FCPROJW}, {"mlp.proj.b", K_FCPROJB}};
  for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++)
    if (!strcmp(kind, kinds[i].name)) return off[kinds[i].k] + (size_t)l * v->numel;
  return (size_t)-1;
}

static int llmc_read(const mapped_t *m, const char *path, par_gpt_t *model, char *err, size_t n) {
  llmc_hdr_t h;
  int rc = llmc_header(m, path, &h, err, n);
  if (rc) return rc;
  size_t off[K_N + 1];
  llmc_offsets(&h, off);
  float *params = par_gpt_params(model, NULL);
  const unsigned char *data = m->p + 1024;
  for (int i = 0; i < par_gpt_num_views(model); i++) {
    const par_gpt_view_t *v = par_gpt_view(model, i);
    size_t at = llmc_place(v, off);
    if (at == (size_t)-1) return fail(err, n, STRATA_EINVAL, "llm.c model: no place for '%s'", v->name);
    float *dst = params + v->offset;
    if (h.version == 3) {
      memcpy(dst, data + at * 4, v->numel * 4);
    } else {
      const unsigned char *src = data + at * 2;
      for (size_t j = 0; j < v->numel; j++) {
        uint16_t b;
        memcpy(&b, src + 2 * j, 2);
        dst[j] = strata_bf16_to_f32(b);
      }
    }
  }
  return STRATA_OK;
}

/* ------------------------------------------------------------ safetensors */

typedef struct {
  json_doc_t *doc;
  const json_t *root;
  const unsigned char *data; /* after the header */
  size_t data_n;
  const char *prefix; /* "" or "transformer." */
} st_t;

static int st_open(const mapped_t *m, const char *path, st_t *st, char *err, size_t n) {
  char why[300];
  memset(st, 0, sizeof *st);
  uint64_t hl = 0;
  if (m->n < 8) return fail(err, n, STRATA_ECORRUPT, "safetensors '%s': shorter than its 8-byte header length", path);
  memcpy(&hl, m->p, 8);
  if (hl < 2 || hl > m->n - 8 || m->p[8] != '{')
    return fail(err, n, STRATA_ECORRUPT, "safetensors '%s': header length %llu does not fit a file of %zu bytes",
                path, (unsigned long long)hl, m->n);
  if (!(st->doc = json_parse((const char *)m->p + 8, hl, why, sizeof why)))
    return fail(err, n, STRATA_ECORRUPT, "safetensors '%s': header: %s", path, why);
  st->root = json_root(st->doc);
  st->data = m->p + 8 + hl, st->data_n = m->n - 8 - hl;
  st->prefix = json_get(st->root, "transformer.wte.weight") ? "transformer." : "";
  return STRATA_OK;
}

/* The tensor called prefix + name: its shape (up to 2 dims), dtype and bytes. */
static int st_tensor(const st_t *st, const char *path, const char *name, int *ndim, int64_t shape[2],
                     int *dtype, const unsigned char **bytes, char *err, size_t n) {
  char full[160];
  snprintf(full, sizeof full, "%s%s", st->prefix, name);
  const json_t *t = json_get(st->root, full);
  if (!t) return fail(err, n, STRATA_ENOTFOUND, "safetensors '%s': no tensor '%s'", path, full);
  const json_t *dt = json_get(t, "dtype"), *sh = json_get(t, "shape"), *of = json_get(t, "data_offsets");
  if (!dt || dt->type != JSON_STRING || !sh || sh->type != JSON_ARRAY || sh->len < 1 || sh->len > 2 || !of ||
      of->type != JSON_ARRAY || of->len != 2)
    return fail(err, n, STRATA_ECORRUPT, "safetensors '%s': tensor '%s' has no dtype, shape or data_offsets",
                path, full);
  size_t w;
  if (!strcmp(dt->string, "F32")) *dtype = 0, w = 4;
  else if (!strcmp(dt->string, "BF16")) *dtype = 1, w = 2;
  else if (!strcmp(dt->string, "F16")) *dtype = 2, w = 2;
  else return fail(err, n, STRATA_EUNSUPPORTED, "safetensors '%s': tensor '%s' is %s (strata reads F32, BF16, F16)",
                   path, full, dt->string);
  *ndim = (int)sh->len;
  size_t numel = 1, i = 0;
  for (const json_t *d = sh->child; d; d = d->next, i++) numel *= (size_t)(shape[i] = (int64_t)d->number);
  double b = of->child->number, e = of->child->next->number;
  if (b < 0 || e < b || e > (double)st->data_n || (size_t)(e - b) != numel * w)
    return fail(err, n, STRATA_ECORRUPT, "safetensors '%s': tensor '%s' spans bytes [%.0f, %.0f) of %zu",
                path, full, b, e, st->data_n);
  *bytes = st->data + (size_t)b;
  return STRATA_OK;
}

/* GPT-2's name for strata view v, and whether it is a Conv1D weight. */
static int hf_name(const char *view, char *out, size_t n, int *transpose) {
  int l;
  char kind[32];
  *transpose = 0;
  if (!strcmp(view, "wte")) return snprintf(out, n, "wte.weight"), 0;
  if (!strcmp(view, "wpe")) return snprintf(out, n, "wpe.weight"), 0;
  if (!strcmp(view, "ln_f.w")) return snprintf(out, n, "ln_f.weight"), 0;
  if (!strcmp(view, "ln_f.b")) return snprintf(out, n, "ln_f.bias"), 0;
  if (sscanf(view, "h.%d.%31s", &l, kind) != 2) return -1;
  static const struct {
    const char *s, *hf;
    int t;
  } map[] = {{"ln_1.w", "ln_1.weight", 0},         {"ln_1.b", "ln_1.bias", 0},
             {"attn.qkv.w", "attn.c_attn.weight", 1}, {"attn.qkv.b", "attn.c_attn.bias", 0},
             {"attn.proj.w", "attn.c_proj.weight", 1}, {"attn.proj.b", "attn.c_proj.bias", 0},
             {"ln_2.w", "ln_2.weight", 0},         {"ln_2.b", "ln_2.bias", 0},
             {"mlp.fc.w", "mlp.c_fc.weight", 1},   {"mlp.fc.b", "mlp.c_fc.bias", 0},
             {"mlp.proj.w", "mlp.c_proj.weight", 1}, {"mlp.proj.b", "mlp.c_proj.bias", 0}};
  for (size_t i = 0; i < sizeof map / sizeof *map; i++)
    if (!strcmp(kind, map[i].s)) {
      *transpose = map[i].t;
      snprintf(out, n, "h.%d.%s", l, map[i].hf);
      return 0;
    }
  return -1;
}

static float elem(const unsigned char *b, int dtype, size_t i) {
  if (dtype == 0) {
    float f;
    memcpy(&f, b + 4 * i, 4);
    return f;
  }
  uint16_t h;
  memcpy(&h, b + 2 * i, 2);
  return dtype == 1 ? strata_bf16_to_f32(h) : strata_f16_to_f32(h);
}

static int st_read(const mapped_t *m, const char *path, par_gpt_t *model, char *err, size_t n) {
  st_t st;
  int rc = st_open(m, path, &st, err, n);
  float *params = par_gpt_params(model, NULL);
  for (int i = 0; rc == STRATA_OK && i < par_gpt_num_views(model); i++) {
    const par_gpt_view_t *v = par_gpt_view(model, i);
    char name[128];
    int tr, nd, dt;
    int64_t sh[2] = {0, 0};
    const unsigned char *b;
    if (hf_name(v->name, name, sizeof name, &tr)) {
      rc = fail(err, n, STRATA_EINVAL, "safetensors: no GPT-2 name for '%s'", v->name);
      break;
    }
    if ((rc = st_tensor(&st, path, name, &nd, sh, &dt, &b, err, n))) break;
    /* wte may hold a padded vocabulary: the model's rows come first. */
    int64_t want0 = tr ? v->shape[1] : v->shape[0], want1 = tr ? v->shape[0] : v->shape[1];
    int rows_ok = !strcmp(v->name, "wte") ? sh[0] >= want0 : sh[0] == want0;
    if (nd != v->ndim || !rows_ok || (nd == 2 && sh[1] != want1)) {
      rc = fail(err, n, STRATA_ESHAPE, "safetensors '%s': '%s%s' has shape [%lld%s%lld], the model expects [%lld%s%lld]",
                path, st.prefix, name, (long long)sh[0], nd == 2 ? "," : "", nd == 2 ? (long long)sh[1] : 0LL,
                (long long)want0, v->ndim == 2 ? "," : "", v->ndim == 2 ? (long long)want1 : 0LL);
      break;
    }
    float *dst = params + v->offset;
    if (!tr) {
      for (size_t j = 0; j < v->numel; j++) dst[j] = elem(b, dt, j);
    } else { /* Conv1D (in, out) into (out, in) */
      size_t rows = (size_t)v->shape[0], cols = (size_t)v->shape[1];
      for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) dst[r * cols + c] = elem(b, dt, c * rows + r);
    }
  }
  json_free(st.doc);
  return rc;
}

/* The number of heads: the header's metadata, else config.json beside. */
static int st_heads(const st_t *st, const char *path, int *heads) {
  const json_t *md = json_get(st->root, "__metadata__"), *h = json_get(md, "n_head");
  if (h && h->type == JSON_STRING) return (*heads = atoi(h->string)) > 0 ? 0 : -1;
  char cfgpath[4200];
  const char *slash = strrchr(path, '/');
  snprintf(cfgpath, sizeof cfgpath, "%.*sconfig.json", slash ? (int)(slash - path + 1) : 0, path);
  FILE *f = fopen(cfgpath, "rb");
  if (!f) return -1;
  char buf[1 << 16];
  size_t k = fread(buf, 1, sizeof buf, f);
  fclose(f);
  json_doc_t *d = json_parse(buf, k, NULL, 0);
  const json_t *nh = json_get(json_root(d), "n_head");
  *heads = nh && nh->type == JSON_NUMBER ? (int)nh->number : 0;
  json_free(d);
  return *heads > 0 ? 0 : -1;
}

static int st_probe(const mapped_t *m, const char *path, par_gpt_config_t *cfg, char *err, size_t n) {
  st_t st;
  int rc = st_open(m, path, &st, err, n), nd, dt;
  int64_t sh[2];
  const unsigned char *b;
  if (rc) return rc;
  if ((rc = st_tensor(&st, path, "wte.weight", &nd, sh, &dt, &b, err, n))) goto done;
  cfg->vocab = (int)sh[0], cfg->hidden = (int)sh[1];
  if ((rc = st_tensor(&st, path, "wpe.weight", &nd, sh, &dt, &b, err, n))) goto done;
  cfg->seq = (int)sh[0];
  const json_t *md = json_get(st.root, "__metadata__"), *vv = json_get(md, "vocab_size");
  if (vv && vv->type == JSON_STRING && atoi(vv->string) > 0 && atoi(vv->string) <= cfg->vocab)
    cfg->vocab = atoi(vv->string); /* strata's export pads nothing; others may */
  char key[64];
  cfg->layers = 0;
  for (;;) {
    snprintf(key, sizeof key, "%sh.%d.ln_1.weight", st.prefix, cfg->layers);
    if (!json_get(st.root, key)) break;
    cfg->layers++;
  }
  if (cfg->layers == 0) {
    rc = fail(err, n, STRATA_ECORRUPT, "safetensors '%s': no GPT-2 blocks (h.0.ln_1.weight)", path);
    goto done;
  }
  if (st_heads(&st, path, &cfg->heads))
    rc = fail(err, n, STRATA_ENOTFOUND,
              "safetensors '%s': the number of heads is in neither its metadata (n_head) nor a "
              "config.json beside it",
              path);
done:
  json_free(st.doc);
  return rc;
}

/* ------------------------------------------------------------ strata */

/* "layers=2 hidden=64 heads=4 seq=64 vocab=256" (the engine's description). */
static int parse_desc(const char *s, par_gpt_config_t *c) {
  return sscanf(s, "layers=%d hidden=%d heads=%d seq=%d vocab=%d", &c->layers, &c->hidden, &c->heads,
                &c->seq, &c->vocab) == 5
             ? 0
             : -1;
}

static int strata_probe(const char *path, par_gpt_config_t *cfg, char *err, size_t n) {
  par_ckpt_t *c = NULL;
  char *desc = NULL;
  int rc = par_ckpt_open(path, MPI_COMM_SELF, 0, &c, err, n);
  if (rc) return rc;
  if ((rc = par_ckpt_get_str(c, "model", &desc)) != STRATA_OK) fail(err, n, rc, "%s", par_ckpt_error(c));
  else if (parse_desc(desc, cfg))
    rc = fail(err, n, STRATA_ECORRUPT, "checkpoint '%s': model '%s' is not a GPT description", path, desc);
  free(desc);
  par_ckpt_close(c);
  return rc;
}

static int strata_read(const char *path, par_gpt_t *model, char *err, size_t n) {
  par_ckpt_t *c = NULL;
  char name[300];
  int rc = par_ckpt_open(path, MPI_COMM_SELF, 0, &c, err, n);
  if (rc) return rc;
  int64_t ver = 1; /* format 1 had no version attribute */
  par_ckpt_get_i64(c, "format_version", &ver, 1);
  float *params = par_gpt_params(model, NULL);
  for (int i = 0; rc == STRATA_OK && i < par_gpt_num_views(model); i++) {
    const par_gpt_view_t *v = par_gpt_view(model, i);
    ckpt_array_name((int)ver, 'p', "", v->name, name, sizeof name);
    if ((rc = par_ckpt_read(c, name, v->ndim, v->shape, 0, (int64_t)v->numel, params + v->offset)))
      fail(err, n, rc, "%s", par_ckpt_error(c));
  }
  par_ckpt_close(c);
  return rc;
}

/* ------------------------------------------------------------ the API */

static int mpi_ready(const char *path, char *err, size_t n) {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin ? 0
                      : fail(err, n, STRATA_ESTATE, "checkpoint '%s': strata checkpoints are HDF5 "
                             "files read through MPI-IO: initialise MPI first", path);
}

int par_model_probe(const char *path, par_model_format_t *fmt, par_gpt_config_t *cfg, char *err,
                    size_t n) {
  static const unsigned char h5sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  mapped_t m;
  if (!path || !fmt || !cfg) return fail(err, n, STRATA_EINVAL, "par_model_probe: NULL argument");
  par_gpt_config_t c = PAR_GPT_CONFIG_DEFAULTS;
  c.recompute = 0;
  int rc = map_file(path, &m, err, n);
  if (rc) return rc;
  int32_t magic = 0;
  if (m.n >= 4) memcpy(&magic, m.p, 4);
  if (m.n >= 8 && !memcmp(m.p, h5sig, 8)) {
    unmap(&m);
    *fmt = PAR_MODEL_STRATA;
    if ((rc = mpi_ready(path, err, n)) || (rc = strata_probe(path, &c, err, n))) return rc;
  } else if (magic == LLMC_MAGIC) {
    llmc_hdr_t h;
    *fmt = PAR_MODEL_LLMC;
    rc = llmc_header(&m, path, &h, err, n);
    unmap(&m);
    if (rc) return rc;
    c.layers = h.L, c.hidden = h.C, c.heads = h.NH, c.seq = h.maxT, c.vocab = h.V;
  } else if (m.n > 9 && m.p[8] == '{') {
    *fmt = PAR_MODEL_SAFETENSORS;
    rc = st_probe(&m, path, &c, err, n);
    unmap(&m);
    if (rc) return rc;
  } else {
    unmap(&m);
    return fail(err, n, STRATA_ECORRUPT,
                "model file '%s' is neither a strata checkpoint (HDF5), an llm.c model (magic %d) "
                "nor a safetensors file",
                path, LLMC_MAGIC);
  }
  *cfg = c;
  return STRATA_OK;
}

static int same_config(const par_gpt_config_t *a, const par_gpt_config_t *b) {
  return a->layers == b->layers && a->hidden == b->hidden && a->heads == b->heads && a->seq == b->seq &&
         a->vocab == b->vocab;
}

int par_model_read(const char *path, par_gpt_t *model, char *err, size_t n) {
  par_model_format_t fmt;
  par_gpt_config_t c;
  mapped_t m = {0};
  if (!model) return fail(err, n, STRATA_EINVAL, "par_model_read: no model");
  int rc = par_model_probe(path, &fmt, &c, err, n);
  if (rc) return rc;
  const par_gpt_config_t *mc = par_gpt_config(model);
  if (!same_config(&c, mc))
    return fail(err, n, STRATA_ESHAPE,
                "%s '%s' holds layers=%d hidden=%d heads=%d seq=%d vocab=%d, the model is layers=%d "
                "hidden=%d heads=%d seq=%d vocab=%d",
                par_model_format_name(fmt), path, c.layers, c.hidden, c.heads, c.seq, c.vocab,
                mc->layers, mc->hidden, mc->heads, mc->seq, mc->vocab);
  if (fmt == PAR_MODEL_STRATA) return strata_read(path, model, err, n);
  if ((rc = map_file(path, &m, err, n))) return rc;
  rc = fmt == PAR_MODEL_LLMC ? llmc_read(&m, path, model, err, n) : st_read(&m, path, model, err, n);
  unmap(&m);
  return rc;
}

/* ------------------------------------------------------------ writing */

/* Writes to "<path>.tmp" and renames, as checkpoints do. */
typedef struct {
  FILE *f;
  char tmp[4200];
  const char *path;
} out_t;

static int out_open(out_t *o, const char *path, char *err, size_t n) {
  o->path = path;
  snprintf(o->tmp, sizeof o->tmp, "%s.tmp", path);
  if (!(o->f = fopen(o->tmp, "wb")))
    return fail(err, n, STRATA_EIO, "cannot write '%s': %s", o->tmp, strerror(errno));
  return STRATA_OK;
}

static int out_close(out_t *o, int rc, char *err, size_t n) {
  if (!o->f) return rc;
  int bad = ferror(o->f);
  if (fflush(o->f) != 0 || fsync(fileno(o->f)) != 0) bad = 1;
  int e = errno;
  if (fclose(o->f) != 0) bad = 1, e = errno;
  o->f = NULL;
  if (rc == STRATA_OK && bad) rc = fail(err, n, STRATA_EIO, "writing '%s': %s", o->tmp, strerror(e));
  if (rc == STRATA_OK && rename(o->tmp, o->path) != 0)
    rc = fail(err, n, STRATA_EIO, "cannot move '%s' to '%s': %s", o->tmp, o->path, strerror(errno));
  if (rc != STRATA_OK) unlink(o->tmp);
  return rc;
}

static void put_values(FILE *f, const float *x, size_t n, int bf16) {
  if (!bf16) {
    fwrite(x, 4, n, f);
    return;
  }
  uint16_t buf[4096];
  for (size_t i = 0; i < n; i += 4096) {
    size_t k = n - i < 4096 ? n - i : 4096;
    for (size_t j = 0; j < k; j++) buf[j] = strata_f32_to_bf16(x[i + j]);
    fwrite(buf, 2, k, f);
  }
}

static int llmc_write(const char *path, par_gpt_t *model, int bf16, char *err, size_t n) {
  const par_gpt_config_t *c = par_gpt_config(model);
  llmc_hdr_t h = {bf16 ? 5 : 3, c->seq, c->vocab, c->layers, c->heads, c->hidden,
                  (c->vocab + 127) / 128 * 128}; /* llm.c pads to a multiple of 128 */
  int32_t hd[256] = {LLMC_MAGIC, h.version, h.maxT, h.V, h.L, h.NH, h.C, h.Vp};
  size_t off[K_N + 1];
  llmc_offsets(&h, off);
  /* Views in llm.c's order: by place in the file. */
  int nv = par_gpt_num_views(model);
  size_t *place = malloc((size_t)nv * sizeof *place);
  int *order = malloc((size_t)nv * sizeof *order);
  if (!place || !order) {
    free(place), free(order);
    return fail(err, n, STRATA_ENOMEM, "out of memory");
  }
  for (int i = 0; i < nv; i++) place[i] = llmc_place(par_gpt_view(model, i), off), order[i] = i;
  for (int i = 1; i < nv; i++) /* insertion sort: a few hundred views */
    for (int j = i; j > 0 && place[order[j - 1]] > place[order[j]]; j--) {
      int t = order[j];
      order[j] = order[j - 1], order[j - 1] = t;
    }
  out_t o;
  int rc = out_open(&o, path, err, n);
  const float *params = par_gpt_params(model, NULL);
  if (rc == STRATA_OK) {
    fwrite(hd, sizeof hd, 1, o.f);
    for (int i = 0; i < nv; i++) {
      const par_gpt_view_t *v = par_gpt_view(model, order[i]);
      put_values(o.f, params + v->offset, v->numel, bf16);
      if (!strcmp(v->name, "wte")) { /* the padded rows */
        size_t pad = (size_t)(h.Vp - h.V) * (size_t)h.C;
        static const float zeros[1024];
        for (size_t k = 0; k < pad; k += 1024) put_values(o.f, zeros, pad - k < 1024 ? pad - k : 1024, bf16);
      }
    }
  }
  free(place), free(order);
  return out_close(&o, rc, err, n);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int st_write(const char *path, par_gpt_t *model, char *err, size_t n) {
  const par_gpt_config_t *c = par_gpt_config(model);
  int nv = par_gpt_num_views(model), rc = STRATA_OK;
  char **names = calloc((size_t)nv, sizeof *names);
  int *tr = calloc((size_t)nv, sizeof *tr), *view_of = calloc((size_t)nv, sizeof *view_of);
  size_t hcap = 4096 + (size_t)nv * 160, hl = 0;
  char *hdr = malloc(hcap);
  float *tbuf = NULL;
  out_t o = {0};
  if (!names || !tr || !view_of || !hdr) {
    rc = fail(err, n, STRATA_ENOMEM, "out of memory");
    goto done;
  }
  /* Tensors sorted by name, as the safetensors library writes them. */
  for (int i = 0; i < nv; i++) {
    char nm[128];
    int t;
    hf_name(par_gpt_view(model, i)->name, nm, sizeof nm, &t);
    if (!(names[i] = malloc(strlen(nm) + 8))) {
      rc = fail(err, n, STRATA_ENOMEM, "out of memory");
      goto done;
    }
    memcpy(names[i], nm, strlen(nm) + 1);
    memcpy(names[i] + strlen(nm) + 1, &i, sizeof i); /* the view, after the NUL */
  }
  qsort(names, (size_t)nv, sizeof *names, cmp_str);
  hl = (size_t)snprintf(hdr, hcap,
                        "{\"__metadata__\":{\"format\":\"pt\",\"n_head\":\"%d\",\"n_layer\":\"%d\","
                        "\"n_embd\":\"%d\",\"n_positions\":\"%d\",\"vocab_size\":\"%d\"}",
                        c->heads, c->layers, c->hidden, c->seq, c->vocab);
  size_t off = 0;
  for (int i = 0; i < nv; i++) {
    memcpy(&view_of[i], names[i] + strlen(names[i]) + 1, sizeof(int));
    const par_gpt_view_t *v = par_gpt_view(model, view_of[i]);
    char nm[128];
    hf_name(v->name, nm, sizeof nm, &tr[i]);
    int64_t d0 = tr[i] ? v->shape[1] : v->shape[0], d1 = tr[i] ? v->shape[0] : v->shape[1];
    if (v->ndim == 2)
      hl += (size_t)snprintf(hdr + hl, hcap - hl, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld,%lld],\"data_offsets\":[%zu,%zu]}",
                             nm, (long long)d0, (long long)d1, off, off + 4 * v->numel);
    else
      hl += (size_t)snprintf(hdr + hl, hcap - hl, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld],\"data_offsets\":[%zu,%zu]}",
                             nm, (long long)d0, off, off + 4 * v->numel);
    off += 4 * v->numel;
  }
  hl += (size_t)snprintf(hdr + hl, hcap - hl, "}");
  while (hl % 8) hdr[hl++] = ' '; /* the data starts 8-byte aligned */
  if ((rc = out_open(&o, path, err, n))) goto done;
  uint64_t h64 = hl;
  fwrite(&h64, 8, 1, o.f);
  fwrite(hdr, 1, hl, o.f);
  const float *params = par_gpt_params(model, NULL);
  for (int i = 0; i < nv; i++) {
    const par_gpt_view_t *v = par_gpt_view(model, view_of[i]);
    const float *x = params + v->offset;
    if (!tr[i]) {
      fwrite(x, 4, v->numel, o.f);
      continue;
    }
    size_t rows = (size_t)v->shape[0], cols = (size_t)v->shape[1];
    if (!(tbuf = realloc(tbuf, v->numel * sizeof *tbuf))) {
      rc = fail(err, n, STRATA_ENOMEM, "out of memory");
      break;
    }
    for (size_t r = 0; r < rows; r++)
      for (size_t k = 0; k < cols; k++) tbuf[k * rows + r] = x[r * cols + k];
    fwrite(tbuf, 4, v->numel, o.f);
  }
  rc = out_close(&o, rc, err, n);
done:
  for (int i = 0; names && i < nv; i++) free(names[i]);
  free(names), free(tr), free(view_of), free(hdr), free(tbuf);
  return rc;
}

static int strata_write(const char *path, par_gpt_t *model, char *err, size_t n) {
  par_ckpt_t *c = NULL;
  char name[300], desc[256];
  const par_gpt_config_t *mc = par_gpt_config(model);
  int rc = par_ckpt_create(path, MPI_COMM_SELF, 0, &c, err, n);
  if (rc) return rc;
  const float *params = par_gpt_params(model, NULL);
  uint64_t bytes = 0;
  for (int i = 0; i < par_gpt_num_views(model); i++) bytes += 4 * par_gpt_view(model, i)->numel + 4096;
  rc = par_ckpt_reserve(c, bytes + (256 << 10));
  for (int i = 0; rc == STRATA_OK && i < par_gpt_num_views(model); i++) {
    const par_gpt_view_t *v = par_gpt_view(model, i);
    ckpt_array_name(CKPT_FORMAT_VERSION, 'p', "", v->name, name, sizeof name);
    rc = par_ckpt_write(c, name, v->ndim, v->shape, 0, (int64_t)v->numel, params + v->offset);
  }
  snprintf(desc, sizeof desc, "layers=%d hidden=%d heads=%d seq=%d vocab=%d", mc->layers, mc->hidden,
           mc->heads, mc->seq, mc->vocab);
  int64_t zero = 0, ver = CKPT_FORMAT_VERSION;
  if (rc == STRATA_OK) rc = par_ckpt_set_str(c, "format", CKPT_FORMAT);
  if (rc == STRATA_OK) rc = par_ckpt_set_i64(c, "format_version", &ver, 1);
  if (rc == STRATA_OK) rc = par_ckpt_set_str(c, "model", desc);
  if (rc == STRATA_OK) rc = par_ckpt_set_i64(c, "step", &zero, 1);
  if (rc == STRATA_OK) rc = par_ckpt_set_str(c, "contents", "weights");
  if (rc == STRATA_OK) rc = par_ckpt_commit(c);
  if (rc != STRATA_OK) fail(err, n, rc, "%s", par_ckpt_error(c));
  par_ckpt_close(c);
  return rc;
}

int par_model_write(const char *path, par_model_format_t fmt, int bf16, par_gpt_t *model, char *err,
                    size_t n) {
  if (!path || !model) return fail(err, n, STRATA_EINVAL, "par_model_write: NULL argument");
  if (bf16 && fmt != PAR_MODEL_LLMC)
    return fail(err, n, STRATA_EUNSUPPORTED, "bf16 weights: only llm.c model files (version 5) hold them");
  switch (fmt) {
  case PAR_MODEL_STRATA: {
    int rc = mpi_ready(path, err, n);
    return rc ? rc : strata_write(path, model, err, n);
  }
  case PAR_MODEL_LLMC: return llmc_write(path, model, bf16, err, n);
  case PAR_MODEL_SAFETENSORS: return st_write(path, model, err, n);
  }
  return fail(err, n, STRATA_EINVAL, "par_model_write: format %d", (int)fmt);
}
