/* strata/par_gpt.h: the GPT model. Included from strata/parallel.h; it also
 * stands alone (it needs neither MPI nor HDF5).
 *
 * A GPT-2 style decoder (par_gpt_config_t below): token and
 * position embeddings, L blocks of pre-layernorm causal self-attention and
 * MLP (4h, GELU tanh) with residuals, a final layernorm and a language-model
 * head tied to the token embedding, trained with softmax cross-entropy.
 *
 * Parameters and gradients are two flat f32 arrays of the same length, laid
 * out view after view in this order: wte (V,h), wpe (T,h), then for each block
 * l: h.l.ln_1.w, h.l.ln_1.b, h.l.attn.qkv.w (3h,h), h.l.attn.qkv.b,
 * h.l.attn.proj.w (h,h), h.l.attn.proj.b, h.l.ln_2.w, h.l.ln_2.b,
 * h.l.mlp.fc.w (4h,h), h.l.mlp.fc.b, h.l.mlp.proj.w (h,4h), h.l.mlp.proj.b,
 * and last ln_f.w, ln_f.b. Linear weights are (out, in). A block's views are
 * contiguous, so a pipeline stage or a ZeRO-3 gather is one range. Every view
 * is initialised from libtensor's Philox keyed by (seed, view name) at its
 * global element index: N(0, 0.02) for weights and embeddings, N(0,
 * 0.02/sqrt(2L)) for the two residual projections (GPT-2), 1 for layernorm
 * weights, 0 for biases.
 *
 * The model is written layer by layer (embedding, linear, attention, head
 * + loss) so that parallel layouts swap in their own layers: Megatron
 * tensor and sequence parallelism (opts.tp, opts.seq_parallel) inside the
 * layers, pipeline stages (opts.stages) over the blocks.
 *
 * Usage (tests/gpt/example_train.c builds and runs this):
 *
 *   par_gpt_config_t cfg = {.layers = 2, .hidden = 32, .heads = 4, .seq = 16, .vocab = 32};
 *   par_gpt_t *m;
 *   if (par_gpt_create(&m, &cfg, 42)) puts(par_gpt_create_error());
 *   size_t n;
 *   float *p = par_gpt_params(m, &n), *g = par_gpt_grads(m, NULL), loss;
 *   par_gpt_zero_grad(m);
 *   par_gpt_forward(m, tokens, targets, B, T, &loss);   // int32 B*T each
 *   par_gpt_backward(m);                                 // g += dloss/dp
 *   for (size_t i = 0; i < n; i++) p[i] -= lr * g[i];    // or liboptim
 *   par_gpt_destroy(m);
 *
 * Threads: the model computes through libtensor, whose OpenMP threads own
 * the cores; run with OMP_WAIT_POLICY=PASSIVE (see libtensor/README.md). A
 * model is used by one thread at a time. */
#ifndef STRATA_PAR_GPT_H
#define STRATA_PAR_GPT_H

#include <stddef.h>
#include <stdint.h>
#include <strata/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A GPT-2 style decoder: L blocks of pre-layernorm attention + MLP (4h, GELU),
 * token and position embeddings, final layernorm, LM head tied to the token
 * embedding. */
typedef struct {
  int layers;    /* L */
  int hidden;    /* h (model width) */
  int heads;     /* attention heads; hidden % heads == 0 */
  int seq;       /* T, maximum sequence length (position table size) */
  int vocab;     /* V */
  int recompute; /* 1: recompute each block's activations in backward */
} par_gpt_config_t;
#define PAR_GPT_CONFIG_DEFAULTS {.layers = 2, .hidden = 64, .heads = 4, .seq = 64, .vocab = 256}

typedef struct par_gpt par_gpt_t;

/* How tensor parallelism splits a parameter over the tensor group (rank r
 * of t): Megatron's 1D layout (Shoeybi et al., arXiv 1909.08053, sec. 3). */
typedef enum {
  PAR_GPT_SPLIT_NONE = 0, /* replicated: layernorms, row-parallel biases, embeddings */
  PAR_GPT_SPLIT_ROWS,     /* rows [r n/t, (r+1) n/t): column-parallel weights and their biases */
  PAR_GPT_SPLIT_COLS,     /* columns [r n/t, (r+1) n/t): row-parallel weights */
  PAR_GPT_SPLIT_QKV,      /* rows of each third (q, k, v): the heads [r NH/t, (r+1) NH/t) */
  PAR_GPT_SPLIT_BLOCK     /* 2D, 2.5D, 3D (par_gpt_options_t.tp_mode): the block that `block` describes */
} par_gpt_split_t;

/* A rank's block of a parameter under the 2D, 2.5D and 3D layouts: of the
 * whole tensor's rows, cut in `parts` equal parts of part_rows (q, k and v),
 * the rows [row0, row0 + shape[0] / parts) of each part, and the columns
 * [col0, col0 + shape[1]). replica 0 marks the one copy of a block that
 * several ranks hold alike (norms and checkpoints count it once). */
typedef struct {
  int64_t row0, col0, part_rows;
  int parts, replica;
} par_gpt_block_t;

/* One named parameter view into the flat arrays. */
typedef struct {
  const char *name;    /* e.g. "h.3.attn.qkv.w"; owned by the model */
  size_t offset;       /* first element in the flat params/grads arrays */
  size_t numel;
  int ndim;            /* 1 or 2 */
  int64_t shape[2];    /* the shape this rank holds (the global one without tensor parallelism) */
  int decay;           /* 1: weight decay applies (matrices, embeddings); 0: biases, layernorm */
  int64_t global[2];   /* the global shape */
  int split;           /* par_gpt_split_t over the tensor group */
  par_gpt_block_t block; /* split PAR_GPT_SPLIT_BLOCK: which block of the whole this rank holds */
} par_gpt_view_t;

/* Where and how the model computes. */
typedef struct {
  int threads;     /* CPU threads; 0: OpenMP's default */
  int device;      /* -1: CPU (default); N >= 0: cuda:N (STRATA_EUNSUPPORTED without CUDA) */
  int bf16_matmul; /* CUDA: GEMMs with bf16 inputs and f32 accumulation */
  /* 1: the model allocates no parameters or gradients; the caller binds
   * each region's storage (par_gpt_bind) before it is used, and the flat
   * accessors (par_gpt_params, par_gpt_grads) return NULL. The training
   * engine uses this to shard them (ZeRO). */
  int external;
  /* Megatron tensor parallelism (1D) over this group of ranks (borrowed;
   * NULL: none): the attention heads and the MLP's hidden units are split
   * over it, QKV and the first MLP projection column-parallel, the
   * attention output and second MLP projection row-parallel, each rank
   * holding its slice of the serial model (initialised by global index, so
   * equal to the serial model's values); per block one allreduce of the
   * (B, T, h) activations in forward and one in backward for the attention
   * and for the MLP. The embeddings, layernorms and head are replicated.
   * The heads must divide by the group's size. Collective over the group:
   * every rank calls forward and backward together. */
  struct comm *tp;
  /* With tp: Megatron's sequence parallelism (Korthikanti et al., arXiv
   * 2205.05198, sec. 4.2.2): each tensor rank holds the residual stream of
   * its chunk of the B T tokens and runs the layernorms and residual adds
   * on it; the allreduces become all-gathers before the column-parallel
   * layers and reduce-scatters after the row-parallel ones (the same
   * bytes), and the activations kept per rank fall by the group's size.
   * B T must divide by it. */
  int seq_parallel;
  /* Pipeline placement (Narayanan et al., arXiv 2104.04473, sec. 2.2):
   * this rank is stage `stage` of `stages` (0 or 1: the whole model), with
   * `interleave` chunks (0 or 1: one) of L / (stages interleave)
   * contiguous blocks, chunk c being virtual stage c stages + stage. The
   * model then computes only through par_gpt_stage_forward/backward, and
   * keeps the activations of its own blocks only (the first virtual stage
   * also embeds, the last one holds the head and loss; both use wte). */
  int stages, stage, interleave;
  /* With recompute and tp (without seq_parallel, whose inputs are split
   * already): DeepSpeed's partitioned activation checkpoints (Rajbhandari
   * et al., arXiv 1910.02054 sec. 6.1): each block's kept input is split
   * over the tensor group (each rank keeps B T / t of its rows) and
   * all-gathered before the block is recomputed in backward. */
  int partition_activations;
  /* With tp: the layout of the tensor group (par_tp_mode_t of
   * strata/parallel.h): 0 Megatron's 1D (above); 1 2D (Optimus: SUMMA over
   * a q x q mesh, tp = q^2), 2 2.5D (Tesseract: tp_depth stacked q x q
   * meshes), 3 3D (Bian et al.: a q x q x q cube). Under 2D, 2.5D and 3D
   * every weight is cut in blocks (par_gpt_block_t), the activations by
   * rows (whole sequences: B must divide over the row blocks) and columns,
   * the layernorms' statistics summed along the rows; the embedding and the
   * tied head keep the columns of the residual stream that the rank holds
   * (the whole vocabulary), the logits summed over the ranks that share the
   * rows (strata/par_tplayer.h). CPU, one stage, no sequence or ring
   * parallelism, no partitioned checkpoints in this version. */
  int tp_mode, tp_depth;
  /* Sequence parallelism by ring self-attention (Li et al., arXiv
   * 2105.13120) over this group of sp ranks (borrowed; NULL: none): each
   * rank runs the model on its Tl tokens of every sequence, at positions
   * [rank Tl, (rank + 1) Tl) (the caller passes those tokens and targets,
   * forward's T being Tl), and the attention over the whole sequence by
   * par_ring_attention (strata/par_ring.h). The weights are replicated;
   * their gradients, like data parallelism's, are the caller's to average
   * over the group (each rank's loss is the mean over its tokens). Not with
   * tp or pipeline stages in this version; collective over the group. */
  struct comm *ring;
  /* The head's loss and gradient through libtensor's fused classifier
   * (tensor_classifier_xent: the logits computed chunk by chunk and never
   * stored whole): 0 (default) on a CUDA device, with its default chunk, the
   * CPU keeping the separate ops (its results are unchanged bit for bit);
   * N > 0 fused with chunks of N rows, on the CPU too; -1 never. A fused
   * forward with targets computes the loss and the rows' log-sum-exp only
   * and keeps no logits (par_gpt_logits is then NULL); backward computes
   * each chunk's logits again (one more head GEMM) for their gradient.
   * Forwards without targets (sampling, decoding) compute the whole logits
   * as before. Vocabulary-parallel heads (tp) and 2D/2.5D/3D keep theirs. */
  int head_chunk;
  /* The dtype of the activations and their gradients (a tensor_dtype_t of
   * strata/tensor.h): TENSOR_F32 (0, the default), or on a CUDA device
   * TENSOR_BF16 or TENSOR_F16: the embedding output, the residual streams,
   * the layernorm outputs, qkv, the attention output, the MLP's hidden
   * and GELU outputs and all their gradients are stored in 16 bits (half
   * the activation memory), every kernel accumulating in f32; the
   * parameters and their gradients stay f32, as do the layernorms' mean
   * and rstd, the attention's log-sum-exp, the losses and the head's
   * logits. The GEMMs then take 16-bit operands (the f32 weights rounded
   * to the activations' dtype) and write 16-bit outputs with f32
   * accumulation; attention runs cuDNN's on bf16 q, k, v as they are
   * (f16: strata's f32 kernel on f32 copies). The CPU computes in f32: a
   * 16-bit dtype with device -1 is STRATA_EUNSUPPORTED, as are the layouts
   * that do not take it yet (tensor, sequence or ring parallelism,
   * head_chunk -1). Pipeline stages take it: their boundary buffers
   * (par_gpt_stage_buffer) hold 16-bit activations and gradients. */
  int act_dtype;
} par_gpt_options_t;
#define PAR_GPT_OPTIONS_DEFAULTS                                                                   \
  {.threads = 0, .device = -1, .bf16_matmul = 0, .external = 0, .tp = NULL, .seq_parallel = 0, .stages = 1,     \
   .stage = 0, .interleave = 1, .partition_activations = 0, .ring = NULL, .head_chunk = 0, .act_dtype = 0}

/* Number of parameters of a configuration (the length of the flat arrays):
 * V h + T h + L (12 h^2 + 13 h) + 2 h. 0 if the configuration is invalid. */
STRATA_API size_t par_gpt_param_count(const par_gpt_config_t *cfg);

/* Creates a model on the CPU with default options, parameters initialised
 * from `seed`, gradients zero. Caller destroys it with par_gpt_destroy. On
 * failure *model is NULL and, for an invalid configuration, the status is
 * STRATA_EINVAL (the message is in par_gpt_create_error()). */
STRATA_API int par_gpt_create(par_gpt_t **model, const par_gpt_config_t *cfg, uint64_t seed);
/* The same with options (NULL = defaults). */
STRATA_API int par_gpt_create_ex(par_gpt_t **model, const par_gpt_config_t *cfg,
                                 const par_gpt_options_t *opts, uint64_t seed);
/* The message of the last failed create on this thread. */
STRATA_API const char *par_gpt_create_error(void);
/* Frees everything the model owns; NULL is a no-op. */
STRATA_API void par_gpt_destroy(par_gpt_t *model);
/* The last error of this model ("" if none); owned by the model. */
STRATA_API const char *par_gpt_last_error(const par_gpt_t *model);
/* Under 2D, 2.5D and 3D tensor parallelism: the bytes this rank has sent on
 * the model's tensor-parallel groups (libcomm's counters of its meshes) so
 * far; STRATA_EINVAL under the other layouts. */
STRATA_API int par_gpt_tp_sent(const par_gpt_t *model, uint64_t *sent);

/* Forward pass over B sequences of T <= cfg.seq tokens. tokens and targets
 * are host arrays of B*T int32 (borrowed for the call; ids in [0, V); a
 * target < 0 is ignored). With targets, *loss receives the mean cross-entropy
 * over the counted targets and the activations are kept for
 * par_gpt_backward; with targets NULL only the logits are computed and *loss
 * (may be NULL) is set to NaN. */
STRATA_API int par_gpt_forward(par_gpt_t *model, const int32_t *tokens, const int32_t *targets,
                               int B, int T, float *loss);
/* Backward of the last forward with targets: ACCUMULATES d(mean loss)/d(params)
 * into the flat gradients. STRATA_ESTATE without such a forward. */
STRATA_API int par_gpt_backward(par_gpt_t *model);
/* Multiplies the gradients backward computes by scale (> 0; 1 at creation):
 * the loss scaling of fp16 training (arXiv 1710.03740 sec. 3.2). */
STRATA_API int par_gpt_set_loss_scale(par_gpt_t *model, float scale);
/* Waits until the model's queued device work is done (no-op on the CPU). */
STRATA_API int par_gpt_synchronize(par_gpt_t *model);
/* Sets all gradients to zero. */
STRATA_API int par_gpt_zero_grad(par_gpt_t *model);

/* The flat arrays (owned by the model, valid until destroy; on the model's
 * device; NULL with external storage). *count (may be NULL) receives the
 * number of parameters. */
STRATA_API float *par_gpt_params(par_gpt_t *model, size_t *count);
STRATA_API float *par_gpt_grads(par_gpt_t *model, size_t *count);
/* Logits (B, T, V) of the last forward, on the model's device; owned by the
 * model. NULL after a forward with targets through the fused head
 * (par_gpt_options_t.head_chunk: by default on CUDA devices), which keeps
 * none: forward without targets for them. */
STRATA_API const float *par_gpt_logits(const par_gpt_t *model);
/* The configuration the model was built with. */
STRATA_API const par_gpt_config_t *par_gpt_config(const par_gpt_t *model);
/* The named views, in layout order: view i of n (NULL when out of range). */
STRATA_API int par_gpt_num_views(const par_gpt_t *model);
STRATA_API const par_gpt_view_t *par_gpt_view(const par_gpt_t *model, int i);
/* The view called `name`, or NULL. */
STRATA_API const par_gpt_view_t *par_gpt_find_view(const par_gpt_t *model, const char *name);
/* Current and peak bytes the model allocated on its device (parameters,
 * gradients, activations), from libtensor's memory accountant. */
STRATA_API int par_gpt_memory(const par_gpt_t *model, size_t *current, size_t *peak);
/* Model FLOPs per token of one forward+backward at sequence length T:
 * 6 N + 6 L h T (matmuls, attention scores and values counted once each way). */
STRATA_API double par_gpt_flops_per_token(const par_gpt_config_t *cfg, int T);

/* ---- regions, external storage and hooks (for the training engine) ----
 *
 * The parameters fall into regions that the model uses together, each a
 * contiguous range of the flat layout: region 0 the embeddings (wte, wpe;
 * the tied LM head uses wte too), regions 1..L the blocks, region L+1 the
 * final layernorm. A hook set with par_gpt_set_hook hears, in order, when
 * a region is NEEDed (its parameters must be in place when the hook
 * returns), DONE (not used again until the next NEED) and, in backward,
 * when its GRADS are complete. Per pass: the forward NEEDs region 0, then
 * each block, then L+1, and is DONE with 0 last; the backward NEEDs L+1
 * and 0 (the head), reports GRADS of L+1, then of each block from the last
 * (NEED, GRADS, DONE), and last GRADS and DONE of region 0. A hook that
 * returns an error ends the pass with it. */
typedef enum { PAR_GPT_NEED = 0, PAR_GPT_DONE, PAR_GPT_GRADS } par_gpt_event_t;
typedef int (*par_gpt_hook_t)(void *ctx, par_gpt_event_t ev, int region, int backward);

STRATA_API int par_gpt_num_regions(const par_gpt_t *model);
/* Region r's range of the flat layout and its views (first_view, views). */
STRATA_API int par_gpt_region(const par_gpt_t *model, int r, size_t *offset, size_t *count,
                              int *first_view, int *views);
/* Points region r's parameters and gradients at params and grads (each the
 * region's first element, in the flat layout's order; borrowed; grads may
 * be NULL for forward-only use). */
STRATA_API int par_gpt_bind(par_gpt_t *model, int r, float *params, float *grads);
STRATA_API void par_gpt_set_hook(par_gpt_t *model, par_gpt_hook_t hook, void *ctx);
/* The initial values of flat parameters [offset, offset + count), as
 * par_gpt_create gives them for `seed` (Philox by global index: a shard
 * gets exactly the serial model's values), into out (on the model's device). */
STRATA_API int par_gpt_init_values(par_gpt_t *model, uint64_t seed, size_t offset, size_t count,
                                   float *out);
/* The model's libtensor context (its memory accountant) and device, so that
 * the engine's buffers are counted with the model's. */
STRATA_API struct tensor_ctx *par_gpt_tensor_ctx(par_gpt_t *model);
STRATA_API int par_gpt_device(const par_gpt_t *model);

/* ---- pipeline stages ----
 *
 * A stage (opts.stages > 1) runs one chunk of its blocks over one
 * microbatch at a time; several microbatches can be in flight, each with
 * its own activations in a slot (par_gpt_set_slots). A chunk that is not
 * the first virtual stage starts from the activations written into its
 * PAR_GPT_IN buffer; one that is not the last leaves them in PAR_GPT_OUT.
 * In backward, PAR_GPT_DOUT receives dL/d(output) before the chunk's
 * backward (unless it holds the loss), and PAR_GPT_DIN holds dL/d(input)
 * after it (unless it embeds); those two are one buffer, shared by the
 * slots and overwritten by the next backward (with partitioned activation
 * checkpoints PAR_GPT_IN is shared too: fill it just before the forward). Under sequence parallelism
 * the buffers hold this rank's B T / t tokens. The whole model is the
 * single chunk 0 of a single stage: par_gpt_forward is stage_forward of
 * slot 0, chunk 0.
 *
 *   par_gpt_set_slots(m, 4);
 *   void *in = par_gpt_stage_buffer(m, slot, chunk, PAR_GPT_IN, B, T, &n);
 *   ... receive n activations (of par_gpt_act_dtype) into in ...
 *   par_gpt_stage_forward(m, slot, chunk, tokens, targets, B, T, &loss);
 *   ... later: receive into PAR_GPT_DOUT, par_gpt_stage_backward(m, slot, chunk),
 *   ... send PAR_GPT_DIN ... */
typedef enum { PAR_GPT_IN = 0, PAR_GPT_OUT, PAR_GPT_DOUT, PAR_GPT_DIN } par_gpt_io_t;

/* Room for n microbatches in flight (>= 1; 1 at creation); slots are
 * allocated as they are first used. */
STRATA_API int par_gpt_set_slots(par_gpt_t *model, int n);
/* Forward of chunk `chunk` (0 .. interleave - 1) of this stage over
 * microbatch slot `slot`: tokens (B*T, host) are read when the chunk
 * embeds, targets when it holds the loss (then *loss gets the mean loss;
 * targets NULL computes the logits only, as par_gpt_forward). */
STRATA_API int par_gpt_stage_forward(par_gpt_t *model, int slot, int chunk, const int32_t *tokens,
                                     const int32_t *targets, int B, int T, float *loss);
/* Backward of the chunk over the slot's last forward: accumulates the
 * parameters' gradients and leaves dL/d(input) in PAR_GPT_DIN. */
STRATA_API int par_gpt_stage_backward(par_gpt_t *model, int slot, int chunk);
/* A boundary buffer of the slot's activations for (B, T) (allocated when
 * first asked for), on the model's device; *count elements of the
 * activations' dtype (par_gpt_act_dtype: f32, or bf16 / f16 with
 * opts.act_dtype on a CUDA device). NULL when the
 * chunk has no such boundary (IN of the first virtual stage, OUT and DOUT
 * of the last, DIN of the first). */
STRATA_API void *par_gpt_stage_buffer(par_gpt_t *model, int slot, int chunk, par_gpt_io_t which, int B, int T,
                                       size_t *count);
/* The dtype the model keeps its activations and their gradients in (a
 * tensor_dtype_t: opts.act_dtype as accepted; f32 on the CPU). */
STRATA_API int par_gpt_act_dtype(const par_gpt_t *model);
/* This stage's chunk `chunk` as blocks [*first, *first + *count), and
 * whether it embeds (first virtual stage) or holds the loss (last). */
STRATA_API int par_gpt_stage_chunk(const par_gpt_t *model, int chunk, int *first, int *count, int *embeds,
                                   int *loss);

/* ---- generation ----
 *
 * A KV cache of the model's keys and values at each position, so that each
 * new token costs one row through the blocks:
 *
 *   par_gpt_kv_t *kv;
 *   par_gpt_kv_create(&kv, m, cfg.seq);
 *   par_gpt_kv_append(kv, prompt, n, logits);      // logits of the next token
 *   for (...) {
 *     par_gpt_sample(logits, V, &so, step, &tok);
 *     par_gpt_kv_append(kv, &tok, 1, logits);
 *   }
 */
typedef struct par_gpt_kv par_gpt_kv_t;

/* A cache for up to max_len positions (<= cfg.seq) of model (borrowed; it
 * must outlive the cache). Caller destroys it. */
STRATA_API int par_gpt_kv_create(par_gpt_kv_t **kv, par_gpt_t *model, int max_len);
STRATA_API void par_gpt_kv_destroy(par_gpt_kv_t *kv);
/* Positions held so far; reset empties the cache. */
STRATA_API int par_gpt_kv_len(const par_gpt_kv_t *kv);
STRATA_API void par_gpt_kv_reset(par_gpt_kv_t *kv);
/* Appends tokens[0..n) at the next positions and writes the logits of the
 * last one (V floats, host memory, may be NULL; par_gpt_kv_logits keeps
 * them too). A prompt appended to an empty cache runs as one forward. The
 * model's last forward is overwritten. EINVAL past max_len. */
STRATA_API int par_gpt_kv_append(par_gpt_kv_t *kv, const int32_t *tokens, int n, float *logits);
STRATA_API const float *par_gpt_kv_logits(const par_gpt_kv_t *kv);

typedef struct {
  double temperature; /* 0: greedy (the first of the largest logits) */
  int top_k;          /* sample among the top_k largest; <= 0: all */
  uint64_t seed;      /* the draw of step s is a function of (seed, s) alone */
} par_sample_options_t;
#define PAR_SAMPLE_DEFAULTS {.temperature = 1.0, .top_k = 40, .seed = 1}

/* Draws a token from softmax(logits / temperature) over the top_k largest,
 * with a uniform number from Philox keyed by (seed, "sample") at counter
 * `step`: the same seed and step give the same token. */
STRATA_API int par_gpt_sample(const float *logits, int V, const par_sample_options_t *o, uint64_t step,
                              int32_t *token);

#ifdef __cplusplus
}
#endif

#endif
