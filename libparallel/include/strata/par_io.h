/* strata/par_io.h: data, metrics and checkpoints (HDF5). Included from strata/parallel.h.
 *
 * Three independent parts, each an opaque handle with create/destroy:
 *
 *   par_markov_*  a seeded sparse Markov source over bytes whose entropy rate
 *                 is known exactly, the default training corpus: a run can
 *                 say how far its loss is from the best possible.
 *   par_data_*    token streams (generated corpus, byte text files, raw
 *                 uint16/uint32 token files, llm.c .bin shards), a
 *                 train/validation split and deterministic shuffled batches
 *                 whose position is one integer (part of the training state).
 *   par_metrics_* an HDF5 file with one extendible 1-D dataset per metric and
 *                 string attributes describing the run (written by one rank).
 *   par_tokenizer_* GPT-2's byte-level BPE: decode from llm.c's tokenizer file
 *                 or vocab.json, encode with vocab.json + merges.txt.
 *   par_model_*   GPT-2 weights in and out of a par_gpt: llm.c model files,
 *                 Hugging Face safetensors, strata checkpoints.
 *   par_ckpt_*    HDF5 checkpoints: named fp32 arrays with their global shape,
 *                 each rank writing/reading a contiguous range of the
 *                 flattened array (parallel HDF5, collective), Fletcher32
 *                 checksums, written to "<path>.tmp" and renamed when complete.
 *
 * Functions that can fail before a handle exists take an error buffer
 * (err, errlen; may be NULL/0) and write one line naming the path and what
 * is wrong; afterwards the handle keeps its last error (par_*_error). */
#ifndef STRATA_PAR_IO_H
#define STRATA_PAR_IO_H

#include <stddef.h>
#include <stdint.h>
#include <mpi.h>
#include <strata/par_gpt.h>
#include <strata/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- Markov source */

/* A first-order Markov chain over the 256 byte values. Each state has
 * `fanout` distinct successors (state s always reaches s+1 mod 256, so the
 * chain is irreducible); their probabilities are w_j / sum w with
 * w_j = (-ln u_j)^skew, u_j uniform: skew = 0 gives uniform rows (entropy
 * rate exactly ln(fanout)), skew = 1 Dirichlet(1) rows. */
typedef struct par_markov par_markov_t;
typedef struct {
  uint64_t seed; /* table seed */
  int fanout;    /* successors per state, 1..256 */
  double skew;   /* >= 0, see above */
} par_markov_options_t;
#define PAR_MARKOV_DEFAULTS {.seed = 1234, .fanout = 8, .skew = 1.0}

/* Builds the table and its stationary distribution (power iteration on the
 * lazy chain (P+I)/2, which has the same fixed point and always converges).
 * opts NULL: defaults. Caller destroys *out. EINVAL on bad options. */
STRATA_API int par_markov_create(const par_markov_options_t *opts, par_markov_t **out, char *err,
                                 size_t errlen);
STRATA_API void par_markov_destroy(par_markov_t *m);
/* Entropy rate H = -sum_i pi_i sum_j P_ij ln P_ij, in nats per byte. */
STRATA_API double par_markov_entropy_rate(const par_markov_t *m);
/* P(next = to | current = from). */
STRATA_API double par_markov_prob(const par_markov_t *m, int from, int to);
/* Stationary probability of state s. */
STRATA_API double par_markov_stationary(const par_markov_t *m, int s);
/* Writes n bytes of a sample path to out (borrowed), started from a state
 * drawn from the stationary distribution; `seed` keys the path. */
STRATA_API void par_markov_generate(const par_markov_t *m, uint64_t seed, size_t n, uint8_t *out);

/* ---------------------------------------------------------------- data */

typedef enum {
  PAR_DATA_MARKOV = 0, /* generated corpus (par_markov), vocabulary 256 */
  PAR_DATA_TEXT,       /* byte-level text file(s), vocabulary 256 */
  PAR_DATA_U16,        /* raw little-endian uint16 tokens, no header */
  PAR_DATA_U32,        /* raw little-endian uint32 tokens, no header */
  PAR_DATA_LLMC,       /* llm.c .bin shards: 256 int32 header (20240520, 1, ntok), uint16 */
  PAR_DATA_AUTO,       /* llm.c if the file starts with its magic, else by extension:
                          .u16 / .u32 tokens, anything else text */
} par_data_format_t;

typedef enum { PAR_SPLIT_TRAIN = 0, PAR_SPLIT_VAL = 1 } par_split_t;

typedef struct {
  par_data_format_t format;
  const char *path;     /* file or glob pattern (shards, sorted); unused for MARKOV */
  const char *val_path; /* optional separate validation file/glob; NULL: split `path` */
  double val_fraction;  /* share of each shard kept for validation when val_path is NULL */
  int seq;              /* T: tokens per sample (each sample reads T+1 tokens) */
  uint64_t seed;        /* shuffling seed (and the corpus path seed for MARKOV) */
  size_t markov_tokens; /* size of the generated corpus (train + val) */
  par_markov_options_t markov;
} par_data_options_t;
#define PAR_DATA_DEFAULTS                                                                          \
  {.format = PAR_DATA_MARKOV, .val_fraction = 0.1, .seq = 64, .seed = 1,                          \
   .markov_tokens = (size_t)1 << 22, .markov = PAR_MARKOV_DEFAULTS}

typedef struct par_data par_data_t;

/* Opens (memory-maps) or generates the data. Errors name the path and the
 * problem: missing file, empty file, size not a multiple of the token width,
 * bad llm.c magic/version/token count, too few tokens for one sample of
 * seq+1 tokens in a split. Caller destroys *out. */
STRATA_API int par_data_open(const par_data_options_t *opts, par_data_t **out, char *err,
                             size_t errlen);
STRATA_API void par_data_destroy(par_data_t *d);
STRATA_API const char *par_data_error(const par_data_t *d);
/* When the vocabulary (1 + the largest token) rests on a token that occurs
 * a few times far above all the others (a stray id in a token file), a
 * sentence saying so; else "". Returns buf. */
STRATA_API const char *par_data_vocab_note(const par_data_t *d, char *buf, size_t n);
/* "seed=1 seq=64 train_samples=... val_samples=...": what decides the order
 * of the samples, kept in checkpoints so that a resume can say what changed.
 * Returns buf. */
STRATA_API const char *par_data_describe(const par_data_t *d, char *buf, size_t n);

/* 256 for bytes, else 1 + the largest token found in the files. */
STRATA_API int par_data_vocab(const par_data_t *d);
/* Entropy rate of the source in nats/token (MARKOV); negative when unknown. */
STRATA_API double par_data_entropy_rate(const par_data_t *d);
/* Tokens and samples (non-overlapping windows of seq+1 tokens sharing
 * their boundary token) in a split. */
STRATA_API uint64_t par_data_tokens(const par_data_t *d, par_split_t split);
STRATA_API uint64_t par_data_samples(const par_data_t *d, par_split_t split);

/* Fills inputs and targets ([batch][seq] int32, borrowed) with samples
 * first .. first+batch-1 of a split. Training samples are the epochs of a
 * shuffled order: sample g is window perm_{seed, g / N}(g mod N) of the N
 * training windows, a keyed bijection (no table), so any position can be
 * reached in O(1). Validation samples are taken in order (mod N). */
STRATA_API int par_data_fill(const par_data_t *d, par_split_t split, uint64_t first, int batch,
                             int32_t *inputs, int32_t *targets);

/* The training position: how many training samples all data-parallel ranks
 * together have consumed. Save it in checkpoints; restore with set. */
STRATA_API uint64_t par_data_position(const par_data_t *d);
STRATA_API void par_data_set_position(par_data_t *d, uint64_t position);
/* Next training batch of data-parallel rank `rank` of `ranks` (each with its
 * own handle at the same position): samples position + rank*batch + b; then
 * the position advances by ranks*batch. */
STRATA_API int par_data_next(par_data_t *d, int rank, int ranks, int batch, int32_t *inputs,
                             int32_t *targets);

/* ---------------------------------------------------------------- metrics */

typedef struct par_metrics par_metrics_t;

/* Creates (truncates) an HDF5 file at path with one extendible float64
 * dataset per name (names borrowed, copied). Call from one rank only. Each
 * append opens, extends, writes and closes the file, so h5dump and h5py can
 * read it while the run goes on, and a killed run leaves every row written. */
STRATA_API int par_metrics_create(const char *path, const char *const *names, int count,
                                  par_metrics_t **out, char *err, size_t errlen);
/* Opens an existing metrics file to append to it (a resumed run): the
 * names must all exist as metrics; every metric is cut back to its first
 * `keep` rows (rows after the checkpoint a run resumes from). A missing
 * file is created as par_metrics_create does. */
STRATA_API int par_metrics_open(const char *path, const char *const *names, int count, size_t keep,
                                par_metrics_t **out, char *err, size_t errlen);
STRATA_API void par_metrics_destroy(par_metrics_t *m);
STRATA_API const char *par_metrics_error(const par_metrics_t *m);
/* Appends rows: values is [rows][count] in the order of the names; NaN marks
 * a metric not measured at that row (e.g. val_loss between evaluations). */
STRATA_API int par_metrics_append(par_metrics_t *m, const double *values, int rows);
/* Sets a string attribute on the root group (replacing one of that name). */
STRATA_API int par_metrics_set_attr(par_metrics_t *m, const char *name, const char *value);
/* Sets the unit of metric `name` (a string attribute "unit" on its dataset,
 * e.g. "nats/token", "bytes", "tokens/s"; replaced if set). `strata plot`
 * draws the metrics of one unit in one panel. ENOTFOUND for an unknown name. */
STRATA_API int par_metrics_set_unit(par_metrics_t *m, const char *name, const char *unit);

/* Reads a whole metric of an existing metrics file into *values (malloc'd,
 * caller frees) and its length into *n. ENOTFOUND for an unknown name. */
STRATA_API int par_metrics_read(const char *path, const char *name, double **values, size_t *n,
                                char *err, size_t errlen);
/* Reads string attribute `name` of a metrics file into *value (malloc'd,
 * caller frees). ENOTFOUND when absent. */
STRATA_API int par_metrics_read_attr(const char *path, const char *name, char **value, char *err,
                                     size_t errlen);
/* Reads the unit of metric `name` into *unit (malloc'd, caller frees).
 * ENOTFOUND when the metric is absent or has no unit (files written before
 * units were recorded). */
STRATA_API int par_metrics_read_unit(const char *path, const char *name, char **unit, char *err,
                                     size_t errlen);
/* Lists the metric names of a file: *names is a malloc'd array of malloc'd
 * strings (caller frees each and the array). */
STRATA_API int par_metrics_names(const char *path, char ***names, int *count, char *err,
                                 size_t errlen);

/* ---------------------------------------------------------------- checkpoints */

typedef struct par_ckpt par_ckpt_t;

#define PAR_CKPT_MAX_DIMS 4

/* Starts writing a checkpoint: creates "<path>.tmp" collectively over comm
 * (parallel HDF5 needs the communicator; MPI must be initialised). Every
 * rank of comm calls every par_ckpt_* function below in the same order.
 * Caller ends with par_ckpt_commit (rename into place) or par_ckpt_close
 * (abandon: the .tmp file is removed, `path` is untouched).
 * timeout_s > 0 (with more than one rank) bounds every wait on the other
 * ranks: a status exchange they do not reach in time fails with ETIMEOUT
 * (the job must then be ended), and a collective step inside HDF5, which
 * cannot be left, is reported to par_set_fatal_handler's handler
 * (parallel.h) with a message naming the checkpoint and the step. 0 waits
 * forever. */
STRATA_API int par_ckpt_create(const char *path, MPI_Comm comm, double timeout_s,
                               par_ckpt_t **out, char *err, size_t errlen);
/* Opens an existing checkpoint for reading, collectively (timeout_s as
 * for par_ckpt_create). Truncated or not HDF5: ECORRUPT with a message
 * naming the path. */
STRATA_API int par_ckpt_open(const char *path, MPI_Comm comm, double timeout_s,
                             par_ckpt_t **out, char *err, size_t errlen);
/* Reserves `bytes` for the checkpoint being written before anything is
 * written into it (rank 0's value counts): a file system or quota without
 * room fails here with EIO and a message naming the bytes needed, the
 * bytes free and the errno, while every rank can still leave cleanly.
 * Without it a full disk hangs the job: a write that fails inside one of
 * parallel HDF5's collective steps leaves the other ranks in that step. */
STRATA_API int par_ckpt_reserve(par_ckpt_t *c, uint64_t bytes);
/* Writes array `name` of global shape shape[0..ndim) (row-major); this rank
 * supplies elements [offset, offset+count) of the flattened array from data
 * (borrowed). The ranges of all ranks must cover the array; a rank may have
 * count 0 (it still calls). Chunked with a Fletcher32 checksum. */
STRATA_API int par_ckpt_write(par_ckpt_t *c, const char *name, int ndim, const int64_t *shape,
                              int64_t offset, int64_t count, const float *data);
/* Reads elements [offset, offset+count) of array `name` into data,
 * after checking that its stored shape equals shape[0..ndim): ENOTFOUND when
 * absent, ESHAPE naming both shapes. A checksum failure on any rank fails
 * the call on every rank (ECORRUPT). */
STRATA_API int par_ckpt_read(par_ckpt_t *c, const char *name, int ndim, const int64_t *shape,
                             int64_t offset, int64_t count, float *data);
/* The same for several flat ranges [offsets[i], offsets[i] + counts[i])
 * (ascending and disjoint), their elements back to back in data: a rank's
 * slice of a tensor split over ranks (tensor parallelism's column blocks,
 * the q, k and v rows of this rank's heads). */
STRATA_API int par_ckpt_write_ranges(par_ckpt_t *c, const char *name, int ndim, const int64_t *shape, int nranges,
                                     const int64_t *offsets, const int64_t *counts, const float *data);
STRATA_API int par_ckpt_read_ranges(par_ckpt_t *c, const char *name, int ndim, const int64_t *shape, int nranges,
                                    const int64_t *offsets, const int64_t *counts, float *data);
/* Stored shape of `name`: *ndim and shape[0..PAR_CKPT_MAX_DIMS). */
STRATA_API int par_ckpt_shape(par_ckpt_t *c, const char *name, int *ndim, int64_t *shape);
/* Attributes on the root group. Rank 0's value is the one stored. */
STRATA_API int par_ckpt_set_str(par_ckpt_t *c, const char *name, const char *value);
STRATA_API int par_ckpt_set_i64(par_ckpt_t *c, const char *name, const int64_t *values, int n);
/* *value: malloc'd, caller frees. */
STRATA_API int par_ckpt_get_str(par_ckpt_t *c, const char *name, char **value);
/* Reads exactly n values; ESHAPE if the attribute holds another count. */
STRATA_API int par_ckpt_get_i64(par_ckpt_t *c, const char *name, int64_t *values, int n);
/* ESHAPE naming the attribute and both values when the stored string
 * differs from `expected` (e.g. the model configuration). */
STRATA_API int par_ckpt_expect_str(par_ckpt_t *c, const char *name, const char *expected);
/* Closes the .tmp file, makes it durable (fsync) and renames it onto `path`
 * (rank 0). The status is the same on every rank. The handle stays valid
 * for par_ckpt_error; free it with par_ckpt_close. */
STRATA_API int par_ckpt_commit(par_ckpt_t *c);
/* Frees the handle; a checkpoint being written is abandoned (.tmp removed).
 * NULL is a no-op. */
STRATA_API void par_ckpt_close(par_ckpt_t *c);
STRATA_API const char *par_ckpt_error(const par_ckpt_t *c);

/* ---------------------------------------------------------------- tokenizer */

typedef struct par_tokenizer par_tokenizer_t;

/* Opens llm.c's gpt2_tokenizer.bin (decoding only) or GPT-2's vocab.json
 * (decoding; encoding too when merges.txt lies beside it), told apart by
 * their contents. Caller destroys *out. */
STRATA_API int par_tokenizer_open(const char *path, par_tokenizer_t **out, char *err, size_t errlen);
STRATA_API void par_tokenizer_destroy(par_tokenizer_t *t);
STRATA_API int par_tokenizer_vocab(const par_tokenizer_t *t);
/* The end-of-text token (GPT-2: 50256), or -1 when the tokenizer has none. */
STRATA_API int par_tokenizer_eot(const par_tokenizer_t *t);
STRATA_API int par_tokenizer_can_encode(const par_tokenizer_t *t);
/* The bytes of token id (*len of them; owned by the tokenizer), NULL when
 * id is out of range. */
STRATA_API const char *par_tokenizer_token(const par_tokenizer_t *t, int id, size_t *len);
/* Writes the bytes of ids[0..n) into buf (cap bytes, NUL-terminated, cut
 * when short) and returns their total length (ids out of range skipped). */
STRATA_API size_t par_tokenizer_decode(const par_tokenizer_t *t, const int32_t *ids, size_t n,
                                       char *buf, size_t cap);
/* GPT-2's encoding of text[0..len) (UTF-8): *ids malloc'd (caller frees),
 * *n of them. EUNSUPPORTED without merges.txt. */
STRATA_API int par_tokenizer_encode(par_tokenizer_t *t, const char *text, size_t len, int32_t **ids,
                                    size_t *n, char *err, size_t errlen);

/* ---------------------------------------------------------------- model files */

typedef enum {
  PAR_MODEL_STRATA = 0, /* a strata checkpoint (HDF5): params/<view> arrays, attribute "model" */
  PAR_MODEL_LLMC,       /* llm.c's gpt2_124M.bin: int32 header (20240326, version 3 fp32 or 5
                           bf16), parameters kind by kind, vocabulary padded to Vp rows */
  PAR_MODEL_SAFETENSORS /* Hugging Face GPT-2 model.safetensors (F32, BF16, F16 read; F32
                           written), Conv1D weights stored (in, out) */
} par_model_format_t;

STRATA_API const char *par_model_format_name(par_model_format_t f);
/* What a model file is (by its first bytes, not its name) and the model it
 * holds. For safetensors the heads come from the header's metadata
 * ("n_head", which strata writes) or a config.json beside the file. A
 * strata checkpoint is read through MPI-IO: MPI must be initialised. */
STRATA_API int par_model_probe(const char *path, par_model_format_t *fmt, par_gpt_config_t *cfg,
                               char *err, size_t errlen);
/* Reads the weights of a model file into model, whose configuration must
 * be the file's (ESHAPE naming both otherwise). bf16 and f16 weights are
 * widened exactly; llm.c's padded vocabulary rows beyond V are not read. */
STRATA_API int par_model_read(const char *path, par_gpt_t *model, char *err, size_t errlen);
/* Writes model's weights to path in fmt (bf16: llm.c version 5, else fp32),
 * through "<path>.tmp" renamed when complete. llm.c files pad the
 * vocabulary with zero rows to a multiple of 128; safetensors carry the
 * configuration in their metadata. Reading what this wrote and writing it
 * again gives the same bytes. */
STRATA_API int par_model_write(const char *path, par_model_format_t fmt, int bf16, par_gpt_t *model,
                               char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
