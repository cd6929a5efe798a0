/* strata/par_pipe.h - pipeline schedules as data (libparallel).
 *
 * A pipeline of p stages (devices) runs m microbatches per step; with an
 * interleave of v each device holds v model chunks, virtual stage c p + s
 * being chunk c of device s (Narayanan et al., arXiv 2104.04473, sec. 2.2).
 * A schedule is the ordered list of forward and backward operations of each
 * device, built here once and then only followed: printed, simulated and
 * checked by tests, executed by the runtime.
 *
 *   GPipe (Huang et al. 2019): every forward, then every backward.
 *   1F1B (PipeDream-Flush, Narayanan et al. 2021): stage s runs p - s - 1
 *     warm-up forwards, then one forward and one backward in turn, then
 *     the remaining backwards; at most p microbatches in flight.
 *   Interleaved 1F1B (Megatron): microbatches in groups of p, each through
 *     chunk 0, 1, ... of the device; 2 (p - s - 1) + (v - 1) p warm-up
 *     forwards; m a multiple of p.
 *
 *   par_pipe_t *pp;
 *   par_pipe_create(&pp, PAR_SCHED_1F1B, 4, 8, 1, err, sizeof err);
 *   const par_pipe_op_t *ops; int n = par_pipe_ops(pp, 0, &ops);
 *   par_pipe_stats_t st; par_pipe_simulate(pp, 1.0, 2.0, &st);  // st.bubble = 3 / 11
 *
 * par_pipe_rounds gives the messages between the stages in the order every
 * stage posts them (see there why an order is needed at all).
 */
#ifndef STRATA_PAR_PIPE_H
#define STRATA_PAR_PIPE_H

#include <stdio.h>
#include <strata/parallel.h>
#include <strata/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { PAR_PIPE_FORWARD = 0, PAR_PIPE_BACKWARD = 1 } par_pipe_kind_t;

/* One operation of a device: the forward or backward of a microbatch
 * through one of its chunks. */
typedef struct {
  int kind;       /* par_pipe_kind_t */
  int microbatch; /* 0 .. m - 1 */
  int chunk;      /* 0 .. v - 1: virtual stage chunk p + stage */
} par_pipe_op_t;

typedef struct par_pipe par_pipe_t;

/* The schedule `kind` for `stages` devices and `microbatches` microbatches
 * (interleave: chunks per device, >= 2 for PAR_SCHED_INTERLEAVED with
 * microbatches a multiple of stages; 1 otherwise). EINVAL names the value
 * at fault in err. */
STRATA_API int par_pipe_create(par_pipe_t **out, par_schedule_t kind, int stages, int microbatches, int interleave,
                               char *err, size_t errlen);
STRATA_API void par_pipe_destroy(par_pipe_t *p);
/* Device `stage`'s operations in order (*ops borrowed); returns their count
 * (2 m v), or -1 for a stage out of range. */
STRATA_API int par_pipe_ops(const par_pipe_t *p, int stage, const par_pipe_op_t **ops);

/* The step's messages as lock-step rounds, the one order every stage posts
 * them in (the runtime follows it on the CPU and on devices alike).
 *
 * Why rounds. NCCL ignores tags: it pairs a peer's sends with one's
 * receives in call order, and each communicator's operations run one group
 * after another on one stream, a send waiting (beyond NCCL's buffers) for
 * its receive. Posting each message when one's own schedule reaches it is
 * then not enough: under the interleaved schedule a stage's group can hold
 * a send whose receive sits in its peer's next group while the peer's group
 * holds a send whose receive sits in a later group of the first stage's (a
 * cycle through one or more stages), and all of them wait for ever
 * (tests/plan/test_pipe.c replays such a case). So the step is cut into
 * rounds, found by running the schedule in lock step: in round t a stage
 * runs its next operation when that operation's input was produced in a
 * round before t. Every message is
 * posted in the round of the operation that produces it, by both its
 * sender (after that operation) and its receiver (whose consumer runs in a
 * later round), as one group per stage and round, in the order (kind,
 * microbatch, sending virtual stage): the k-th send from one stage to
 * another is then the other's k-th receive from it, and round t's groups,
 * all of whose partners are in round t's groups, complete once every round
 * before has (induction on t), whatever the message sizes. A stage waits
 * for a message only in a later round than the one that posted it. */
typedef struct {
  int kind;       /* PAR_PIPE_FORWARD: the activations virtual stage `from` passes to from + 1;
                     PAR_PIPE_BACKWARD: the input gradient `from` passes to from - 1 */
  int microbatch;
  int from;       /* the sending virtual stage, chunk p + stage */
  int send;       /* 1: this stage sends it, 0: this stage receives it */
  int peer;       /* the other stage */
} par_pipe_msg_t;

typedef struct {
  int op;                      /* this stage's operation in the round (index into par_pipe_ops), or -1 */
  int nmsgs;                   /* messages posted after it, in this order, as one group */
  const par_pipe_msg_t *msgs;
} par_pipe_round_t;

/* Device `stage`'s rounds (*rounds borrowed; the count is the same for every
 * stage); returns their count, or -1 for a stage out of range. */
STRATA_API int par_pipe_rounds(const par_pipe_t *p, int stage, const par_pipe_round_t **rounds);

/* What a simulated run of the schedule shows. */
typedef struct {
  double makespan;  /* time of the step */
  double bubble;    /* idle share of the p x makespan device time */
  int max_inflight[64]; /* per stage (first 64): most chunk activations held (forwards whose
                           backward has not run) */
} par_pipe_stats_t;
/* Runs the schedule with each chunk's forward taking tf / v and backward
 * tb / v: an operation starts when its device is free and its input has
 * arrived (the previous virtual stage's forward of the microbatch, the
 * next one's backward). STRATA_EINVAL for a schedule that deadlocks. */
STRATA_API int par_pipe_simulate(const par_pipe_t *p, double tf, double tb, par_pipe_stats_t *st);
/* The schedule, one line per stage: "stage 0: F0 F1 B0 F2 ..." (with
 * interleave "F0.1": microbatch 0, chunk 1). */
STRATA_API int par_pipe_print(const par_pipe_t *p, FILE *f);

#ifdef __cplusplus
}
#endif

#endif
