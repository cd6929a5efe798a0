/* strata/par_train.h: the training engine. Included from strata/parallel.h.
 *
 * Two levels, both C, so a program that links libparallel trains without
 * Lua (the `strata` runner only binds them):
 *
 *   par_engine_*  one handle per run and rank: the model, its optimizer and
 *                 the data-parallel communicator, with step, evaluate, save
 *                 and load. Built from a model config, a layout and an
 *                 optimizer config; every rank of the run's communicator
 *                 calls every function in the same order (collective).
 *   par_train_run the loop around it: resume, steps, evaluations, metrics
 *                 (HDF5, rank 0), checkpoints, a progress callback, a stop
 *                 request (signals), divergence checks.
 *
 * Usage (tests/train/example_engine.c builds and runs this):
 *
 *   par_engine_t *e;
 *   par_gpt_config_t mc = {.layers = 2, .hidden = 64, .heads = 4, .seq = 64, .vocab = 256};
 *   par_layout_t lay = PAR_LAYOUT_DEFAULTS;  // .dp = ranks, .microbatch = 8, .global_batch = 8 * ranks
 *   par_optim_config_t oc = PAR_OPTIM_CONFIG_DEFAULTS;
 *   par_engine_options_t eo = PAR_ENGINE_OPTIONS_DEFAULTS;
 *   if (par_engine_create(&e, &mc, &lay, &oc, &eo, err, sizeof err)) ...
 *   par_step_t st;
 *   for (long s = 1; s <= 100; s++) par_engine_step(e, data, &st);
 *   par_engine_destroy(e);
 *
 * Errors: every function returns STRATA_OK or a negative STRATA_E* code and
 * leaves one line in par_engine_error(e). par_engine_error_all_ranks(e)
 * says whether every rank returned the same error (a checkpoint refused,
 * a diverged loss), so that a caller ends each rank cleanly, or only this
 * one (its data file vanished), so that the caller must end the job. */
#ifndef STRATA_PAR_TRAIN_H
#define STRATA_PAR_TRAIN_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <strata/comm.h>
#include <strata/optim.h>
#include <strata/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- engine */

typedef struct par_engine par_engine_t;

/* The optimizer and its learning-rate schedule (liboptim, strata/optim.h).
 * Strings are borrowed for the call to par_engine_create. */
typedef struct {
  const char *name;     /* "adamw", "sgd", "momentum", "nesterov", "lamb", "lars" */
  double lr;            /* peak learning rate (> 0) */
  double min_lr;        /* learning rate at the end of the decay, in [0, lr] */
  const char *schedule; /* "constant", "cosine", "linear" (decay after the warm-up) */
  long warmup;          /* linear warm-up steps (>= 0) */
  double weight_decay;  /* decoupled (AdamW, LAMB) or L2 (SGD, LARS); none on biases and norms */
  double beta1, beta2, eps; /* AdamW, LAMB */
  double momentum;      /* momentum, nesterov, LARS */
  double clip;          /* global gradient-norm clip; 0: off */
} par_optim_config_t;
#define PAR_OPTIM_CONFIG_DEFAULTS                                                                  \
  {.name = "adamw", .lr = 1e-3, .min_lr = 0.0, .schedule = "cosine", .warmup = 0,                 \
   .weight_decay = 0.0, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .momentum = 0.9, .clip = 1.0}

/* A liboptim handle for c (threads: its CPU threads) with two parameter
 * groups: groups[0] for matrices and embeddings (weight decay, layer
 * adaptation) and groups[1] for biases and norms (neither), and c's
 * schedule decaying over `steps` updates. Checks every value in double
 * precision, as given (a beta of 0.9999999999 that float32 rounds to 1 is
 * refused by name). Caller destroys *out with optim_destroy. */
STRATA_API int par_optim_create(optim **out, const par_optim_config_t *c, long steps, int threads,
                                int groups[2], char *err, size_t errlen);
/* The liboptim kind (OPTIM_ADAMW, ...) of an optimizer name; -1 if unknown. */
STRATA_API int par_optim_kind(const char *name);
/* The state arrays c needs: bit 0 the first moment or momentum (all but
 * plain SGD), bit 1 the second moment (AdamW, LAMB). */
STRATA_API int par_optim_state_arrays(const par_optim_config_t *c);
/* "adamw lr=0.001 min_lr=0 schedule=cosine ...": the description stored
 * in checkpoints and metrics. Returns buf. */
STRATA_API const char *par_optim_describe(const par_optim_config_t *c, char *buf, size_t n);

typedef struct {
  uint64_t seed;     /* model initialisation (par_gpt) */
  int threads;       /* CPU threads of this rank; 0: OpenMP's default */
  long steps;        /* the run's length in optimizer steps: the schedule decays over it */
  /* Watchdog of the engine's collectives (libcomm): one that has not
   * completed after this many seconds fails with STRATA_ETIMEOUT and a
   * report naming the ranks that never arrived. 0 waits forever. */
  double collective_timeout_s;
  MPI_Comm comm;     /* the run's ranks (borrowed, duplicated); MPI_COMM_NULL: MPI_COMM_WORLD */
  /* Weights to start from (par_model_read: a strata checkpoint, an llm.c
   * model file or a Hugging Face safetensors, holding this model); NULL:
   * initialised from seed. The optimizer starts fresh either way. */
  const char *init;
  /* 1: the parameters are not initialised at all (left zero): the caller
   * loads a checkpoint before the first step (par_engine_load), as a resume
   * does, and saves the initialisation's time (an elastic relaunch's). */
  int no_init;
  int seq; /* tokens per sample, <= the model's positions; 0: the model's seq */
  /* ZeRO-0: gradients are allreduced in buckets of at least this many MiB,
   * posted as soon as backward has finished them (PyTorch DDP's default 25;
   * the first bucket, the last layers, closes at 1 MiB as DDP's does). */
  double bucket_mb;
  /* Bytes of memory a rank may use. Before allocating, the engine compares
   * the planner's prediction for the model and layout with it and refuses a
   * run that cannot fit (STRATA_ENOMEM, naming the largest categories and a
   * layout that fits). 0: the host memory available on the node (and the
   * cgroup's limit), shared by the ranks on the node; < 0: no check. */
  double memory_bytes;
  /* Testing: seconds to wait before posting each gradient reduction, to
   * show that backward goes on while reductions are in flight; 0. */
  double delay_reductions_s;
  /* Testing: with pipeline stages, each forward of a chunk first sleeps
   * this many seconds divided by the interleave, and each backward twice
   * that, so that a test sees the schedule's own timing; 0. */
  double delay_ops_s;
  /* layout.offload_optimizer = PAR_TIER_NVME: the directory of the NVMe
   * tier's file (NULL: $TMPDIR, else /tmp). Borrowed for par_engine_create. */
  const char *offload_dir;
  /* fp16 (layout.precision): dynamic loss scaling (arXiv 1710.03740 sec.
   * 3.2) starting at loss_scale (0: 65536), halved at each step whose
   * gradients overflow (skipped, on every rank alike), doubled after
   * loss_scale_window good steps in a row (0: 1000), between 1 and 2^24
   * (or the initial scale when outside). */
  double loss_scale;
  int loss_scale_window;
  /* Memory tiers (liboffload). device_bytes > 0: the device holds at most
   * this many bytes (on the CPU path a cap on the model's memory
   * accountant, standing in for a GPU of that size): an allocation beyond
   * it fails with STRATA_ENOMEM, naming the numbers. host_bytes > 0: the
   * budget of liboffload's host tier (the optimizer offload's, the chunk
   * policy's); 0: what the policy needs. */
  double device_bytes, host_bytes;
  /* PatrickStar's chunk policy (Fang et al., arXiv 2108.05818): the
   * parameters, gradients and optimizer state of every region are tensors
   * of liboffload's chunks (each kind in chunks of its own), brought to the
   * device as the passes need them, evicted by the first step's trace, and
   * to the host for the CPU optimizer; under mixed precision with one
   * microbatch per step a region's 16-bit parameters' place receives its
   * gradients after backward. With data parallelism the chunk is the unit
   * of communication: at ZeRO stage 0 every rank keeps every chunk and a
   * gradient chunk is allreduced whole once backward has finished every
   * region in it; at ZeRO stage 3 (PatrickStar's distributed training, one
   * microbatch per step) parameter chunk c and its regions' optimizer state
   * are rank c % dp's alone, groups of dp chunks are all-gathered before a
   * pass uses them and their gradient chunks reduce-scattered. Needs
   * device_bytes, tp = pp = 1 and no optimizer offload. chunk_bytes: the
   * chunks' size, 0: PatrickStar's search (the size in [largest tensor,
   * 4 x it] that wastes least). */
  int offload_chunks;
  double chunk_bytes;
  /* Where the model, its parameters, gradients and optimizer state, and
   * the communication buffers live: PAR_DEVICE_CPU (-1, the default), N >= 0
   * cuda:N, PAR_DEVICE_CUDA (one GPU per rank: the rank's place among the
   * ranks of its node modulo the node's GPUs) or PAR_DEVICE_AUTO (that GPU
   * when the machine has one, else the CPU with one notice line on rank 0's
   * stderr). The GPU is made the process's current device before the first
   * collective; collectives on it go through NCCL on libcomm's own stream.
   * A CUDA device on a build without CUDA or a machine without a GPU is
   * STRATA_EUNSUPPORTED naming why; so are the layouts that do not run on a
   * device yet (ring self-attention, the interleaved pipeline schedule,
   * optimizer offload and the chunk policy). Tensor parallelism runs on
   * devices in every mode (1D, 2D, 2.5D, 3D). */
  int device;
  /* On a CUDA device: the model's fp32 GEMMs run with bf16 inputs and fp32
   * accumulation (libtensor's tensor_ctx_options_t.bf16_matmul). */
  int bf16_matmul;
  /* On a CUDA device: the dtype of the model's activations and their
   * gradients (par_gpt_options_t.act_dtype: TENSOR_F32, the default,
   * TENSOR_BF16 or TENSOR_F16 of strata/tensor.h). 16-bit activations on
   * the CPU, or with tensor, ring or pipeline parallelism, are
   * STRATA_EUNSUPPORTED naming why. */
  int activations;
} par_engine_options_t;
enum { PAR_DEVICE_CPU = -1, PAR_DEVICE_AUTO = -2, PAR_DEVICE_CUDA = -3 };
#define PAR_ENGINE_OPTIONS_DEFAULTS                                                                \
  {.seed = 1, .threads = 0, .steps = 1, .collective_timeout_s = 0.0, .comm = MPI_COMM_NULL,       \
   .init = NULL, .no_init = 0, .seq = 0, .bucket_mb = 25.0, .memory_bytes = 0.0, .delay_reductions_s = 0.0,     \
   .loss_scale = 0.0, .loss_scale_window = 0, .delay_ops_s = 0.0,  \
   .offload_dir = NULL, .device_bytes = 0.0, .host_bytes = 0.0, .offload_chunks = 0, .chunk_bytes = 0.0, \
   .device = -1, .bf16_matmul = 0, .activations = 0}

/* Creates the engine: validates the layout against the communicator
 * (par_layout_validate) and trains it: dp x tp x pp ranks, or dp x sp
 * with ring self-attention (sp consecutive ranks share their sequences'
 * tokens, T / sp each; strata/par_ring.h), with
 * ZeRO stage layout.zero_stage 0..3 (0..1 with pp > 1), Megatron tensor
 * parallelism over tp consecutive ranks (with its sequence parallelism
 * when layout.seq_parallel), pipeline stages outermost (rank / (dp tp) is
 * the stage) following layout.schedule (GPipe, 1F1B or interleaved with
 * layout.interleave chunks per stage; par_pipe.h), in layout.precision:
 * fp32, or bf16 or fp16 parameters, gradients and communication with fp32
 * masters and fp32 compute. It builds the model (initialised from
 * opts.seed; each rank holds its stage's blocks and its tensor slice) and
 * the optimizer. A step takes layout.global_batch sequences: each
 * data-parallel replica computes global_batch / dp of them in microbatches
 * of layout.microbatch (through the pipeline's schedule when pp > 1), and
 * the gradients are reduced once, after each region's last microbatch.
 * Collective. On failure *out is NULL and err names the value at fault. */
STRATA_API int par_engine_create(par_engine_t **out, const par_gpt_config_t *model,
                                 const par_layout_t *layout, const par_optim_config_t *optim,
                                 const par_engine_options_t *opts, char *err, size_t errlen);
/* Frees everything; collective. NULL is a no-op. */
STRATA_API void par_engine_destroy(par_engine_t *e);
STRATA_API const char *par_engine_error(const par_engine_t *e);
/* 1 when the last error was returned by every rank alike (see above). */
STRATA_API int par_engine_error_all_ranks(const par_engine_t *e);

/* What one optimizer step did. */
typedef struct {
  double loss;      /* mean training loss over the global batch */
  double grad_norm; /* global gradient norm, before clipping */
  double lr;        /* learning rate the update used */
  double seconds;   /* wall time of the step (data, compute, communication, update) */
  int stop;         /* a rank's stop flag was set (par_engine_watch_stop): the same on every rank */
  int skipped;      /* the loss or the gradients were not finite: no update was applied */
  double loss_scale; /* the scale the loss was multiplied by in backward (fp16; else 1) */
  int overflow;     /* fp16: skipped because the scaled gradients overflowed somewhere; the
                       scale was lowered (not divergence; at the scale's floor it is) */
  int overflow_here; /* this rank's part of the gradients held the non-finite values */
  /* Seconds from the step's start: when its last backward finished, when its
   * first gradient reduction was posted and when it was first seen
   * complete (0: none), to show that reductions overlap the backward. */
  double backward_end_s, first_post_s, first_done_s;
  /* When backward first reached one of its next events (a layer's
   * parameters needed, its gradients complete) with that first reduction
   * still in flight (0: never): it went on computing meanwhile. */
  double inflight_s;
  /* Pipeline parallelism: seconds this rank spent in its forwards and
   * backwards; the rest of the step is its bubble (waits for the
   * neighbouring stages), communication and the update. */
  double pipe_busy_s;
} par_step_t;

/* One optimizer step: this rank's next batch from data (par_data_next, its
 * data-parallel share), forward, backward, gradients averaged over the
 * global batch, clipping, the update. data is borrowed; every rank holds
 * its own handle at the same position. A failure of one rank's data or
 * model is every rank's: all return its status, with the message of the
 * lowest failing rank ("[rank 1] data: ..."), in the same step. A loss or
 * gradient norm that is not finite returns STRATA_OK with out->skipped
 * set and the parameters untouched: the caller decides what divergence
 * means. */
STRATA_API int par_engine_step(par_engine_t *e, par_data_t *data, par_step_t *out);
/* Lets a signal handler ask for a stop: *flag (set by the handler,
 * borrowed for the engine's life) is read at each step's reduction and
 * travels with the loss, so every rank sees par_step_t.stop in the same
 * step whichever rank caught the signal. NULL stops watching. */
STRATA_API void par_engine_watch_stop(par_engine_t *e, const volatile sig_atomic_t *flag);
/* The loss of the run's first step (kept in checkpoints, so a resumed run
 * has it too); NaN before the first step. The reference of divergence checks. */
STRATA_API double par_engine_initial_loss(const par_engine_t *e);
/* Mean validation loss over `batches` batches of layout.microbatch
 * sequences, shared among the ranks (NaN when data has no validation split). */
STRATA_API int par_engine_evaluate(par_engine_t *e, par_data_t *data, int batches, double *loss);

/* A name and a value, for the attributes a caller adds to checkpoints and
 * metrics files (the recipe, versions). Borrowed. */
typedef struct {
  const char *name, *value;
} par_attr_t;

/* Writes a checkpoint of the training state at `step`: parameters and
 * optimizer state as arrays of global shape (each rank its own range), the
 * optimizer step, data's position, the model, optimizer and layout
 * descriptions, and attrs. Written to "<path>.tmp" and renamed when
 * complete: a failure leaves the previous checkpoint at path as it was.
 * Collective; the status is the same on every rank. */
STRATA_API int par_engine_save(par_engine_t *e, const char *path, const par_data_t *data, long step,
                               const par_attr_t *attrs, int nattrs);
/* Loads a checkpoint written by par_engine_save under any layout: the
 * model must match (else ESHAPE naming both), the optimizer too. Restores
 * data's position and sets *step. Collective; same status on every rank. */
STRATA_API int par_engine_load(par_engine_t *e, const char *path, par_data_t *data, long *step);

/* Moves a run onto other ranks in memory, without a checkpoint file: an
 * elastic run that grows (its old ranks start new ones with comm_spawn,
 * strata/comm.h, and merge with them into `grown`) or changes its layout.
 * Every rank of grown calls it; `old` is the rank's engine of the old run
 * (NULL on ranks that had none: the new ones). It creates on grown the
 * engine of model, layout, optim and opts (as par_engine_create; opts->comm
 * is replaced by grown) and moves into it what par_engine_save would carry
 * to par_engine_load: the parameters (the fp32 masters under mixed
 * precision), the optimizer's moments and step, the loss scaler, the first
 * step's loss, data's position (set in `data`, the rank's handle of the
 * run's data: at its position on the old ranks, opened alike on the new
 * ones) and the caller's step counter (*step: read on the old ranks,
 * written on all). Each old rank sends the parts of the whole tensors it
 * holds, each rank receives the parts its new layout keeps, over libcomm
 * (point-to-point); the result is bit-identical to saving under the old
 * layout and loading under the new one. The old engine is left as it was:
 * the caller destroys it (collective over the old run's ranks). The model
 * and the optimizer must be the old run's (ESHAPE, EINVAL naming both);
 * any layout whose state stays in host memory moves (not the NVMe
 * optimizer offload, the chunk policy or device memory: EUNSUPPORTED,
 * before anything is created). Collective over grown; the status is every
 * rank's; on failure *out is NULL and err names the cause. */
STRATA_API int par_engine_migrate(par_engine_t *old, MPI_Comm grown, const par_gpt_config_t *model,
                                  const par_layout_t *layout, const par_optim_config_t *optim,
                                  const par_engine_options_t *opts, par_data_t *data, long *step,
                                  par_engine_t **out, char *err, size_t errlen);
/* One whole array of the training state, in the serial model's flat layout
 * (par_gpt.h; par_gpt_param_count floats, whatever the layout's sharding
 * and tensor slices), into out (host memory) on every rank: "params" (the
 * parameters; under mixed precision the fp32 masters), "m" or "v" (the
 * optimizer's first and second moments; EINVAL when it keeps none). What
 * two engines hold can be compared bit for bit with it. EUNSUPPORTED with
 * the NVMe optimizer offload, the chunk policy and device memory.
 * Collective over every rank of the run. */
STRATA_API int par_engine_get_state(par_engine_t *e, const char *array, float *out);

/* The model (borrowed). Its parameters live in the engine (sharded under
 * ZeRO): par_gpt_params of it is NULL. */
STRATA_API par_gpt_t *par_engine_model(par_engine_t *e);
/* The data-parallel communicator (borrowed): its counters are the step's traffic. */
STRATA_API comm_t *par_engine_comm(par_engine_t *e);
/* The communicator of one of the run's groups (borrowed; NULL when the
 * layout has none): "dp" (as par_engine_comm; with ring self-attention
 * every rank: the weights' gradients are averaged over dp x sp), "sp" (ring
 * self-attention's sequence group), "tp" (tensor parallelism),
 * "pp" (the pipeline's stages: activations and their gradients),
 * "embedding" (the first and last stages: the tied embedding's gradient
 * sum) or "run" (every rank, when there are several groups). Their
 * counters are each group's traffic. */
STRATA_API comm_t *par_engine_group(par_engine_t *e, const char *name);
/* Bytes of this rank: current and peak of the model's device accountant,
 * which counts the engine's parameters, gradients, optimizer state and
 * buffers with the model's activations. */
STRATA_API int par_engine_memory(const par_engine_t *e, size_t *current, size_t *peak);
/* What the planner predicts for this engine's model and layout on `ranks`
 * ranks instead (the data-parallel degree ranks / (tp pp sp), the same
 * global batch and microbatch): bytes per rank into *need; and into
 * *node_bytes the memory of this node that its ranks share, as the engine's
 * fit check saw it before allocating (0: unknown). STRATA_EINVAL when the
 * ranks do not take the layout or the global batch. An elastic run's
 * launcher chooses among the rank counts with it. */
STRATA_API int par_engine_plan_ranks(const par_engine_t *e, int ranks, double *need, double *node_bytes);
/* The whole parameters, in the model's flat layout (par_gpt.h; count
 * par_gpt_param_count), into out (host memory) on every rank. Collective
 * (under ZeRO-3 it gathers them). */
STRATA_API int par_engine_get_params(par_engine_t *e, float *out);

/* What the engine holds on this rank. */
typedef struct {
  int zero, ranks;       /* ZeRO stage, data-parallel ranks */
  int tp;                /* tensor-parallel ranks (Megatron 1D inside the model) */
  int pp, stage;         /* pipeline stages, and this rank's */
  int slots;             /* microbatches in flight on this stage at most (activation sets) */
  int precision;         /* par_precision_t */
  double loss_scale;     /* the current loss scale (fp16; else 1) */
  size_t params_padded;  /* parameters with each region padded to ranks x aligned shards */
  size_t shard_elems;    /* this rank's shard of them */
  size_t state_bytes[3]; /* persistent bytes: parameters, gradients, optimizer state
                            (ZeRO's model states, arXiv 1910.02054 sec. 5, for
                            params_padded parameters; under mixed precision 2 + 2
                            bytes and the fp32 masters with the optimizer's state) */
  int buckets;           /* ZeRO-0 gradient buckets */
  size_t offload_host_bytes; /* optimizer offload: bytes liboffload's host tier holds */
  size_t offload_nvme_bytes; /* and its NVMe tier (ZeRO-Infinity) */
  uint64_t offload_moved;    /* bytes moved between its tiers so far */
  uint64_t offload_moved_tier[3][3]; /* of them, from tier [a] (0 device, 1 host, 2 NVMe) to [b] */
  size_t offload_device_bytes; /* the chunk policy: bytes of chunks on the device now */
  size_t chunk_bytes, chunks;  /* and its chunks' size and count */
  int chunk_groups;      /* with ZeRO stage 3: groups of ranks parameter chunks, gathered as wholes */
  size_t device_peak;    /* the most bytes the device held: the accountant's, and the
                            chunk policy's chunks there at the same moment */
  uint64_t last_moved, last_optimal; /* the chunk policy's last step: bytes moved between
                            device and host, and an offline Belady schedule's on its events */
  long stalls;           /* the chunk policy: accesses that waited for gradient reductions
                            to unpin the device's chunks */
  size_t buffer_peak;    /* the most bytes of buffers a pass took and gave back
                            (ZeRO-2's gradient buckets, ZeRO-3's gathered regions,
                            the fp32 working copies of mixed precision) */
  int device;            /* where the engine trains: TENSOR_CPU (-1) or a CUDA ordinal */
} par_engine_info_t;
STRATA_API int par_engine_info(const par_engine_t *e, par_engine_info_t *out);

/* Sets the global batch of the next steps to global_batch sequences, a
 * multiple of layout.dp x layout.microbatch (each replica runs more or
 * fewer microbatches of the same shape), and every parameter group's peak
 * learning rate to the configuration's times lr_scale (the schedule still
 * applies). A batch warm-up or a learning-rate rule calls it before a step
 * (par_train_run does, from par_train_options_t.batch and lr_rule). Every
 * rank calls it with the same values. EUNSUPPORTED when the microbatches
 * per step would change with pipeline stages or the chunk policy (their
 * schedules are fixed at creation); EINVAL names a bad value. */
STRATA_API int par_engine_set_batch(par_engine_t *e, int global_batch, double lr_scale);
/* LAMB and LARS: the trust ratio each view (par_gpt_view i) got in the last
 * update (1 for views without layer adaptation: biases, norms), into
 * out[n], n = par_gpt_num_views; NaN where unknown: before the first
 * update, for other optimizers, with pipeline stages, and with the
 * streamed updates of ZeRO-Infinity and the chunk policy. */
STRATA_API int par_engine_trust_ratios(const par_engine_t *e, double *out, int n);

/* One-line descriptions stored in checkpoints and metrics ("layers=2 hidden=64 ...",
 * "adamw lr=0.01 ...", "dp=2 tp=1 ..."). Owned by the engine. */
STRATA_API const char *par_engine_describe(const par_engine_t *e, const char *what);

/* ---------------------------------------------------------------- the loop */

/* Reported to the progress callback once before the first step (begin = 1,
 * step = start, after a resume has loaded) and after every step (and its
 * evaluation and checkpoint, if any). */
typedef struct {
  int begin;                 /* 1: the call before the first step */
  int rank, ranks;
  long step, steps, start;   /* this step, the last one, the step resumed from */
  double loss, val_loss;     /* val_loss: NaN unless this step evaluated */
  double last_val_loss;      /* the latest evaluation so far (NaN before the first) */
  double lr, grad_norm;
  double tokens_per_s;       /* training throughput since the previous progress report */
  double elapsed_s, eta_s;
  size_t mem_peak;           /* bytes, this rank */
  int evaluated, saved;      /* this step evaluated / wrote a checkpoint */
  long last_ckpt_step;       /* the latest complete checkpoint (-1: none yet) */
  double loss_scale;         /* fp16: this step's loss scale (1 otherwise) */
  long overflows;            /* fp16: steps of this run skipped for an overflow so far */
  double resume_s;           /* begin after a resume: the seconds the checkpoint took to load */
} par_progress_t;

typedef struct {
  long steps;            /* run until this step (>= 1) */
  int eval_every;        /* evaluate every N steps; 0: only after the last */
  int eval_batches;      /* validation batches per evaluation */
  const char *ckpt_path; /* NULL: no checkpoints */
  long ckpt_every;       /* save every N steps; 0: none before the end */
  int ckpt_final;        /* save after the last step */
  const char *resume;    /* checkpoint to continue from; NULL: start at step 0 */
  const char *metrics_path; /* HDF5 metrics file written by rank 0; NULL: none */
  long metrics_every;    /* a metrics row every N steps (and at every evaluation) */
  const par_attr_t *attrs; /* added to the metrics file and checkpoints */
  int nattrs;
  /* A failed checkpoint (a full disk) ends the run with its error
   * (PAR_ON_ERROR_STOP, the default), or is reported through notice and
   * training goes on (PAR_ON_ERROR_CONTINUE). Either way the previous
   * checkpoint is kept and the partial file removed. */
  int ckpt_on_error;
  /* Divergence: the run ends with an error when the loss is not finite, or
   * exceeds diverge_factor times the first step's loss (0: only the
   * non-finite check). */
  double diverge_factor;
  /* Stop requests (signals), see par_engine_watch_stop: the run ends after
   * the step in which any rank's *stop was set, with a checkpoint when
   * ckpt_path is set, and res->stopped = 1. NULL: none. */
  const volatile sig_atomic_t *stop;
  /* With a batch schedule: end the run, with a checkpoint, after the last
   * step whose global batch is below this (0: never), res->grown = 1: an
   * elastic run's launcher then relaunches it on more ranks for the larger
   * batches (strata run's elastic.max_ranks). */
  long stop_before_batch;
  /* Called on every rank after every step; borrowed context. */
  void (*progress)(void *ctx, const par_progress_t *p);
  /* Called on rank 0 with things the user should know that do not stop the
   * run (a leftover partial checkpoint removed, a failed checkpoint under
   * PAR_ON_ERROR_CONTINUE). NULL: not reported. */
  void (*notice)(void *ctx, const char *msg);
  void *ctx;
  /* Batch warm-up (liboptim's optim_batch_schedule): batch.start > 0 makes
   * step s take optim_batch_at(&batch, s - 1) sequences, growing to
   * layout.global_batch (batch.end and batch.quantum = dp x microbatch and
   * batch.seq are filled in when 0). The learning rate of each step is then
   * the configuration's times optim_lr_batch_factor(lr_rule, B, lr_batch)
   * for that step's batch B (lr_batch 0: layout.global_batch, the rate
   * holding at the full batch); lr_rule applies without a warm-up too.
   * Recomputed from the step on resume. batch.start = 0: the layout's
   * batch at every step. */
  optim_batch_schedule batch;
  int lr_rule;     /* enum optim_lr_rule */
  double lr_batch; /* sequences */
} par_train_options_t;
enum { PAR_ON_ERROR_STOP = 0, PAR_ON_ERROR_CONTINUE = 1 };
#define PAR_TRAIN_OPTIONS_DEFAULTS                                                                 \
  {.steps = 1, .eval_every = 0, .eval_batches = 8, .ckpt_final = 1, .metrics_every = 1,           \
   .ckpt_on_error = PAR_ON_ERROR_STOP, .diverge_factor = 4.0}

/* How a run ended. */
typedef struct {
  long start;              /* step resumed from (0: a fresh run) */
  long step;               /* last step completed */
  double loss, val_loss;   /* last training loss, last validation loss (NaN if none) */
  double tokens_per_s;     /* mean training throughput (excluding evaluation and I/O) */
  double train_seconds, elapsed_seconds;
  long last_ckpt_step;     /* the latest complete checkpoint written or resumed from (-1: none) */
  const char *last_ckpt_path; /* its path (opts.ckpt_path or opts.resume; NULL: none) */
  int stopped;             /* ended early on a stop request (opts.stop) */
  int grown;               /* ended early at opts.stop_before_batch (then stopped too) */
  int diverged;            /* the error is a divergence of the loss */
  /* Where an error happened: "resume", "start", "step", "evaluation",
   * "checkpoint" or "end" (the last metrics rows), at step fail_step (the
   * step in progress, or the one whose evaluation or checkpoint failed). */
  const char *fail_phase;
  long fail_step;
} par_train_result_t;

/* Runs the loop: resumes from opts.resume if given (restoring the step,
 * optimizer state and data position), then steps until opts.steps,
 * evaluating, appending metrics rows (rank 0; on resume the rows after
 * the checkpoint are cut and recomputed) and saving checkpoints as asked.
 * data is borrowed. *res (may be NULL) is filled on success and failure
 * alike. Collective. */
STRATA_API int par_train_run(par_engine_t *e, par_data_t *data, const par_train_options_t *opts,
                             par_train_result_t *res);

#ifdef __cplusplus
}
#endif

#endif
