/* strata/par_plan.h: the planner (cost model) and layout validation.
 * Included from strata/parallel.h; may also be included on its own.
 *
 * Given a model (par_gpt_config_t), a layout (par_layout_t) and a cluster
 * (par_cluster_t), the planner predicts memory per device by category and
 * time per step by component, from first principles: Megatron-LM's FLOP
 * count (arXiv 2104.04473, eq. 3), ZeRO's model-state accounting (arXiv
 * 1910.02054, sec. 3 and 5), Korthikanti et al.'s activation accounting
 * (arXiv 2205.05198, eq. 1-2), alpha-beta collective costs, and the pipeline
 * bubble (p-1)/m. Every assumption is a named field of par_plan_params_t and
 * is documented in docs/planner.md; nothing here stores a published answer.
 *
 * Units: bytes, seconds, FLOP/s, bytes/s, all as double. Counts of
 * parameters and FLOPs are doubles too (they exceed 2^53 only for sizes no
 * one trains). No function here allocates memory the caller must free. */
#ifndef STRATA_PAR_PLAN_H
#define STRATA_PAR_PLAN_H

#include <stdio.h>
#include <strata/parallel.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- cluster */

/* A homogeneous cluster: nodes x gpus_per_node identical GPUs. Bandwidths
 * are nominal, unidirectional; the planner applies the achievable fractions
 * of par_plan_params_t. The same table lives in recipes/clusters/NAME.lua
 * (keys identical to these field names); keep both in step. */
typedef struct {
  char name[64];
  int nodes;
  int gpus_per_node;
  double gpu_mem_bytes;   /* memory per GPU, bytes */
  double gpu_mem_bw;      /* device memory (HBM) bandwidth per GPU, bytes/s */
  double peak_flops[3];   /* dense peak per GPU, FLOP/s, indexed by par_precision_t
                             (fp32, bf16, fp16); fp32 means non-tensor-core fp32 */
  double gemm_efficiency[3]; /* the fraction of peak_flops[i] the device's own matrix
                             multiplies sustain (a measured or published large-GEMM rate
                             over the peak; docs/planner.md gives each preset's source);
                             0 where the peak is 0. par_cluster_calibrate sets it */
  double intra_bw;        /* per-GPU bandwidth to GPUs of the same node (NVLink), bytes/s */
  double intra_lat;       /* latency of one intra-node message, s */
  double inter_bw;        /* per-node network bandwidth, all NICs together, bytes/s */
  double inter_lat;       /* latency of one inter-node message, s */
  double host_bw;         /* per-GPU host<->device bandwidth (PCIe), bytes/s */
  double cpu_mem_bytes;   /* host memory per node, bytes */
  double cpu_mem_bw;      /* host memory bandwidth per node, bytes/s */
  double cpu_flops;       /* peak fp32 FLOP/s of a node's CPUs (CPU Adam is mostly bandwidth-bound) */
  double nvme_bytes;      /* NVMe capacity per node, bytes */
  double nvme_bw;         /* NVMe bandwidth per node (read or write), bytes/s */
} par_cluster_t;
#define PAR_CLUSTER_DEFAULTS                                                                       \
  {.name = "custom", .nodes = 1, .gpus_per_node = 1, .gpu_mem_bytes = 80e9, .gpu_mem_bw = 2.0e12, \
   .peak_flops = {19.5e12, 312e12, 312e12}, .gemm_efficiency = {0.8587, 0.8587, 0.8587},          \
   .intra_bw = 300e9, .intra_lat = 5e-6,                                                          \
   .inter_bw = 200e9, .inter_lat = 10e-6, .host_bw = 25e9, .cpu_mem_bytes = 1e12,                  \
   .cpu_mem_bw = 200e9, .cpu_flops = 2e12, .nvme_bytes = 15e12, .nvme_bw = 25e9}

/* The machines of the papers and this one. Names: "dgx1-v100-32gb",
 * "dgx2-v100", "dgx-a100-40gb", "dgx-a100-80gb", "dgx-h100", "this-machine".
 * `nodes` defaults to 1; callers set it. Returns STRATA_ENOTFOUND for an
 * unknown name (why lists the known ones). */
STRATA_API int par_cluster_preset(const char *name, par_cluster_t *out, char *why, size_t n);
/* The i-th preset name, or NULL past the end (for listing). */
STRATA_API const char *par_cluster_preset_name(int i);
/* Checks that every field is positive and finite (a gemm_efficiency in (0, 1] where its
 * peak is not 0); the message names the field. */
STRATA_API int par_cluster_validate(const par_cluster_t *c, char *why, size_t n);
/* A cluster whose devices sustain `gemm_flops` FLOP/s in large matrix multiplies of
 * precision `prec` (measured, or a published figure): gemm_efficiency[prec] =
 * gemm_flops / peak_flops[prec]; a rate above the peak raises the peak to it (this
 * machine's CPU, whose preset peak is a measurement too) and sets the efficiency to 1.
 * STRATA_EINVAL for a rate that is not positive and finite or a bad precision. */
STRATA_API int par_cluster_calibrate(par_cluster_t *c, par_precision_t prec, double gemm_flops);

/* Fields by name, for Lua tables and recipe overrides: keys are the field
 * names above, the peaks "peak_flops.fp32|bf16|fp16". set: STRATA_ENOTFOUND
 * for an unknown key, STRATA_EINVAL for a value outside the key's range
 * (par_cluster_check). par_cluster_key(i) lists the keys (NULL past the end). */
STRATA_API int par_cluster_set(par_cluster_t *c, const char *key, double value);
STRATA_API int par_cluster_get(const par_cluster_t *c, const char *key, double *value);
STRATA_API const char *par_cluster_key(int i);
/* Whether `value` is in the range of cluster key `key`: nodes an integer in
 * 1..1000000, gpus_per_node in 1..1024, a bf16 or fp16 peak, a latency and
 * the NVMe figures >= 0, every other field > 0, all finite. STRATA_ENOTFOUND
 * for an unknown key, STRATA_EINVAL out of range; why (may be NULL) says
 * "KEY = VALUE: must be ..." with the range. */
STRATA_API int par_cluster_check(const char *key, double value, char *why, size_t n);

/* The precision the planner assumes when none is given (strata.plan,
 * strata.plan_search, par_plan_search with precisions 0): mixed precision
 * in the device's 16-bit format, 16-bit parameters and gradients with fp32
 * master weights and Adam moments, as every published large run trains:
 * bf16 where the cluster's GPU has a bf16 peak, else fp16 (V100), else fp32.
 * The runtime's default (PAR_LAYOUT_DEFAULTS, a recipe's parallel.precision)
 * stays fp32. */
STRATA_API par_precision_t par_plan_default_precision(const par_cluster_t *c);

/* ------------------------------------------------------------- parameters */

/* Every assumption of the cost model. Defaults are argued in docs/planner.md;
 * gemm_efficiency is the one calibrated figure (on Megatron's 1.7B row). */
typedef struct {
  double gemm_efficiency;   /* fraction of the device's sustained matmul rate (peak x the
                               cluster's gemm_efficiency) that a training step's matmuls
                               reach: their shapes, launch gaps and the kernels the model
                               leaves out; the same for every device */
  double link_efficiency;   /* achievable fraction of nominal link bandwidth (NCCL busbw) */
  double hbm_efficiency;    /* achievable fraction of HBM bandwidth, memory-bound kernels */
  double host_efficiency;   /* achievable fraction of PCIe / NVMe / host DRAM bandwidth */
  double ew_passes_token;   /* memory-bound passes per token x hidden element, per layer,
                               forward (layernorms, bias+GeLU, bias+dropout+residual) */
  double ew_passes_token_replicated; /* of those, passes 1d tensor parallelism leaves
                               unsplit (layernorms, bias+dropout+residual) */
  double ew_passes_score;   /* memory-bound passes per attention score element, per
                               layer, forward (scale+mask+softmax, dropout, bmm IO) */
  double act_token_elems;   /* activation elements kept per token x hidden per block
                               (16: Korthikanti et al. eq. 1 without masks) */
  double act_token_elems_replicated; /* of those, elements 1d tensor parallelism keeps
                               whole (4: layernorm inputs, linear inputs) */
  double act_score_elems;   /* elements kept per attention score (2: softmax output
                               and dropout output) */
  double bwd_scratch_token_elems_replicated; /* of those, buffers 1d tensor parallelism keeps
                               whole (2: the residual stream's and a layernorm's gradient) */
  double bwd_scratch_token_elems; /* activation-gradient buffers live during one block's
                               backward, per token x hidden (14: residual, layernorm,
                               qkv 3, attention output, fc 4, GeLU 4) */
  double act_elem_bytes;    /* bytes per activation element; 0: by the precision (2 for
                               bf16/fp16, 4 for fp32); strata's engine: 4 (fp32 compute
                               under every precision), 2 with 16-bit activations on a
                               device (par_gpt_options_t.act_dtype) */
  double head_chunk_bytes;  /* > 0: the head's logits exist one chunk of rows at a time
                               (a fused classifier, strata's on a CUDA device): the last
                               stage holds one chunk of rows of f32 logits of at most
                               this many bytes (at least one row), their gradient in
                               act_elem_bytes when those are < 4 and the tied weight
                               rounded to them, instead of every microbatch's logits;
                               0: the whole logits (the CPU engine, Megatron) */
  double mask_bytes;        /* bytes per dropout-mask element kept for backward (1: a
                               byte mask as Megatron; 0: a model without dropout) */
  double bwd_factor;        /* backward cost / forward cost (2: dX and dW GEMMs) */
  double dp_overlap;        /* fraction of the last microbatch's backward that can hide
                               gradient reduction (bucketed overlap; 0 = none) */
  double zero3_overlap;     /* ZeRO-3: the share of a layer's compute that hides the next
                               layer's gather (and the last one's reduce-scatter) running
                               beside it (1: all of it, as the prefetching schedule allows) */
  double offload_overlap;   /* fraction of host<->device offload traffic hidden by compute */
  double cpu_adam_bytes;    /* host DRAM bytes CPU Adam streams per parameter */
  double cpu_adam_flops;    /* FLOPs per parameter of one Adam step */
  double gpu_optim_bytes;   /* HBM bytes a fused GPU Adam streams per parameter */
  double dp_bucket_bytes;   /* gradient bucket buffers on the device (reduce / copy) */
  double zero3_prefetch_layers; /* > 0: ZeRO-3 gathers whole regions, as strata's engine: the
                               tied embedding all pass and this many blocks (the one in use
                               and the next, 2); 0: DeepSpeed's parameter coordinator, the
                               zero3_*_elems below */
  double zero3_prefetch_elems; /* DeepSpeed stage3_prefetch_bucket_size: parameter elements
                               gathered ahead of use (5e7) */
  double zero3_max_live_elems; /* stage3_max_live_parameters: gathered elements beyond which
                               nothing more is prefetched (1e9) */
  double zero3_reuse_elems;  /* stage3_max_reuse_distance: a parameter used again within this
                               many elements of the trace stays gathered (1e9) */
  double zero3_persist_elems; /* stage3_param_persistence_threshold: tensors of at most this
                               many elements are never partitioned (1e5) */
  double embed_output_kept; /* 1: the embedding output is a buffer of its own besides the
                               blocks' kept values (strata's engine keeps x[0] and each
                               block's output); 0: it is the first block's input, already
                               among act_token_elems (Korthikanti et al., Megatron): the
                               first stage adds only its dropout mask */
  double ckpt_cpu_overlap;  /* with checkpoint_cpu: the share of the checkpoints' PCIe copies
                               hidden by compute (0: DeepSpeed copies on the compute stream) */
  double shard_align;       /* without tensor or pipeline splits, each region of the model
                               (embeddings, a block, the final layernorm) is held in dp
                               shards of a multiple of this many elements, padded as
                               strata's engine does (16); 0: unpadded, one replica */
  double device_reserved_bytes; /* CUDA context, GEMM workspace, allocator fragmentation */
  double cpu_reserved_bytes;    /* per node, OS + framework + data loader */
  double token_budget;      /* tokens for the "days to train" column */
  double pp_dp_overlap;     /* with pipeline stages, the share of dp_overlap that applies: 0
                               when the gradients are reduced after the pipeline's flush
                               (Megatron, DeepSpeed); 1 when posted during each region's
                               last microbatch (strata's engine) */
  double pp_scatter_gather; /* 1: a pipeline message is b s h / t per tensor rank, gathered
                               over the tensor group after it (Megatron); 0: each tensor
                               rank sends the whole b s h (strata's engine, DeepSpeed) */
  double keep_stage_outputs; /* 1: a pipeline stage keeps its output for each microbatch in
                               flight until that microbatch's backward (strata's engine);
                               0: frees it once sent (Megatron's deallocate_pipeline_outputs) */
} par_plan_params_t;
#define PAR_PLAN_PARAMS_DEFAULTS                                                                   \
  {.gemm_efficiency = 0.8670, .link_efficiency = 0.80, .hbm_efficiency = 0.80,                    \
   .host_efficiency = 0.80, .ew_passes_token = 21.0, .ew_passes_token_replicated = 11.0,          \
   .ew_passes_score = 6.5, .act_token_elems = 16.0, .act_token_elems_replicated = 4.0,            \
   .act_score_elems = 2.0, .bwd_scratch_token_elems = 14.0, .mask_bytes = 1.0,                    \
   .bwd_scratch_token_elems_replicated = 2.0,                                                     \
   .act_elem_bytes = 0.0, .head_chunk_bytes = 0.0,                                                \
   .bwd_factor = 2.0, .dp_overlap = 1.0, .zero3_overlap = 1.0, .offload_overlap = 0.5,            \
   .cpu_adam_bytes = 28.0, .cpu_adam_flops = 12.0, .gpu_optim_bytes = 28.0,                       \
   .dp_bucket_bytes = 2 * 50e6, .zero3_prefetch_layers = 0.0, .zero3_prefetch_elems = 5e7,       \
   .zero3_max_live_elems = 1e9, .zero3_reuse_elems = 1e9, .zero3_persist_elems = 1e5,             \
   .embed_output_kept = 0.0, .ckpt_cpu_overlap = 0.0, .shard_align = 16.0,                        \
   .device_reserved_bytes = 1.5e9,                                                                \
   .cpu_reserved_bytes = 32e9, .token_budget = 300e9, .keep_stage_outputs = 0.0,    \
   .pp_dp_overlap = 0.0, .pp_scatter_gather = 1.0}

/* The parameters that describe strata's own GPT and training engine on the
 * CPU: 16 h-wide activations kept per token per block (each block's output)
 * and the embedding output besides, no attention scores (the kernel keeps a
 * log-sum-exp), no dropout masks, 14 h-wide gradient buffers in backward, no
 * reserved device memory, gradient buckets that are views of the gradients,
 * ZeRO-3 gathering whole regions (the embeddings all pass, the block in use
 * and the next); the rest as PAR_PLAN_PARAMS_DEFAULTS. Its model
 * states equal the engine's exactly, its activations within 10%
 * (tests/train/zero_equiv.c). */
STRATA_API void par_plan_params_engine(par_plan_params_t *p);
/* strata's engine on a CUDA device: par_plan_params_engine with the fused
 * head (head_chunk_bytes = TENSOR_CLASSIFIER_CHUNK_BYTES, libtensor's
 * default chunk) and act_bytes per activation element (4: f32, 2: bf16 or
 * f16 activations, par_gpt_options_t.act_dtype; other values: 4). */
STRATA_API void par_plan_params_engine_device(par_plan_params_t *p, int act_bytes);

/* Parameters by name (the field names above), as for the cluster: set
 * returns STRATA_EINVAL for a value outside the key's range. */
STRATA_API int par_plan_params_set(par_plan_params_t *p, const char *key, double value);
STRATA_API int par_plan_params_get(const par_plan_params_t *p, const char *key, double *value);
STRATA_API const char *par_plan_params_key(int i);
/* The range of each parameter (docs/planner.md, below its table): the
 * efficiencies in (0, 1], the overlaps and the 0/1 switches in [0, 1],
 * bwd_factor and token_budget > 0, shard_align an integer in 0..2^30, every
 * other >= 0; all finite. As par_cluster_check. */
STRATA_API int par_plan_params_check(const char *key, double value, char *why, size_t n);
/* Every parameter in its range, and each "_replicated" share at most its
 * whole (ew_passes_token, act_token_elems, bwd_scratch_token_elems).
 * STRATA_EINVAL with the key, value and range in why. */
STRATA_API int par_plan_params_validate(const par_plan_params_t *p, char *why, size_t n);

/* ---------------------------------------------------------------- formulas */

/* Exact parameter count of strata's GPT (parallel.h): l (12 h^2 + 13 h) +
 * (V + s) h + 2 h (the final layernorm), the LM head tied to the token
 * embedding and counted once. */
STRATA_API double par_plan_param_count(const par_gpt_config_t *m);
/* Megatron's P = 12 l h^2 (1 + 13/(12h) + (V+s)/(12 l h)) (arXiv 2104.04473,
 * sec. 5.1): the same model without the final layernorm's 2h. */
STRATA_API double par_megatron_param_count(const par_gpt_config_t *m);
/* Megatron's F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) (eq. 3): FLOPs of
 * one step of `batch` sequences with activation recompute. With recompute
 * = 0 the forward is counted once less: 72 B s l h^2 (1 + s/(6h)) + 6 B s h V. */
STRATA_API double par_megatron_flops(const par_gpt_config_t *m, double batch, int recompute);
/* Megatron's end-to-end estimate 8 T P / (n X) in seconds (sec. 5.1). */
STRATA_API double par_megatron_train_seconds(double tokens, double params, double gpus,
                                             double flops_per_gpu);

/* ZeRO model states per device (arXiv 1910.02054, sec. 5): bytes of fp16
 * parameters, fp16 gradients and optimizer states (K bytes per parameter,
 * K = 12 for mixed-precision Adam) for `params` parameters over Nd data-parallel
 * devices at `stage` 0..3. out[0..2] = params, grads, optimizer. */
STRATA_API int par_zero_model_states(double params, int nd, int stage, double k, double out[3]);
/* The paper's Table 1 print convention for a figure in GB: integers
 * (truncated) from 100 up, one decimal below 100, two below 10 (rounded half
 * up). Writes into buf; returns buf. */
STRATA_API const char *par_zero_format_gb(double gb, char *buf, size_t n);

/* ---------------------------------------------------------------- layouts */

/* Whether `l` can run `m` on `world` devices: every degree >= 1, dp*tp*pp*sp
 * == world, heads and hidden divisible by the tensor split, 2d square, 2.5d
 * q^2*depth, 3d a cube, at least one layer per pipeline stage (layers divisible
 * by pp*interleave for the interleaved schedule; other schedules may split
 * the layers unevenly, ceil(layers/pp) on the heaviest stage), global_batch a
 * multiple of microbatch*dp, seq divisible by sp, vocabulary by the tensor
 * degree, ZeRO stage 0..3, enums in range. STRATA_EINVAL with a message naming
 * the numbers in why (may be NULL). The runtime calls this same function
 * before allocating, and itself requires an even split (its stages hold
 * layers/pp blocks each). */
STRATA_API int par_layout_validate(const par_gpt_config_t *m, const par_layout_t *l, int world,
                                   char *why, size_t n);

/* ----------------------------------------------------------------- estimate */

typedef enum {
  PAR_MEM_PARAMS = 0, /* working (compute-precision) parameters */
  PAR_MEM_GRADS,      /* gradients */
  PAR_MEM_OPTIM,      /* fp32 master copy + Adam moments */
  PAR_MEM_ACTIV,      /* activations of the in-flight microbatches, logits */
  PAR_MEM_BUFFERS,    /* communication buckets, ZeRO-3 gather buffers, offload staging */
  PAR_MEM_RESERVED,   /* device_reserved_bytes */
  PAR_MEM_COUNT
} par_mem_kind_t;

typedef enum {
  PAR_T_COMPUTE = 0, /* matmuls at gemm_efficiency of peak */
  PAR_T_MEMBOUND,    /* memory-bound kernels (norms, softmax, dropout, GeLU) */
  PAR_T_BUBBLE,      /* pipeline fill and drain */
  PAR_T_TP,          /* tensor-parallel collectives (exposed) */
  PAR_T_SP,          /* sequence-parallel ring attention traffic */
  PAR_T_PP,          /* pipeline send/recv */
  PAR_T_DP,          /* gradient reduction (+ parameter allgather under ZeRO), exposed */
  PAR_T_ZERO3,       /* ZeRO-3 parameter gathers, exposed */
  PAR_T_OFFLOAD,     /* host/NVMe transfers, exposed */
  PAR_T_OPTIM,       /* optimizer step (GPU or CPU) */
  PAR_T_COUNT
} par_time_kind_t;

typedef struct {
  int valid;                  /* 0: the layout is invalid (why says why) */
  int fits;                   /* 1: device, host and NVMe memory all suffice */
  char why[256];              /* reason when !valid or !fits, else "" */
  double params;              /* par_plan_param_count of the model */
  double params_device;       /* parameters of the largest pipeline stage / tensor shard */
  double mem[PAR_MEM_COUNT];  /* device bytes by category, largest stage */
  double mem_total;           /* sum of mem[] */
  double cpu_bytes_node;      /* host bytes per node (offloaded states, pinned buffers) */
  double nvme_bytes_node;     /* NVMe bytes per node */
  double time[PAR_T_COUNT];   /* seconds per step by component */
  double comm_bytes[PAR_T_COUNT]; /* bytes sent per device per step by component */
  double step_time;           /* seconds per optimizer step */
  int microbatches;           /* m = global_batch / (dp * microbatch) */
  double bubble_fraction;     /* the schedule's bubble / ideal pipeline time on balanced stages,
                                 (p - 1) / (v m); time[PAR_T_BUBBLE] has the stages' imbalance */
  double flops_step;          /* hardware FLOPs per step (Megatron F; with recompute if on) */
  double model_flops_step;    /* FLOPs per step without recompute (for MFU) */
  double tflops_per_gpu;      /* flops_step / step_time / GPUs / 1e12 (Megatron's convention) */
  double mfu;                 /* model_flops_step / step_time / GPUs / peak */
  double tokens_per_s;
  double days;                /* days for params.token_budget tokens */
} par_plan_t;

/* Predicts memory and time of model `m` laid out as `l` on cluster `c`
 * (world = c->nodes * c->gpus_per_node). p NULL means defaults. An invalid
 * layout is not an error of the call: out->valid = 0 and out->why explains,
 * and the return is STRATA_EINVAL; a valid layout returns STRATA_OK whether
 * or not it fits (out->fits). NULL pointers or a bad cluster: STRATA_EINVAL. */
/* Bytes one rank sends for one linear layer's product (forward and
 * backward: rows x hin input, hin x hout weight, e bytes per element) as
 * strata's implementations move them and libcomm counts them: Megatron 1D
 * (the allreduce of the narrower activation), SUMMA for 2D and 2.5D of
 * depth `depth` (strata/par_summa.h), the 3D product (strata/par_mm3d.h).
 * The planner's step estimate uses the papers' formulas (docs/planner.md),
 * which count each collective's volume the textbook way. */
STRATA_API double par_plan_tp_linear_sent(par_tp_mode_t mode, int tp, int depth, double rows, double hin, double hout,
                                          double e);
/* Bytes one rank sends for one GPT transformer layer's forward and backward
 * under tensor parallelism as strata's layer moves them (strata/par_tplayer.h;
 * rows = batch x seq tokens, e bytes per element): its four products
 * (par_plan_tp_linear_sent), the layernorms' row statistics and the vector
 * parameters' gradients summed over their replicas. */
STRATA_API double par_plan_tp_layer_sent(par_tp_mode_t mode, int tp, int depth, double rows, double hidden, double e);
/* The same layer's four products by the papers' formulas, the planner's
 * accounting (docs/planner.md): Megatron's 1D, Optimus' 2D, Tesseract's
 * 2.5D and Bian et al.'s 3D, without the layernorms and vectors. */
STRATA_API double par_plan_tp_layer_formula(par_tp_mode_t mode, int tp, int depth, double rows, double hidden, double e);
STRATA_API int par_plan_estimate(const par_gpt_config_t *m, const par_layout_t *l,
                                 const par_cluster_t *c, const par_plan_params_t *p,
                                 par_plan_t *out);

/* Prints the `strata plan` report: inputs, memory by category, time by
 * component, TFLOP/s per GPU, MFU, tokens/s and days. */
STRATA_API int par_plan_print(FILE *f, const par_gpt_config_t *m, const par_layout_t *l,
                              const par_cluster_t *c, const par_plan_t *r);

/* What par_plan_largest grows. */
typedef enum { PAR_GROW_LAYERS = 0, PAR_GROW_HIDDEN } par_grow_t;

/* The largest model of a family that fits: model `m` with its layers (PAR_GROW_LAYERS)
 * or its hidden size (PAR_GROW_HIDDEN) grown in multiples of `step` up to `max`,
 * everything else as given, laid out as `l` on `c`. step 0: 1 layer (pp x interleave
 * for the interleaved schedule), or for the hidden size the least multiple of heads
 * and 128; max 0: 100000 layers or a hidden size of 1048576. Memory grows with either
 * size, so the answer is found by doubling and bisection. Writes the largest model
 * that fits in *best and its plan in *plan (either may be NULL). STRATA_ENOTFOUND when
 * not even `step` fits (plan: the smallest's reason), STRATA_EINVAL for bad inputs or a
 * layout the family cannot satisfy at step (plan->why says why). */
STRATA_API int par_plan_largest(const par_gpt_config_t *m, const par_layout_t *l,
                                const par_cluster_t *c, const par_plan_params_t *p, par_grow_t grow,
                                int step, int max, par_gpt_config_t *best, par_plan_t *plan);

/* Solves for the gemm_efficiency at which the predicted TFLOP/s per GPU of
 * (m, l, c) equals target_tflops (bisection on [0.01, 1]). Writes the result
 * in *eff. STRATA_EINVAL when no efficiency in that range reaches it. */
STRATA_API int par_plan_calibrate(const par_gpt_config_t *m, const par_layout_t *l,
                                  const par_cluster_t *c, const par_plan_params_t *p,
                                  double target_tflops, double *eff);

/* ------------------------------------------------------------------ search */

/* What the search enumerates. Each option either fixes a setting or lists
 * the values tried (bit masks of 1 << the enum). */
typedef struct {
  int global_batch;       /* B, fixed (sequences per step), required (>= 1) */
  int precisions;         /* bit mask of 1 << par_precision_t tried; 0: the cluster's default,
                             par_plan_default_precision */
  int max_microbatch;     /* microbatches tried: 1, 2, 4, ... up to this (default 8) */
  int tp_modes;           /* bit mask of 1 << par_tp_mode_t (default: 1d only) */
  int max_zero_stage;     /* stages 0..max tried (default 3; outside 0..3 is an error) */
  int try_offload;        /* also try optimizer (+gradient) offload to CPU */
  int try_sp;             /* also try sequence parallelism */
  int try_recompute;      /* 1: try both recompute settings; 0: keep the model's */
  int schedules;          /* with pp > 1: bit mask of 1 << par_schedule_t tried; 0: 1F1B */
  int interleaves;        /* under the interleaved schedule: bit mask of 1 << v, v model chunks per
                             stage tried (2 <= v <= 30); 0: every v >= 2 that divides a stage's layers */
} par_search_opts_t;
#define PAR_SEARCH_OPTS_DEFAULTS                                                                   \
  {.global_batch = 0, .precisions = 0, .max_microbatch = 8, .tp_modes = 1,                         \
   .max_zero_stage = 3, .try_offload = 0, .try_sp = 0, .try_recompute = 1,                        \
   .schedules = 0, .interleaves = 0}

typedef struct {
  par_layout_t layout;
  int recompute;          /* recompute setting this entry used */
  par_plan_t plan;
} par_plan_entry_t;

/* Enumerates layouts of `m` over all of cluster `c`, estimates each, and
 * sorts: layouts that fit by tokens/s (best first), then valid layouts that
 * do not fit (least memory first), then invalid ones; each carries its
 * reason. Copies the first min(cap, total) into out (caller-owned array, may
 * be NULL when cap is 0) and the total into *total. STRATA_EINVAL for a
 * missing global batch, an option out of its range (a mask bit of no enum
 * value, max_zero_stage outside 0..3), a bad cluster or parameters outside
 * their ranges (par_plan_params_validate). */
STRATA_API int par_plan_search(const par_gpt_config_t *m, const par_cluster_t *c,
                               const par_plan_params_t *p, const par_search_opts_t *o,
                               par_plan_entry_t *out, size_t cap, size_t *total);
/* Prints the top `top` fitting entries, then every cause of rejection
 * (par_plan_search_causes) with its count and the first layout it rejected. */
STRATA_API int par_plan_search_print(FILE *f, const par_plan_entry_t *e, size_t count, size_t top);

/* One cause of rejection in a search: the entries that do not fit whose
 * reasons read the same once their numbers are replaced by '#' ("needs # GB
 * per device of # GB (largest: activations # GB)"), so that one cause over
 * many sizes counts once. */
typedef struct {
  char cause[256];        /* the reason with each number as '#' */
  size_t count;           /* entries rejected for it */
  size_t first;           /* index of the first of them (its reason has the numbers) */
} par_plan_cause_t;
/* The causes of the entries of a sorted search that do not fit: valid
 * layouts too big first, then invalid ones, each by count (most first).
 * Fills up to cap (out may be NULL when cap is 0) and *n with the number of
 * causes. */
STRATA_API int par_plan_search_causes(const par_plan_entry_t *e, size_t count, par_plan_cause_t *out,
                                      size_t cap, size_t *n);

/* ------------------------------------------------------------ reproduction */

/* One row of a reproduction: a published figure next to the planner's. */
typedef struct {
  char label[96];
  char unit[16];
  double published;
  double predicted;
  double rel_err;         /* (predicted - published) / published; 0 when both 0 */
} par_repro_row_t;

/* Published results the planner reproduces (see docs/planner.md):
 * "zero-table1", "zero-comm", "deepspeed-3d", "deepspeed-1t", "zero-offload",
 * "patrickstar", "colossal-tp", "megatron-params", "megatron-table1",
 * "megatron-time", "mtnlg". Fills up to cap rows and *count with the total.
 * p NULL means defaults (gemm_efficiency calibrated as docs/planner.md says).
 * STRATA_ENOTFOUND for an unknown name. */
STRATA_API int par_plan_reproduce(const char *which, const par_plan_params_t *p,
                                  par_repro_row_t *rows, size_t cap, size_t *count);
/* The name of the i-th reproduction, or NULL past the end. */
STRATA_API const char *par_plan_reproduce_name(int i);
/* Prints a reproduction as a table: label, published, predicted, relative error. */
STRATA_API int par_plan_reproduce_print(FILE *f, const char *which, const par_plan_params_t *p);

#ifdef __cplusplus
}
#endif

#endif
