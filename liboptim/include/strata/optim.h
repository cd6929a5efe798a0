/* strata/optim.h: fused optimizer updates over flat fp32 arrays, on CPU
 * (OpenMP, AVX2/AVX-512 chosen at run time) and CUDA (multi-tensor kernels).
 *
 * liboptim depends on no other strata library. Updates that need norms over a
 * whole tensor (LAMB, LARS, global-norm clipping) are two-phase, so that a
 * tensor split over ranks (ZeRO, tensor parallelism) gets exactly the update
 * it gets whole, whatever does the communication:
 *
 *   optim_partials()  per-tensor partial sums of squares over the local shard
 *   (caller)          sums the partials over the shards of each tensor
 *   optim_apply()     the update, from the reduced sums
 *
 * Algorithms, with t the 1-based step, g = grad_scale * grad, lr the group's
 * learning rate times the schedule factor, wd the group's weight decay:
 *
 *  SGD (Robbins & Monro 1951), momentum (Polyak 1964) and Nesterov momentum
 *  (Sutskever et al. 2013, eqs. 3-4, in the reformulation of Bengio et al.
 *  2013 that PyTorch uses):
 *      d = g + wd p;  b = mu b + d;  p -= lr (nesterov ? d + mu b : b)
 *      (mu = 0: p -= lr d, no state read)
 *  AdamW (Loshchilov & Hutter, arXiv 1711.05101, Algorithm 2, lines 6-12;
 *  decay written relative to the learning rate, lr = eta_t alpha, as PyTorch
 *  and the LAMB paper write it):
 *      m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
 *      m^ = m / (1 - b1^t);  v^ = v / (1 - b2^t)   (bias_correction = 1)
 *      p -= lr (m^ / (sqrt(v^) + eps) + wd p)
 *  LAMB (You et al., arXiv 1904.00962, Algorithm 2), per tensor x:
 *      m, v, m^, v^ as AdamW;  r = m^ / (sqrt(v^) + eps) + wd x
 *      trust = phi(||x||) / ||r||,  1 if ||x|| = 0 or ||r|| = 0,
 *      phi(z) = min(max(z, phi_min), phi_max) (phi_max = 0: no upper clamp)
 *      x -= lr trust r
 *  LARS (You, Gitman & Ginsburg, arXiv 1708.03888, Algorithm 1), per tensor w:
 *      local = eta ||w|| / (||g|| + wd ||w||),  1 if ||w|| = 0 or ||g|| = 0
 *      b = mu b + lr local (g + wd w);  w -= b
 *  A group with adapt = 0 (biases, norm parameters) gets trust = local = 1:
 *  LAMB then is AdamW and LARS momentum SGD. Set its weight_decay to 0 too if
 *  it should not decay.
 *
 * Threads: every call runs an OpenMP team of config.threads (0: the OpenMP
 * default). Conventions: 0 on success or a negative STRATA_E* code; the
 * handle keeps a message naming the offending values (optim_last_error). */
#ifndef STRATA_OPTIM_H
#define STRATA_OPTIM_H

#include <stddef.h>
#include <stdint.h>
#include <strata/status.h>

#ifdef __cplusplus
extern "C" {
#endif

enum optim_kind { OPTIM_SGD = 0, OPTIM_ADAMW = 1, OPTIM_LAMB = 2, OPTIM_LARS = 3 };
enum optim_device { OPTIM_CPU = 0, OPTIM_CUDA = 1 };
/* Dtype of the optional low-precision copy of the parameters. */
enum optim_lowp { OPTIM_LOWP_NONE = 0, OPTIM_LOWP_BF16 = 1, OPTIM_LOWP_F16 = 2 };
/* CPU instruction set of the kernels; AUTO takes the best this CPU has. */
enum optim_isa {
  OPTIM_ISA_AUTO = 0,
  OPTIM_ISA_SCALAR = 1,
  OPTIM_ISA_AVX2 = 2,
  OPTIM_ISA_AVX512 = 3
};

typedef struct optim optim;
typedef struct optim_scaler optim_scaler;

typedef struct optim_config {
  int kind;        /* enum optim_kind */
  int device;      /* enum optim_device: where every array passed lives */
  int cuda_device; /* CUDA device ordinal (device = OPTIM_CUDA) */
  void *stream;    /* cudaStream_t to run on; NULL: the default stream */
  int threads;     /* CPU threads; 0: the OpenMP default */
  int isa;         /* enum optim_isa (CPU) */
} optim_config;
#define OPTIM_CONFIG_DEFAULTS                                                                      \
  { OPTIM_ADAMW, OPTIM_CPU, 0, NULL, 0, OPTIM_ISA_AUTO }

/* Hyper-parameters of one parameter group. Fields an optimizer does not use
 * are ignored (but still validated when set to nonsense). */
typedef struct optim_group {
  float lr;            /* base learning rate (>= 0), times the schedule factor */
  float weight_decay;  /* >= 0 */
  float momentum;      /* SGD and LARS: mu in [0, 1) */
  int nesterov;        /* SGD: Nesterov momentum (needs momentum > 0) */
  float beta1, beta2;  /* AdamW, LAMB: in [0, 1) */
  float eps;           /* AdamW, LAMB: > 0 */
  int bias_correction; /* AdamW, LAMB: divide by 1 - beta^t */
  int adapt;           /* LAMB, LARS: layer adaptation (trust ratio) on */
  float trust_coef;    /* LARS: eta > 0 */
  float phi_min;       /* LAMB: lower clamp of ||x|| in the trust ratio (>= 0) */
  float phi_max;       /* LAMB: upper clamp of ||x||; 0: none */
} optim_group;

/* The defaults of each optimizer's paper: AdamW lr 1e-3, betas 0.9/0.999,
 * eps 1e-8, wd 0.01; LAMB the same with eps 1e-6; SGD lr 0.01, momentum 0;
 * LARS lr 0.1, momentum 0.9, eta 1e-3, wd 5e-4. adapt and bias_correction 1. */
STRATA_API optim_group optim_group_defaults(int kind);

/* One tensor (or the local shard of one): views into flat fp32 arrays of n
 * elements on the handle's device. Borrowed for the call only. */
typedef struct optim_tensor {
  float *param;      /* [n] fp32 master parameters, updated in place */
  const float *grad; /* [n] gradients (times grad_scale when used) */
  float *m;          /* [n] momentum / first moment (NULL for SGD with mu = 0) */
  float *v;          /* [n] second moment (AdamW, LAMB; else NULL) */
  void *lowp;        /* [n] optional bf16/f16 copy of param written in the same pass */
  int lowp_dtype;    /* enum optim_lowp */
  int group;         /* parameter group id */
  size_t n;
} optim_tensor;

/* Sums of squares per tensor returned by optim_partials: sums[2 i + 0] and
 * sums[2 i + 1] belong to tensor i. */
#define OPTIM_NSUMS 2

/* Creates a handle; cfg NULL means defaults. On failure *out is NULL and err
 * (may be NULL) receives a message. OPTIM_CUDA on a build without CUDA or a
 * machine without a GPU returns STRATA_EUNSUPPORTED. Caller destroys. */
STRATA_API int optim_create(optim **out, const optim_config *cfg, char *err, size_t errlen);
/* Frees the handle; NULL is a no-op. Arrays passed in are never owned. */
STRATA_API void optim_destroy(optim *o);
/* The last error message of this handle ("" when none); owned by the handle. */
STRATA_API const char *optim_last_error(const optim *o);
STRATA_API const char *optim_strerror(int code);
/* The ISA the CPU kernels run with (enum optim_isa, never AUTO). */
STRATA_API int optim_isa_in_use(const optim *o);

/* Adds a parameter group (hp NULL: optim_group_defaults(kind)); its id
 * (0, 1, ...) goes to *id. STRATA_EINVAL names a bad hyper-parameter. */
STRATA_API int optim_add_group(optim *o, const optim_group *hp, int *id);
/* Replaces the hyper-parameters of group id. */
STRATA_API int optim_set_group(optim *o, int id, const optim_group *hp);
STRATA_API int optim_get_group(const optim *o, int id, optim_group *hp);

/* Steps applied so far (t - 1 of the next update); settable for resumes. */
STRATA_API long optim_get_step(const optim *o);
STRATA_API int optim_set_step(optim *o, long step);

/* Phase one. Writes sums[2 nt] (host memory, nsums must be 2 nt): LAMB
 * {||x||^2, ||r||^2} and advances m and v (so call it once per step, after
 * deciding not to skip it); LARS {||w||^2, ||g||^2}; SGD and AdamW zeros
 * (phase one is optional for them). grad_scale multiplies the gradients
 * (loss-scale inverse times clip coefficient, see optim_grad_scale). */
STRATA_API int optim_partials(optim *o, double *sums, size_t nsums, const optim_tensor *t, int nt,
                              float grad_scale);
/* Phase two: applies the update from sums reduced over all shards of each
 * tensor (NULL allowed for SGD and AdamW), then counts the step. For LAMB
 * it must follow optim_partials on the same tensors (STRATA_ESTATE if not),
 * and its grad_scale is not used (phase one consumed the gradients; grad
 * may then be NULL). On CUDA it is asynchronous on the handle's stream;
 * optim_partials and optim_grad_sumsq synchronise it (they return sums). */
STRATA_API int optim_apply(optim *o, const optim_tensor *t, int nt, const double *sums,
                           size_t nsums, float grad_scale);
/* Both phases for whole tensors held by one process. */
STRATA_API int optim_step(optim *o, const optim_tensor *t, int nt, float grad_scale);
/* One step over tensors that are not all in memory at once (streamed from
 * an offload tier): between optim_step_begin and optim_step_end, phase one
 * and phase two (or optim_step) may run on disjoint parts of the tensors,
 * each part's phase one before its phase two; all use the same step, which
 * is counted at optim_step_end. The result equals one call over all. */
STRATA_API int optim_step_begin(optim *o);
STRATA_API int optim_step_end(optim *o);

/* Clipping and inf/nan detection, phase one: sumsq[i] = sum of grad_i^2 over
 * the local shard (double; +inf or nan when a gradient is not finite). The
 * caller sums over tensors and shards, counting replicated tensors once. */
STRATA_API int optim_grad_sumsq(optim *o, double *sumsq, const optim_tensor *t, int nt);
/* Phase two (pure): from the global sum of squares of the scaled gradients,
 * *grad_scale = (1 / loss_scale) min(1, max_norm / (||g|| + 1e-6)) with
 * ||g|| = sqrt(global_sumsq) / loss_scale (max_norm <= 0: no clipping), and
 * *norm = ||g|| (may be NULL). Returns STRATA_EINVAL for loss_scale <= 0;
 * a non-finite sum gives *grad_scale = 0 and *norm = inf or nan. */
STRATA_API int optim_grad_scale(double global_sumsq, float loss_scale, float max_norm,
                                float *grad_scale, double *norm);

/* Learning-rate schedules: factor f(t) for the update with 0-based index t
 * (the handle's step). Warm-up: f = (t + 1) / warmup for t < warmup; then
 * with q = min(1, (t - warmup) / (total - warmup)):
 *   CONSTANT f = 1;  POLY f = end + (1 - end) (1 - q)^power;
 *   COSINE f = end + (1 - end) (1 + cos(pi q)) / 2
 * (LARS' paper uses POLY with power 2; BERT/LAMB POLY with power 1). */
enum optim_sched_kind { OPTIM_SCHED_CONSTANT = 0, OPTIM_SCHED_POLY = 1, OPTIM_SCHED_COSINE = 2 };
typedef struct optim_schedule {
  int kind;
  long warmup;  /* warm-up updates (>= 0) */
  long total;   /* updates at which decay ends (> warmup for POLY/COSINE) */
  double power; /* POLY exponent (> 0) */
  double end;   /* final factor in [0, 1] */
} optim_schedule;
#define OPTIM_SCHEDULE_DEFAULTS                                                                    \
  { OPTIM_SCHED_CONSTANT, 0, 0, 1.0, 0.0 }
/* Sets the handle's schedule (NULL: constant). Validated. */
STRATA_API int optim_set_schedule(optim *o, const optim_schedule *s);
/* The factor at update t; s must be valid (see optim_set_schedule). */
STRATA_API double optim_schedule_factor(const optim_schedule *s, long t);
/* The learning rate group id will use at the next update. */
STRATA_API int optim_current_lr(const optim *o, int id, float *lr);

/* Batch-size warm-up (GPT-3, Brown et al. arXiv 2005.14165 sec. 2.3 and
 * appendix B; MT-NLG, Smith et al. arXiv 2201.11990 sec. 3.2): the global
 * batch of update t (0-based) grows from `start` to `end` sequences, in
 * multiples of `quantum` above start (one microbatch on every replica: the
 * batch changes by the number of microbatches, so every shape stays), over
 * the first `warmup` updates or, when warmup_tokens > 0, over the first
 * warmup_tokens tokens (seq tokens per sequence). With n = (end - start) /
 * quantum and q the fraction of the warm-up done before update t,
 *   by updates: q = min(1, t / warmup)
 *   by tokens:  q = min(1, T(t) / warmup_tokens), T(t) = seq sum_{u<t} B(u)
 *   B(t) = start + quantum floor(n q)
 * so B(0) = start and B = end from update `warmup` (or the update whose
 * tokens before it reach warmup_tokens) on. start = end: a constant batch. */
typedef struct optim_batch_schedule {
  long start, end;      /* sequences per update, 1 <= start <= end */
  long quantum;         /* >= 1, divides start and end */
  long warmup;          /* updates of the warm-up (>= 0; with warmup_tokens: 0) */
  double warmup_tokens; /* tokens of the warm-up (>= 0) */
  long seq;             /* tokens per sequence (>= 1) */
} optim_batch_schedule;
/* STRATA_EINVAL with a message in err naming the value at fault. */
STRATA_API int optim_batch_schedule_check(const optim_batch_schedule *s, char *err, size_t errlen);
/* The global batch of update t (s valid). */
STRATA_API long optim_batch_at(const optim_batch_schedule *s, long t);
/* Tokens of the updates before t, seq sum_{u<t} B(u) (s valid). */
STRATA_API double optim_batch_tokens_before(const optim_batch_schedule *s, long t);

/* Learning-rate rules for a batch other than the one the rate was tuned at:
 * the rate is multiplied by optim_lr_batch_factor(rule, batch, ref) =
 *   NONE 1;  LINEAR batch / ref (Goyal et al., arXiv 1706.02677 sec. 2.1,
 *   for SGD; LARS);  SQRT sqrt(batch / ref) (Krizhevsky, arXiv 1404.5997;
 *   Hoffer et al. 2017; You et al.'s LAMB, arXiv 1904.00962 sec. 4, and
 *   Adam-type methods, Malladi et al. arXiv 2205.10287). */
enum optim_lr_rule { OPTIM_LR_RULE_NONE = 0, OPTIM_LR_RULE_LINEAR = 1, OPTIM_LR_RULE_SQRT = 2 };
/* The factor; batch and ref > 0 (1 otherwise). */
STRATA_API double optim_lr_batch_factor(int rule, double batch, double ref);

/* The trust ratio (LAMB's phi(||x||) / ||r||, LARS' local learning rate
 * eta ||w|| / (||g|| + wd ||w||)) that optim_apply uses for a tensor of
 * group id from its two reduced sums of squares (optim_partials' sums[2 i],
 * sums[2 i + 1]); 1 for a group without adaptation and for SGD and AdamW.
 * For recording layer-wise statistics without a second pass. */
STRATA_API int optim_trust_ratio(const optim *o, int id, double sumsq0, double sumsq1, double *trust);

/* Dynamic loss scaling for fp16 (Micikevicius et al., arXiv 1710.03740,
 * Section 3.2): the loss is multiplied by scale; a step whose gradients hold
 * an inf or nan on any shard is skipped and the scale multiplied by backoff;
 * after `window` consecutive good steps it is multiplied by growth. */
typedef struct optim_scaler_config {
  float init_scale; /* > 0 */
  float growth;     /* > 1 */
  float backoff;    /* in (0, 1) */
  int window;       /* good steps before growing, >= 1 */
  float min_scale;  /* floor of the scale, > 0 */
  float max_scale;  /* ceiling of the scale, >= min_scale */
} optim_scaler_config;
#define OPTIM_SCALER_DEFAULTS                                                                      \
  { 65536.0f, 2.0f, 0.5f, 2000, 1.0f, 16777216.0f }

STRATA_API int optim_scaler_create(optim_scaler **out, const optim_scaler_config *cfg, char *err,
                                   size_t errlen);
STRATA_API void optim_scaler_destroy(optim_scaler *s);
/* The current scale (multiply the loss by it before backward). */
STRATA_API float optim_scaler_scale(const optim_scaler *s);
/* After the gradients are known: found_nonfinite is the OR over all shards
 * (e.g. !isfinite of the reduced optim_grad_sumsq). *skip = 1 means do not
 * apply this step. Updates the scale. */
STRATA_API int optim_scaler_update(optim_scaler *s, int found_nonfinite, int *skip);
/* Steps skipped so far, and good steps since the last change of scale. */
STRATA_API long optim_scaler_skipped(const optim_scaler *s);
STRATA_API int optim_scaler_good_steps(const optim_scaler *s);
/* Puts back a state read from a checkpoint: the scale (within the
 * configuration's [min_scale, max_scale]), the good steps since its last
 * change (in [0, window)) and the steps skipped. STRATA_EINVAL names a value
 * out of range. */
STRATA_API int optim_scaler_restore(optim_scaler *s, float scale, int good, long skipped);

#ifdef __cplusplus
}
#endif
#endif
