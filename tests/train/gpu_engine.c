/* The training engine on a CUDA device against the same engine on the CPU
 * (par_engine_options_t.device), one rank: the flat parameter and gradient
 * storage, ZeRO 0-3's shards and pass buffers (ZeRO-3's all-gathers go
 * through NCCL even on one rank), the fp32 masters and 16-bit copies of
 * mixed precision, the optimizer state and liboptim's multi-tensor CUDA
 * update, clipping norms, fp16 loss scaling, gradient accumulation and
 * checkpoints (HDF5 through host staging) all on the device.
 *
 *   gpu_engine              GPU machine (make test-gpu): exit 77 without a GPU
 *   gpu_engine --cpu-checks also what needs no GPU, and exit 0 without one
 *                           (tests/train/mpi.list, 1 and 2 ranks)
 *
 * Without a GPU (any rank count): device "cuda" and cuda:0 are refused with
 * STRATA_EUNSUPPORTED naming why on every rank; "auto" falls back to the CPU
 * and trains bit for bit as the CPU engine; a bad device value is EINVAL.
 *
 * With a GPU (the bundle starts it as an Open MPI singleton, then with 2
 * ranks under its mpirun: data parallelism over ranks that share the GPU
 * when there is one, libcomm staging their collectives through the host;
 * tensor parallelism: gpu_tp_engine.c):
 *  - fp32, ZeRO 0-3, AdamW with clipping (and LAMB at stage 2), two
 *    microbatches a step at stages 2 and 3: STEPS steps give the CPU
 *    engine's losses and gradient norms within 2e-5 and 1e-4 relative, and
 *    parameters within 1e-3 of how far training moved them. Why: both run
 *    the same algorithm in fp32; cuBLAS, the CUDA layernorm, softmax and
 *    cross-entropy kernels and the multi-tensor AdamW sum in other orders
 *    than OpenBLAS and the CPU kernels, each result within a few ulps (6e-8
 *    relative per operation, dot products of at most 4 h = 128 terms: about
 *    sqrt(128) ulps = 7e-7 typical). The loss, a mean over B T tokens, moves
 *    by about that: 2e-5 leaves a factor of 30 for the trajectory's drift
 *    over STEPS updates. Parameters as in zero_equiv.c: Adam divides by
 *    sqrt(v), so an element whose gradient is at rounding level gets an
 *    update of order lr whose sign rounding decides; those few carry the
 *    difference, bounded by 1e-3 of the move (zero_equiv sees 2.4e-5 from
 *    reordering only the reductions; here every operation is reordered).
 *    A wrong shard, a missing reduction or a stale buffer moves the
 *    trajectory by a sizeable part of the move.
 *  - bf16 and fp16 storage (fp32 masters, ZeRO 0, 1 and 3): the 16-bit
 *    copies round the masters the same way (round to nearest even) but the
 *    masters already differ by the reordering above, so now and then an
 *    element lands on the other side of a rounding boundary: one bf16 ulp
 *    (2^-8 relative) in a few elements. Losses within 1e-3 relative,
 *    parameters (the masters) within 2e-2 of the move.
 *  - bf16_matmul (fp32 storage, ZeRO 0): cuBLAS rounds the GEMM inputs to
 *    bf16 (8 significant bits, 2^-9 relative) and accumulates in fp32: each
 *    product term carries up to 2^-8 relative error, a dot product of K
 *    terms of mixed signs about 2^-8 / sqrt(K) relative to its magnitude
 *    sum; the logits, small at initialisation, move by 1e-3 of themselves
 *    and the loss (about ln V) by far less. Losses within 1e-2 relative
 *    over STEPS steps, parameters within 0.25 of the move (the trajectory
 *    follows the same gradients to two or three digits), and the run
 *    differs from the fp32 device run (the option reached cuBLAS).
 *  - 16-bit activations (par_engine_options_t.activations): every
 *    activation and activation gradient stored in bf16 (8 significant
 *    bits: 2^-8 relative per stored value) or f16 (2^-11), the GEMMs on
 *    16-bit operands, f32 accumulation and statistics throughout. Through
 *    the 2 blocks a value passes some 25 roundings (forward and backward,
 *    the residual gradient accumulating in 16 bits), so one step's loss
 *    moves by up to ~4e-3 relative and the gradients by a few per cent
 *    (tests/tensor/gpu_equiv.c checks one step within 2e-2 and 1e-1);
 *    over STEPS steps the trajectories drift further apart. bf16
 *    activations (bf16 storage with fp32 masters: bf16 end to end; and over
 *    fp32 storage at ZeRO 2 with two microbatches): losses within 2e-2
 *    relative, gradient norms 1e-1, parameters 0.5 of the move (twice
 *    bf16_matmul's bounds, which round only the GEMM inputs); f16
 *    activations with fp16 storage and the dynamic loss scaler (the
 *    scaled activation gradients must stay below f16's 65504, which the
 *    scaler's skipped steps enforce): 1e-2, 5e-2, 0.25 (f16's rounding is
 *    8x finer than bf16's). And each run differs from the fp32 device run
 *    (the option reached the model); on the CPU the option is refused.
 *  - a checkpoint saved on the device loads into a device engine of
 *    another ZeRO stage and into a CPU engine with the very same
 *    parameters (the file holds fp32 values; no arithmetic on the way).
 *  - memory: the model states per rank are the planner's exactly, and the
 *    device accountant's peak less states and pass buffers is within 10% of
 *    the planner's activations, as zero_equiv.c checks on the CPU.
 *  (optimizer offload and the chunk policy on a device: gpu_offload.c) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <strata/comm.h>
#include <strata/parallel.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define STEPS 6
static par_gpt_config_t mc = {.layers = 2, .hidden = 32, .heads = 4, .seq = 16, .vocab = 256};

typedef struct {
  int zero, accum, prec, bf16mm;
  const char *opt;
  double tol_loss, tol_gnorm, tol_move;
  int acts; /* the activations' dtype (par_engine_options_t.activations): 0 f32 */
} case_t;

/* Layout, optimizer and options of case k on `device` (data parallel over every rank). */
static void setup(const case_t *k, int device, par_layout_t *lay, par_optim_config_t *oc, par_engine_options_t *eo) {
  *lay = (par_layout_t)PAR_LAYOUT_DEFAULTS;
  lay->dp = ranks, lay->zero_stage = k->zero, lay->microbatch = 4, lay->global_batch = 4 * ranks * k->accum;
  lay->precision = k->prec;
  *oc = (par_optim_config_t)PAR_OPTIM_CONFIG_DEFAULTS;
  oc->name = k->opt, oc->lr = 1e-2, oc->clip = 0.5, oc->warmup = 2, oc->weight_decay = 0.01;
  *eo = (par_engine_options_t)PAR_ENGINE_OPTIONS_DEFAULTS;
  eo->steps = STEPS, eo->threads = 1, eo->seed = 7, eo->device = device, eo->bf16_matmul = k->bf16mm;
  eo->activations = k->acts;
  eo->bucket_mb = 0.004; /* several buckets */
  if (k->prec == PAR_PREC_FP16) eo->loss_scale = 1024;
}

static int create(par_engine_t **e, int device, const case_t *k, char *err, size_t n) {
  par_layout_t lay;
  par_optim_config_t oc;
  par_engine_options_t eo;
  setup(k, device, &lay, &oc, &eo);
  return par_engine_create(e, &mc, &lay, &oc, &eo, err, n);
}

static par_engine_t *engine(int device, const case_t *k) {
  par_layout_t lay;
  par_optim_config_t oc;
  par_engine_options_t eo;
  setup(k, device, &lay, &oc, &eo);
  return make_engine(&mc, &lay, &oc, &eo);
}

static size_t nparams(void) {
  return par_gpt_param_count(&mc);
}

/* Trains the CPU engine and a device engine side by side; returns the
 * device engine's parameters (caller frees) and fills the differences. */
static float *versus_cpu(const case_t *k, int device, double *dl, double *dg, double *dmove) {
  size_t np = nparams();
  par_engine_t *c = engine(TENSOR_CPU, k), *g = engine(device, k);
  par_data_t *dc = markov_data(mc.seq), *dd = markov_data(mc.seq);
  float *p0 = malloc(np * 4), *pc = malloc(np * 4), *pg = malloc(np * 4);
  par_engine_get_params(c, p0);
  *dl = *dg = 0;
  side_by_side(c, dc, g, dd, STEPS, k->opt, dl, dg);
  par_engine_get_params(c, pc), par_engine_get_params(g, pg);
  double sums[2] = {0, 0};
  move_sums(pc, pg, p0, np, sums);
  *dmove = sqrt(sums[0] / sums[1]);
  par_engine_info_t in;
  par_engine_info(g, &in);
  CHECK(in.device == device, "zero %d: the engine reports device %d, not %d", k->zero, in.device,
        device);
  par_engine_destroy(c), par_engine_destroy(g);
  par_data_destroy(dc), par_data_destroy(dd);
  free(p0), free(pc);
  return pg;
}

static const char *precs[] = {"fp32", "bf16", "fp16"};
static const char *acts_name[] = {"", " bf16 activations", " f16 activations"};

static void equivalence(int device) {
  static const case_t cases[] = {
      {0, 1, PAR_PREC_FP32, 0, "adamw", 2e-5, 1e-4, 1e-3, 0},
      {1, 1, PAR_PREC_FP32, 0, "adamw", 2e-5, 1e-4, 1e-3, 0},
      {2, 2, PAR_PREC_FP32, 0, "adamw", 2e-5, 1e-4, 1e-3, 0},
      {3, 2, PAR_PREC_FP32, 0, "adamw", 2e-5, 1e-4, 1e-3, 0},
      {2, 1, PAR_PREC_FP32, 0, "lamb", 2e-5, 1e-4, 1e-3, 0},
      {0, 1, PAR_PREC_BF16, 0, "adamw", 1e-3, 1e-2, 2e-2, 0},
      {3, 1, PAR_PREC_BF16, 0, "adamw", 1e-3, 1e-2, 2e-2, 0},
      {1, 1, PAR_PREC_FP16, 0, "adamw", 1e-3, 1e-2, 2e-2, 0},
      {0, 1, PAR_PREC_FP32, 1, "adamw", 1e-2, 5e-2, 0.25, 0},
      /* 16-bit activations: bf16 end to end (bf16 storage, fp32 masters), bf16
       * activations over fp32 storage, f16 activations with fp16 storage and
       * the loss scaler */
      {0, 1, PAR_PREC_BF16, 0, "adamw", 2e-2, 1e-1, 0.5, TENSOR_BF16},
      {2, 2, PAR_PREC_FP32, 0, "adamw", 2e-2, 1e-1, 0.5, TENSOR_BF16},
      {1, 1, PAR_PREC_FP16, 0, "adamw", 1e-2, 5e-2, 0.25, TENSOR_F16},
  };
  float *fp32_dev = NULL;
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const case_t *k = &cases[i];
    double dl, dg, dm;
    float *pg = versus_cpu(k, device, &dl, &dg, &dm);
    CHECK(dl <= k->tol_loss && dg <= k->tol_gnorm && dm <= k->tol_move,
          "zero %d %s %s%s%s: losses %.2e apart (bound %.0e), gradient norms %.2e (%.0e), parameters "
          "%.2e of the "
          "move (%.0e)",
          k->zero, k->opt, precs[k->prec], k->bf16mm ? " bf16_matmul" : "", acts_name[k->acts], dl, k->tol_loss,
          dg, k->tol_gnorm, dm, k->tol_move);
    if (rank == 0)
      printf("gpu_engine: zero %d %s %s%s%s accum %d: losses %.2e, norms %.2e, parameters %.2e of "
             "the move\n",
             k->zero, k->opt, precs[k->prec], k->bf16mm ? " bf16_matmul" : "", acts_name[k->acts], k->accum,
             dl, dg, dm);
    if (i == 0) {
      fp32_dev = pg;
    } else {
      if (k->bf16mm || k->acts) { /* the option reached the model: not the fp32 device run */
        size_t differ = 0;
        for (size_t j = 0; j < nparams(); j++)
          differ += pg[j] != fp32_dev[j];
        CHECK(differ > 0, "%s trained exactly as fp32: the option did not reach the model",
              k->acts ? acts_name[k->acts] : "bf16_matmul");
      }
      free(pg);
    }
  }
  free(fp32_dev);
}

/* A checkpoint written on the device loads into a device engine of another
 * ZeRO stage and into a CPU engine with the same parameters, bit for bit. */
static void checkpoints(int device) {
  case_t k0 = {0, 1, PAR_PREC_FP32, 0, "adamw", 0, 0, 0, 0}, k3 = k0;
  k3.zero = 3;
  size_t np = nparams();
  char path[256];
  snprintf(path, sizeof path, "%s/strata_gpu_engine_%d.h5",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
  MPI_Bcast(path, sizeof path, MPI_CHAR, 0, MPI_COMM_WORLD);
  par_engine_t *a = engine(device, &k0), *b = engine(device, &k3), *c = engine(TENSOR_CPU, &k0);
  par_data_t *d = markov_data(mc.seq);
  par_step_t st;
  for (int s = 0; s < 3; s++)
    CHECK(par_engine_step(a, d, &st) == 0, "step: %s", par_engine_error(a));
  CHECK(par_engine_save(a, path, d, 3, NULL, 0) == 0, "save on the device: %s",
        par_engine_error(a));
  float *pa = malloc(np * 4), *pb = malloc(np * 4), *pc = malloc(np * 4);
  long step = 0;
  CHECK(par_engine_load(b, path, d, &step) == 0 && step == 3, "load into ZeRO-3 on the device: %s",
        par_engine_error(b));
  CHECK(par_engine_load(c, path, d, &step) == 0 && step == 3, "load on the CPU: %s",
        par_engine_error(c));
  par_engine_get_params(a, pa), par_engine_get_params(b, pb), par_engine_get_params(c, pc);
  CHECK(
      !memcmp(pa, pb, np * 4) && !memcmp(pa, pc, np * 4),
      "a checkpoint of the device's parameters loads with other values (ZeRO-3 device %s, CPU %s)",
      memcmp(pa, pb, np * 4) ? "differs" : "equal", memcmp(pa, pc, np * 4) ? "differs" : "equal");
  /* and training goes on from it alike on the CPU and the device */
  par_step_t sb, sc;
  par_data_t *db = markov_data(mc.seq), *dc = markov_data(mc.seq);
  par_data_set_position(db, par_data_position(d)), par_data_set_position(dc, par_data_position(d));
  CHECK(par_engine_step(b, db, &sb) == 0 && par_engine_step(c, dc, &sc) == 0, "step after load");
  CHECK(fabs(sb.loss - sc.loss) <= 2e-5 * sc.loss,
        "after the load: loss %.8g on the device, %.8g on the CPU", sb.loss, sc.loss);
  if (rank == 0) unlink(path);
  free(pa), free(pb), free(pc);
  par_data_destroy(d), par_data_destroy(db), par_data_destroy(dc);
  par_engine_destroy(a), par_engine_destroy(b), par_engine_destroy(c);
}

/* Model states per rank on the device equal the planner's; activations
 * (the device accountant's peak less states and pass buffers) within 10%. */
static void memory(int device) {
  for (int zero = 0; zero <= 3; zero++) {
    case_t k = {zero, 1, PAR_PREC_FP32, 0, "adamw", 0, 0, 0, 0};
    par_engine_t *e = engine(device, &k);
    par_data_t *d = markov_data(mc.seq);
    par_step_t st;
    CHECK(par_engine_step(e, d, &st) == 0, "step: %s", par_engine_error(e));
    par_engine_info_t in;
    par_engine_info(e, &in);
    par_layout_t lay = PAR_LAYOUT_DEFAULTS;
    lay.dp = ranks, lay.zero_stage = zero, lay.microbatch = 4, lay.global_batch = 4 * ranks;
    par_plan_t pl;
    CHECK(plan_here(&mc, &lay, &pl) == 0, "planner: %s", pl.why);
    double states = (double)(in.state_bytes[0] + in.state_bytes[1] + in.state_bytes[2]);
    CHECK(states == pl.mem[PAR_MEM_PARAMS] + pl.mem[PAR_MEM_GRADS] + pl.mem[PAR_MEM_OPTIM],
          "zero %d: model states %.0f bytes on the device, planner %.0f", zero, states,
          pl.mem[PAR_MEM_PARAMS] + pl.mem[PAR_MEM_GRADS] + pl.mem[PAR_MEM_OPTIM]);
    size_t cur = 0, peak = 0;
    par_engine_memory(e, &cur, &peak);
    double act = (double)peak - states - (double)in.buffer_peak;
    CHECK(fabs(pl.mem[PAR_MEM_ACTIV] / act - 1) <= 0.10,
          "zero %d: activations %.0f bytes on the device, planner %.0f", zero, act,
          pl.mem[PAR_MEM_ACTIV]);
    if (rank == 0)
      printf("gpu_engine: zero %d on %s%.0d: model states %.0f bytes (planner equal), activations "
             "%.0f (planner "
             "%.0f), peak %zu\n",
             zero, device < 0 ? "the CPU" : "cuda:", device < 0 ? 0 : device, states, act,
             pl.mem[PAR_MEM_ACTIV], in.device_peak);
    par_data_destroy(d);
    par_engine_destroy(e);
  }
}

/* bf16 activations on the device: the activations (the device accountant's
 * peak less states and pass buffers) within 10% of the planner with
 * strata's device parameters (par_plan_params_engine_device: 2 bytes per
 * activation element; the fused head's one chunk of f32 logits, its bf16
 * gradient and the bf16 copy of the tied weight, here the whole microbatch's
 * 64 rows in one chunk), as memory() checks fp32 with the CPU's. What the
 * planner leaves out is small here: the f32 row statistics (4 + heads floats
 * a token per block) and 16-byte alignment of each view. */
static void memory_act16(int device) {
  case_t k = {0, 1, PAR_PREC_FP32, 0, "adamw", 0, 0, 0, TENSOR_BF16};
  par_engine_t *e = engine(device, &k);
  par_data_t *d = markov_data(mc.seq);
  par_step_t st;
  CHECK(par_engine_step(e, d, &st) == 0, "step: %s", par_engine_error(e));
  par_engine_info_t in;
  par_engine_info(e, &in);
  par_layout_t lay = PAR_LAYOUT_DEFAULTS;
  lay.dp = ranks, lay.microbatch = 4, lay.global_batch = 4 * ranks;
  par_cluster_t cl;
  par_cluster_preset("this-machine", &cl, NULL, 0);
  cl.nodes = 1, cl.gpus_per_node = ranks;
  par_plan_params_t pp;
  par_plan_params_engine_device(&pp, 2);
  par_plan_t pl;
  CHECK(par_plan_estimate(&mc, &lay, &cl, &pp, &pl) == 0, "planner: %s", pl.why);
  size_t cur = 0, peak = 0;
  par_engine_memory(e, &cur, &peak);
  double states = (double)(in.state_bytes[0] + in.state_bytes[1] + in.state_bytes[2]);
  double act = (double)peak - states - (double)in.buffer_peak;
  CHECK(fabs(pl.mem[PAR_MEM_ACTIV] / act - 1) <= 0.10, "bf16 activations: %.0f bytes on the device, planner %.0f",
        act, pl.mem[PAR_MEM_ACTIV]);
  if (rank == 0)
    printf("gpu_engine: bf16 activations: %.0f bytes on the device (planner %.0f)\n", act, pl.mem[PAR_MEM_ACTIV]);
  par_data_destroy(d);
  par_engine_destroy(e);
}

/* What needs no GPU: the refusals where there is none, auto's fallback,
 * the memory check of the device runs done on the CPU (the same numbers
 * must hold there: zero_equiv.c's check with this test's model). */
static void without_gpu(void) {
  case_t k = {1, 1, PAR_PREC_FP32, 0, "adamw", 0, 0, 0, 0};
  char err[1024];
  par_engine_t *e = NULL;
  int rc = create(&e, PAR_DEVICE_CUDA, &k, err, sizeof err);
  CHECK(rc == STRATA_EUNSUPPORTED && strstr(err, "device cuda") &&
            (strstr(err, "no CUDA device") || strstr(err, "without nvcc")),
        "device cuda without a GPU: status %d, '%s'", rc, err);
  if (rank == 0) printf("gpu_engine: device cuda here: %s\n", err);
  par_engine_destroy(e), e = NULL;
  rc = create(&e, 0, &k, err, sizeof err);
  CHECK(rc == STRATA_EUNSUPPORTED && strstr(err, "cuda:0"), "cuda:0 without a GPU: status %d, '%s'",
        rc, err);
  if (rank == 0) printf("gpu_engine: device 0 here: %s\n", err);
  par_engine_destroy(e), e = NULL;
  rc = create(&e, -7, &k, err, sizeof err);
  CHECK(rc == STRATA_EINVAL && strstr(err, "device -7"), "device -7: status %d, '%s'", rc, err);
  par_engine_destroy(e), e = NULL;
  /* auto: the CPU engine, bit for bit */
  par_engine_t *a = engine(PAR_DEVICE_AUTO, &k), *c = engine(PAR_DEVICE_CPU, &k);
  par_engine_info_t in;
  par_engine_info(a, &in);
  CHECK(in.device == TENSOR_CPU, "auto without a GPU trains on device %d", in.device);
  par_data_t *da = markov_data(mc.seq), *dc = markov_data(mc.seq);
  for (int s = 0; s < 3; s++) {
    par_step_t sa, sc;
    CHECK(par_engine_step(a, da, &sa) == 0 && par_engine_step(c, dc, &sc) == 0, "step");
    CHECK(sa.loss == sc.loss && sa.grad_norm == sc.grad_norm,
          "auto on the CPU: loss %.9g, CPU %.9g", sa.loss, sc.loss);
  }
  /* a checkpoint through HDF5's MPI-IO (also where the GPU bundle starts
   * this program as an isolated singleton with its own Open MPI plugins) */
  char path[256];
  snprintf(path, sizeof path, "%s/strata_gpu_engine_cpu_%d.h5",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
  MPI_Bcast(path, sizeof path, MPI_CHAR, 0, MPI_COMM_WORLD);
  size_t np = nparams();
  float *pa = malloc(np * 4), *pc = malloc(np * 4);
  long step = 0;
  par_engine_t *l = engine(PAR_DEVICE_CPU, &k);
  CHECK(par_engine_save(a, path, da, 3, NULL, 0) == 0, "save: %s", par_engine_error(a));
  CHECK(par_engine_load(l, path, dc, &step) == 0 && step == 3, "load: %s", par_engine_error(l));
  par_engine_get_params(a, pa), par_engine_get_params(l, pc);
  CHECK(!memcmp(pa, pc, np * 4), "a checkpoint loads other parameters");
  if (rank == 0) unlink(path);
  free(pa), free(pc);
  par_engine_destroy(l);
  CHECK(!strcmp(par_engine_describe(a, "layout"), par_engine_describe(c, "layout")),
        "auto on the CPU describes its layout as '%s', the CPU engine '%s'",
        par_engine_describe(a, "layout"), par_engine_describe(c, "layout"));
  par_data_destroy(da), par_data_destroy(dc);
  par_engine_destroy(a), par_engine_destroy(c);
  memory(TENSOR_CPU);
  /* 16-bit activations on the CPU: refused, naming the dtype and why */
  case_t kb = {0, 1, PAR_PREC_FP32, 0, "adamw", 0, 0, 0, TENSOR_BF16};
  rc = create(&e, PAR_DEVICE_CPU, &kb, err, sizeof err);
  CHECK(rc != STRATA_OK && strstr(err, "bf16 activations on the CPU: the CPU computes in f32"),
        "bf16 activations on the CPU: status %d, '%s'", rc, err);
  if (rank == 0) printf("gpu_engine: bf16 activations here: %s\n", err);
  par_engine_destroy(e), e = NULL;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank), MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  harness_name = "gpu_engine";
  int cpu_checks = argc > 1 && !strcmp(argv[1], "--cpu-checks");
  int gpus = comm_cuda_device_count(), have = gpus > 0;
  MPI_Allreduce(MPI_IN_PLACE, &have, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!have) {
    if (cpu_checks) {
      without_gpu();
      return harness_finish("no GPU: the device option's refusals and auto's fallback");
    }
    if (rank == 0) printf("gpu_engine: no GPU: skipped\n");
    MPI_Finalize();
    return 77;
  }
  int device = -1;
  comm_local_device(MPI_COMM_WORLD, &device, NULL);
  equivalence(device);
  checkpoints(device);
  memory(device);
  memory_act16(device);
  return harness_finish("on the device against the CPU");
}
