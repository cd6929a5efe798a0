/* ZeRO-Offload and PatrickStar's chunk policy on a CUDA device against the
 * CPU engine. ZeRO-Offload (layout.offload_optimizer with a device): the model's forward and backward, the parameters
 * and gradients (ZeRO 0-3's shards) on the device; the fp32 masters, m and v
 * in liboffload's pinned host tier (or on its NVMe tier) and the update by
 * liboptim's CPU optimizer; the gradients copied down and the parameters up
 * on libtensor's copy stream.
 *
 *   gpu_offload              GPU machine (make test-gpu; several ranks under
 *                            mpirun, sharing a GPU when there is one):
 *                            exit 77 without a GPU
 *   gpu_offload --cpu-checks what needs no GPU, exit 0 without one
 *                            (tests/train/mpi.list, 1 and 2 ranks)
 *
 * With a GPU (dp = the ranks of the run):
 *  - training: STEPS steps give the CPU engine's losses, gradient norms and
 *    parameters within the bounds gpu_engine.c argues for the device engine
 *    (fp32: losses 2e-5 relative, norms 1e-4, parameters 1e-3 of the move;
 *    bf16/fp16 1e-3, 1e-2, 2e-2). The same bounds hold here and no looser
 *    ones are needed: the update is now the CPU engine's own code (liboptim's
 *    CPU AdamW/LAMB on fp32 arrays), so it adds no reordering of its own;
 *    only the device's forward and backward differ from the CPU's, as in
 *    gpu_engine. A gradient copied from the wrong shard or region, a
 *    parameter not sent back (the device computing with stale values), or
 *    the copy stream racing the reductions moves the run by a sizeable part
 *    of the move, far outside these bounds. Cases: fp32 ZeRO 0-3 (2
 *    microbatches at 2 and 3: the copies queued during backward must be the
 *    last microbatch's), LAMB at ZeRO 2, bf16 ZeRO 0/1/3, fp16 ZeRO 1 (loss
 *    scaling on the host), and the NVMe tier (bf16 ZeRO 1, fp32 ZeRO 2).
 *  - memory against the planner, as gpu_engine.c checks without offload:
 *    the device holds the parameters and gradients exactly (the planner's
 *    PAR_MEM_PARAMS and PAR_MEM_GRADS, its optimizer state 0) and its peak
 *    less those and the pass buffers is within 10% of the planner's
 *    activations; the host holds the planner's bytes per GPU (fp32 masters,
 *    m, v and the gradients' copy: 14 bytes per parameter in bf16, 16 in
 *    fp32) to within liboffload's rounding of each of its 4 chunks to 4 KiB.
 *  - checkpoints: saved from the device-offload engine they load into the
 *    CPU engine with the very same parameters (fp32 values, no arithmetic on
 *    the way), and a CPU checkpoint loads into the device-offload engine
 *    alike; the next step's loss within 2e-5 of the CPU's.
 *  - PatrickStar's chunk policy on the device (offload.policy = "chunks":
 *    liboffload's device tier in GPU memory, its host tier pinned, chunks
 *    moved on its copy stream after the passes' work): against the CPU
 *    engine within the same bounds (the policy itself changes no
 *    arithmetic: bit-identical on the CPU, offload_engine.c); the device
 *    never held more than its budget (the accountant's tensors and the
 *    chunks there), and chunks moved every step. Cases as offload_engine's:
 *    4 layers, fp32 and bf16 (its gradients in the parameters' chunks),
 *    2 microbatches, and ZeRO-3's chunks sharded over the ranks when there
 *    are several.
 * Without a GPU: device cuda with offload is refused naming the device
 * (no GPU here), auto falls back to the CPU and offloads there bit for bit
 * as the CPU engine does. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strata/comm.h>
#include <strata/parallel.h>
#include <unistd.h>

#include "harness.h"

#define STEPS 6
static par_gpt_config_t mc = {.layers = 2, .hidden = 32, .heads = 4, .seq = 16, .vocab = 256};
static const char *dir;

typedef struct {
  int zero, accum, prec, tier; /* tier: PAR_TIER_CPU or PAR_TIER_NVME (PAR_TIER_DEVICE: no offload) */
  const char *opt;
  double tol_loss, tol_gnorm, tol_move;
  double chunks; /* > 0: the chunk policy with this device budget in bytes */
} case_t;

static void layout(const case_t *k, par_layout_t *lay, par_optim_config_t *oc, par_engine_options_t *eo, int device) {
  *lay = (par_layout_t)PAR_LAYOUT_DEFAULTS;
  lay->dp = ranks, lay->zero_stage = k->zero, lay->microbatch = 4, lay->global_batch = 4 * ranks * k->accum;
  lay->precision = k->prec, lay->offload_optimizer = k->tier;
  *oc = (par_optim_config_t)PAR_OPTIM_CONFIG_DEFAULTS;
  oc->name = k->opt, oc->lr = 1e-2, oc->clip = 0.5, oc->warmup = 2, oc->weight_decay = 0.01;
  *eo = (par_engine_options_t)PAR_ENGINE_OPTIONS_DEFAULTS;
  eo->steps = STEPS, eo->threads = 1, eo->seed = 7, eo->device = device, eo->bucket_mb = 0.004;
  eo->offload_dir = dir;
  if (k->prec == PAR_PREC_FP16) eo->loss_scale = 1024;
  if (k->chunks > 0) eo->offload_chunks = 1, eo->device_bytes = k->chunks;
}

static par_engine_t *engine(int device, const case_t *k) {
  par_layout_t lay;
  par_optim_config_t oc;
  par_engine_options_t eo;
  layout(k, &lay, &oc, &eo, device);
  return make_engine(&mc, &lay, &oc, &eo);
}

static const char *precs[] = {"fp32", "bf16", "fp16"};

static void against_cpu(int device, const case_t *cases, size_t ncases);

static void equivalence(int device) {
  static const case_t cases[] = {
      {0, 1, PAR_PREC_FP32, PAR_TIER_CPU, "adamw", 2e-5, 1e-4, 1e-3, 0},
      {1, 1, PAR_PREC_FP32, PAR_TIER_CPU, "adamw", 2e-5, 1e-4, 1e-3, 0},
      {2, 2, PAR_PREC_FP32, PAR_TIER_CPU, "adamw", 2e-5, 1e-4, 1e-3, 0},
      {3, 2, PAR_PREC_FP32, PAR_TIER_CPU, "adamw", 2e-5, 1e-4, 1e-3, 0},
      {2, 1, PAR_PREC_FP32, PAR_TIER_CPU, "lamb", 2e-5, 1e-4, 1e-3, 0},
      {0, 1, PAR_PREC_BF16, PAR_TIER_CPU, "adamw", 1e-3, 1e-2, 2e-2, 0},
      {1, 1, PAR_PREC_BF16, PAR_TIER_CPU, "adamw", 1e-3, 1e-2, 2e-2, 0},
      {3, 1, PAR_PREC_BF16, PAR_TIER_CPU, "adamw", 1e-3, 1e-2, 2e-2, 0},
      {1, 1, PAR_PREC_FP16, PAR_TIER_CPU, "adamw", 1e-3, 1e-2, 2e-2, 0},
      {1, 1, PAR_PREC_BF16, PAR_TIER_NVME, "adamw", 1e-3, 1e-2, 2e-2, 0},
      {2, 1, PAR_PREC_FP32, PAR_TIER_NVME, "adamw", 2e-5, 1e-4, 1e-3, 0},
  };
  against_cpu(device, cases, sizeof cases / sizeof *cases);
}

/* The chunk policy: budgets with room for the activations (about 400 KB
 * here, as offload_engine.c measures them on the CPU) and a few chunks of
 * the 4 layers' 470 KB of fp32 parameters and gradients, with some margin
 * for the device's own buffers. */
static void chunk_policy(int device) {
  static const case_t cases[] = {
      {0, 1, PAR_PREC_FP32, PAR_TIER_DEVICE, "adamw", 2e-5, 1e-4, 1e-3, 1.0e6},
      {0, 1, PAR_PREC_BF16, PAR_TIER_DEVICE, "lamb", 1e-3, 1e-2, 2e-2, 1.0e6},
      {0, 2, PAR_PREC_BF16, PAR_TIER_DEVICE, "adamw", 1e-3, 1e-2, 2e-2, 1.2e6},
      {3, 1, PAR_PREC_FP32, PAR_TIER_DEVICE, "adamw", 2e-5, 1e-4, 1e-3, 1.5e6},
  };
  mc.layers = 4;
  against_cpu(device, cases, sizeof cases / sizeof *cases);
  mc.layers = 2;
}

static void against_cpu(int device, const case_t *cases, size_t ncases) {
  size_t np = par_gpt_param_count(&mc);
  for (size_t i = 0; i < ncases; i++) {
    const case_t *k = &cases[i];
    case_t cpu = *k;
    cpu.tier = PAR_TIER_DEVICE; /* (the CPU engine's offload is bit-identical to none: offload_engine.c) */
    cpu.chunks = 0, cpu.zero = k->chunks > 0 ? 0 : k->zero; /* (the chunks' ZeRO-3 equals ZeRO-0 bit for bit there) */
    par_engine_t *c = engine(TENSOR_CPU, &cpu), *g = engine(device, k);
    par_data_t *dc = markov_data(mc.seq), *dd = markov_data(mc.seq);
    float *p0 = malloc(np * 4), *pc = malloc(np * 4), *pg = malloc(np * 4);
    par_engine_get_params(c, p0);
    double dl = 0, dg = 0, sums[2] = {0, 0};
    side_by_side(c, dc, g, dd, STEPS, k->opt, &dl, &dg);
    par_engine_get_params(c, pc), par_engine_get_params(g, pg);
    move_sums(pc, pg, p0, np, sums);
    double dm = sqrt(sums[0] / sums[1]);
    par_engine_info_t in;
    par_engine_info(g, &in);
    if (k->chunks > 0)
      CHECK(in.device == device && in.device_peak <= (size_t)k->chunks && in.last_moved > 0,
            "chunks zero %d %s: device %d held %zu bytes at most (budget %.0f), a step moved %llu bytes", k->zero,
            precs[k->prec], in.device, in.device_peak, k->chunks, (unsigned long long)in.last_moved);
    else
      CHECK(in.device == device && in.offload_host_bytes > 0, "zero %d: device %d, %zu bytes on the host",
            k->zero, in.device, in.offload_host_bytes);
    CHECK(dl <= k->tol_loss && dg <= k->tol_gnorm && dm <= k->tol_move,
          "zero %d %s %s %s: losses %.2e apart (bound %.0e), gradient norms %.2e (%.0e), parameters %.2e of "
          "the move (%.0e)",
          k->zero, k->opt, precs[k->prec], k->tier == PAR_TIER_NVME ? "nvme" : "host", dl, k->tol_loss, dg,
          k->tol_gnorm, dm, k->tol_move);
    if (rank == 0)
      printf("gpu_offload: zero %d %s %s accum %d %s: losses %.2e, norms %.2e, parameters %.2e of the move\n",
             k->zero, k->opt, precs[k->prec], k->accum,
             k->chunks > 0 ? "chunk policy" : k->tier == PAR_TIER_NVME ? "optimizer on NVMe" : "optimizer on the host",
             dl, dg, dm);
    par_engine_destroy(c), par_engine_destroy(g);
    par_data_destroy(dc), par_data_destroy(dd);
    free(p0), free(pc), free(pg);
  }
}

/* Device and host bytes against the planner (see the header). */
static void memory(int device) {
  static const case_t cases[] = {{0, 1, PAR_PREC_BF16, PAR_TIER_CPU, "adamw", 0, 0, 0, 0},
                                 {1, 1, PAR_PREC_FP32, PAR_TIER_CPU, "adamw", 0, 0, 0, 0},
                                 {2, 1, PAR_PREC_BF16, PAR_TIER_CPU, "adamw", 0, 0, 0, 0},
                                 {3, 1, PAR_PREC_FP32, PAR_TIER_CPU, "adamw", 0, 0, 0, 0}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const case_t *k = &cases[i];
    par_layout_t lay;
    par_optim_config_t oc;
    par_engine_options_t eo;
    layout(k, &lay, &oc, &eo, device);
    par_engine_t *e = make_engine(&mc, &lay, &oc, &eo);
    par_data_t *d = markov_data(mc.seq);
    par_step_t st;
    CHECK(par_engine_step(e, d, &st) == 0, "step: %s", par_engine_error(e));
    par_engine_info_t in;
    par_engine_info(e, &in);
    par_plan_t pl;
    CHECK(plan_here(&mc, &lay, &pl) == 0, "planner: %s", pl.why);
    double dev_states = (double)(in.state_bytes[0] + in.state_bytes[1]);
    CHECK((double)in.state_bytes[0] == pl.mem[PAR_MEM_PARAMS] && (double)in.state_bytes[1] == pl.mem[PAR_MEM_GRADS] &&
              pl.mem[PAR_MEM_OPTIM] == 0,
          "zero %d %s: %zu + %zu bytes of parameters and gradients on the device, planner %.0f + %.0f (+ %.0f)",
          k->zero, precs[k->prec], in.state_bytes[0], in.state_bytes[1], pl.mem[PAR_MEM_PARAMS],
          pl.mem[PAR_MEM_GRADS], pl.mem[PAR_MEM_OPTIM]);
    size_t cur = 0, peak = 0;
    par_engine_memory(e, &cur, &peak);
    double act = (double)peak - dev_states - (double)in.buffer_peak;
    CHECK(fabs(pl.mem[PAR_MEM_ACTIV] / act - 1) <= 0.10, "zero %d %s: activations %.0f bytes on the device, "
          "planner %.0f", k->zero, precs[k->prec], act, pl.mem[PAR_MEM_ACTIV]);
    double host = pl.cpu_bytes_node / ranks; /* (plan_here: one node of `ranks` GPUs) */
    CHECK(fabs((double)in.offload_host_bytes - host) <= 4 * 4096.0,
          "zero %d %s: %zu bytes on the host, planner %.0f", k->zero, precs[k->prec], in.offload_host_bytes, host);
    if (rank == 0)
      printf("gpu_offload: zero %d %s: device %.0f bytes of states (planner equal), activations %.0f (planner "
             "%.0f); host %zu bytes (planner %.0f)\n",
             k->zero, precs[k->prec], dev_states, act, pl.mem[PAR_MEM_ACTIV], in.offload_host_bytes, host);
    par_data_destroy(d);
    par_engine_destroy(e);
  }
}

/* Checkpoints between the device-offload engine and the CPU engine, both ways. */
static void checkpoints(int device) {
  case_t off = {1, 1, PAR_PREC_BF16, PAR_TIER_CPU, "adamw", 0, 0, 0, 0}, cpu = off;
  cpu.tier = PAR_TIER_DEVICE;
  size_t np = par_gpt_param_count(&mc);
  char path[2][256];
  for (int w = 0; w < 2; w++) {
    snprintf(path[w], sizeof path[w], "%s/strata_gpu_offload_%d_%d.h5", dir, (int)getpid(), w);
    MPI_Bcast(path[w], sizeof path[w], MPI_CHAR, 0, MPI_COMM_WORLD);
  }
  float *pa = malloc(np * 4), *pb = malloc(np * 4);
  for (int w = 0; w < 2; w++) { /* w 0: the device saves, the CPU loads; 1: the other way */
    par_engine_t *a = w ? engine(TENSOR_CPU, &cpu) : engine(device, &off);
    par_engine_t *b = w ? engine(device, &off) : engine(TENSOR_CPU, &cpu);
    par_data_t *d = markov_data(mc.seq);
    par_step_t st;
    long step = 0;
    for (int s = 0; s < 3; s++) CHECK(par_engine_step(a, d, &st) == 0, "step: %s", par_engine_error(a));
    CHECK(par_engine_save(a, path[w], d, 3, NULL, 0) == 0, "save: %s", par_engine_error(a));
    CHECK(par_engine_load(b, path[w], d, &step) == 0 && step == 3, "load: %s", par_engine_error(b));
    par_engine_get_params(a, pa), par_engine_get_params(b, pb);
    CHECK(!memcmp(pa, pb, np * 4), "a checkpoint saved %s loads other parameters %s",
          w ? "on the CPU" : "by the device-offload engine", w ? "into the device-offload engine" : "on the CPU");
    par_data_t *da = markov_data(mc.seq), *db = markov_data(mc.seq);
    par_data_set_position(da, par_data_position(d)), par_data_set_position(db, par_data_position(d));
    par_step_t sa, sb;
    CHECK(par_engine_step(a, da, &sa) == 0 && par_engine_step(b, db, &sb) == 0, "step after the load");
    CHECK(fabs(sa.loss - sb.loss) <= 2e-5 * sa.loss, "after the load: loss %.8g, the saving engine %.8g", sb.loss,
          sa.loss);
    if (rank == 0) unlink(path[w]);
    par_data_destroy(d), par_data_destroy(da), par_data_destroy(db);
    par_engine_destroy(a), par_engine_destroy(b);
  }
  free(pa), free(pb);
}

static void without_gpu(void) {
  case_t k = {1, 1, PAR_PREC_BF16, PAR_TIER_CPU, "adamw", 0, 0, 0, 0};
  par_layout_t lay;
  par_optim_config_t oc;
  par_engine_options_t eo;
  layout(&k, &lay, &oc, &eo, PAR_DEVICE_CUDA);
  char err[1024];
  par_engine_t *e = NULL;
  int rc = par_engine_create(&e, &mc, &lay, &oc, &eo, err, sizeof err);
  CHECK(rc == STRATA_EUNSUPPORTED && strstr(err, "device cuda") && !strstr(err, "offload"),
        "device cuda with offload and no GPU: status %d, '%s' (the device is what is missing)", rc, err);
  par_engine_destroy(e);
  /* auto: the CPU engine's own offload, bit for bit */
  par_engine_t *a = engine(PAR_DEVICE_AUTO, &k), *c = engine(PAR_DEVICE_CPU, &k);
  par_data_t *da = markov_data(mc.seq), *dc = markov_data(mc.seq);
  for (int s = 0; s < 3; s++) {
    par_step_t sa, sc;
    CHECK(par_engine_step(a, da, &sa) == 0 && par_engine_step(c, dc, &sc) == 0, "step");
    CHECK(sa.loss == sc.loss && sa.grad_norm == sc.grad_norm, "auto on the CPU: loss %.9g, CPU %.9g", sa.loss,
          sc.loss);
  }
  par_data_destroy(da), par_data_destroy(dc);
  par_engine_destroy(a), par_engine_destroy(c);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank), MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  harness_name = "gpu_offload";
  dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  int cpu_checks = argc > 1 && !strcmp(argv[1], "--cpu-checks");
  int have = comm_cuda_device_count() > 0;
  MPI_Allreduce(MPI_IN_PLACE, &have, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!have) {
    if (cpu_checks) {
      without_gpu();
      return harness_finish("no GPU: device offload refused for want of a device, auto offloads on the CPU");
    }
    if (rank == 0) printf("gpu_offload: no GPU: skipped\n");
    MPI_Finalize();
    return 77;
  }
  int device = -1;
  comm_local_device(MPI_COMM_WORLD, &device, NULL);
  equivalence(device);
  chunk_policy(device);
  memory(device);
  checkpoints(device);
  return harness_finish("ZeRO-Offload on the device against the CPU");
}
