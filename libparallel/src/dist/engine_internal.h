/* The engine's internals, shared by engine.c (create, step, evaluate),
 * engine_ckpt.c (save, load) and train.c (the loop). */
#ifndef STRATA_PAR_ENGINE_INTERNAL_H
#define STRATA_PAR_ENGINE_INTERNAL_H

#include <signal.h>

#include <strata/comm.h>
#include <strata/optim.h>
#include <strata/parallel.h>

struct par_engine {
  par_gpt_config_t mc;
  par_layout_t layout;
  par_engine_options_t opts;
  par_gpt_t *model;
  comm_t *comm; /* the data-parallel group */
  int rank, size;
  int accum; /* microbatches per step: global_batch / (dp * microbatch) */
  int seq;   /* tokens per sample */
  /* optimizer */
  optim *opt;
  char optim_name[16];
  double clip;
  float *m, *v;       /* state, flat like the parameters (NULL when unused) */
  size_t state_bytes; /* bytes of m and v */
  optim_tensor *tens; /* one per model view */
  double *sq;         /* per-view sums of squares of the gradients */
  int nt;
  int32_t *in, *tg; /* one microbatch of inputs and targets */
  char model_desc[256], optim_desc[512], layout_desc[160];
  double loss0; /* the loss of the run's first step (NaN before it; kept in checkpoints) */
  const volatile sig_atomic_t *stop_flag; /* par_engine_watch_stop */
  int pending_rc;                         /* engine_defer_error: joins the next step */
  char pending_msg[1024];
  char err[1536];
  int err_all; /* the last error was returned by every rank */
};

/* Sets the engine's error (all: every rank returns it) and returns code. */
int engine_fail(par_engine_t *e, int all, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Monotonic seconds. */
double engine_now(void);
/* Every rank leaves with the status of the lowest failing rank (see engine.c). */
int engine_agree(par_engine_t *e, int rc);
/* An error of this rank outside a step (rank 0's metrics file) that the
 * next step's reduction makes every rank's. */
void engine_defer_error(par_engine_t *e, int rc, const char *msg);

#endif
