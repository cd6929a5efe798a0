/* liboptim internals: the per-tensor job every kernel (CPU and CUDA) runs.
 *
 * The host computes every per-tensor scalar (learning rate after schedule and
 * trust ratio, bias corrections) in double and hands the kernels a job per
 * tensor; the kernels are then pure element-wise passes, identical on every
 * shard of a tensor. */
#ifndef OPTIM_INTERNAL_H
#define OPTIM_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Kernel operations. */
enum optim_op {
  OP_SGD = 0,        /* apply SGD / momentum / Nesterov */
  OP_ADAMW = 1,      /* apply AdamW */
  OP_LAMB_PARTS = 2, /* advance m, v; sums ||x||^2, ||r||^2 */
  OP_LAMB = 3,       /* apply LAMB from m, v */
  OP_LARS_PARTS = 4, /* sums ||w||^2, ||g||^2 */
  OP_LARS = 5,       /* apply LARS */
  OP_GRAD_SUMSQ = 6, /* sums ||g||^2 (unscaled) */
  OP_COUNT = 7
};

typedef struct optim_job {
  float *p;
  const float *g;
  float *m;
  float *v;
  void *lowp;
  size_t n;
  int lowp_dtype; /* enum optim_lowp */
  int nesterov;
  float lr; /* applied step size: group lr x schedule x trust ratio */
  float wd; /* weight decay */
  float gs; /* gradient scale */
  float b1; /* beta1, or momentum mu */
  float b2; /* beta2 */
  float c1; /* 1 / (1 - beta1^t), or 1 */
  float c2; /* 1 / sqrt(1 - beta2^t), or 1 */
  float eps;
} optim_job;

/* A range kernel: processes elements [a, b) of one job; ops that produce sums
 * add theirs to s[0], s[1]. */
typedef void (*optim_range_fn)(const optim_job *j, size_t a, size_t b, double *s);

/* Kernel tables per ISA (kernels.c); NULL entries do not exist. */
extern const optim_range_fn optim_kernels_scalar[OP_COUNT];
extern const optim_range_fn optim_kernels_avx2[OP_COUNT];
extern const optim_range_fn optim_kernels_avx512[OP_COUNT];
int optim_cpu_has_avx512(void);
/* Formats the message into buf (when buf and len) and returns code. */
int optim_fail_msg(char *buf, size_t len, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Runs op over all jobs on nthreads CPU threads; sums[2 nj] when the op
 * produces sums (combined in a fixed order: deterministic for a given thread
 * count). Returns 0 or STRATA_ENOMEM. */
int optim_cpu_run(const optim_range_fn *table, int op, const optim_job *jobs, int nj, int nthreads,
                  double *sums);

#ifdef STRATA_CUDA
/* cuda/optim_kernels.cu. Number of usable devices (0 when none). */
int optim_cuda_device_count(void);
/* Runs op over jobs whose arrays live on the current device, on stream;
 * sums (host, [2 nj]) when the op produces them, synchronously then.
 * Returns 0 or STRATA_ECUDA/ENOMEM with a message in err. */
int optim_cuda_run(int device, void *stream, int op, const optim_job *jobs, int nj, double *sums,
                   char *err, size_t errlen);
#endif

#ifdef __cplusplus
}
#endif
#endif
