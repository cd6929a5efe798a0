/* strata/parallel.h: libparallel, where strata's libraries compose.
 *
 * One description of a model (par_gpt_config_t) and of a layout
 * (par_layout_t) drives everything here: the planner predicts memory and
 * time from them, and the real runs build from the same structs, so the
 * planner's predictions can be checked against measured runs.
 *
 * The API is split over a few headers included from here:
 *   strata/par_gpt.h    the GPT model (forward, backward, named parameter views);
 *                       stands alone (libtensor only, no MPI or HDF5)
 *   strata/par_plan.h   the cost model / planner and layout validation
 *   strata/par_io.h     data loading, HDF5 metrics and checkpoints
 *   strata/par_train.h  the training engine and loop (libcomm, liboptim)
 *   strata/par_pipe.h   pipeline schedules as data (GPipe, 1F1B, interleaved)
 * Prefix: par_. Status codes: strata/status.h; par_strerror() explains them. */
#ifndef STRATA_PARALLEL_H
#define STRATA_PARALLEL_H

#include <stddef.h>
#include <stdint.h>
#include <strata/status.h>
#include <strata/par_gpt.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { PAR_TP_1D = 0, PAR_TP_2D, PAR_TP_2P5D, PAR_TP_3D } par_tp_mode_t;
typedef enum { PAR_SCHED_GPIPE = 0, PAR_SCHED_1F1B, PAR_SCHED_INTERLEAVED } par_schedule_t;
typedef enum { PAR_TIER_DEVICE = 0, PAR_TIER_CPU, PAR_TIER_NVME } par_tier_t;
typedef enum { PAR_PREC_FP32 = 0, PAR_PREC_BF16, PAR_PREC_FP16 } par_precision_t;

/* How a run is laid out over dp * tp * pp * sp devices. */
typedef struct {
  int dp, tp, pp, sp;      /* data, tensor, pipeline, sequence degrees (>= 1) */
  par_tp_mode_t tp_mode;   /* 1d (Megatron), 2d (SUMMA, tp = q^2),
                              2.5d (tp = q^2 * depth), 3d (tp = q^3) */
  int tp_depth;            /* d of 2.5D tensor parallelism (1 otherwise) */
  int zero_stage;          /* 0..3 */
  int microbatch;          /* sequences per microbatch (b) */
  int global_batch;        /* sequences per optimizer step (B) */
  par_schedule_t schedule; /* pipeline schedule */
  int interleave;          /* model chunks per stage for the interleaved schedule */
  par_precision_t precision; /* compute precision of parameters/activations */
  par_tier_t offload_optimizer; /* where fp32 master + optimizer states live */
  par_tier_t offload_gradients;
  par_tier_t offload_params;
  int seq_parallel;        /* with tp (1d): Megatron's sequence parallelism (Korthikanti et
                              et al. 2022; not the ring-attention degree sp) */
  int partition_activations; /* with recompute: DeepSpeed's partitioned activation checkpoints,
                              each kept block input split over the tensor group */
  int checkpoint_cpu;      /* with recompute: the kept block inputs held in host memory */
} par_layout_t;
#define PAR_LAYOUT_DEFAULTS                                                                        \
  {.dp = 1, .tp = 1, .pp = 1, .sp = 1, .tp_mode = PAR_TP_1D, .tp_depth = 1, .zero_stage = 0,       \
   .microbatch = 1, .global_batch = 1, .schedule = PAR_SCHED_1F1B, .interleave = 1,               \
   .precision = PAR_PREC_FP32}

/* A short description of a status code; never NULL. */
STRATA_API const char *par_strerror(int code);

/* A call that cannot be left: a collective step of parallel HDF5 that
 * another rank never reaches waits inside MPI forever. libparallel's
 * watcher (checkpoints with a timeout) reports it from its own thread to
 * the handler set here, once, with one line naming the checkpoint and the
 * step. The handler decides: the strata runner adds the training step and
 * the way back, prints it and ends the process (exit status 1). Without a
 * handler the line goes to stderr and the call keeps waiting: ending the
 * process is the application's choice, never the library's. */
typedef void (*par_fatal_fn)(const char *msg, void *arg);
STRATA_API void par_set_fatal_handler(par_fatal_fn fn, void *arg);

#ifdef __cplusplus
}
#endif

#include <strata/par_plan.h>
#include <strata/par_io.h>
#include <strata/par_train.h>
#include <strata/par_pipe.h>
#include <strata/par_ring.h>
#include <strata/par_summa.h>
#include <strata/par_mm3d.h>
#include <strata/par_tplayer.h>

#endif
