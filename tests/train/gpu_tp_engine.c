/* Megatron 1D tensor parallelism (tp = 2) trained on CUDA devices against
 * the same layout on the CPU: the column/row-parallel linears, the
 * vocabulary-parallel embedding and cross-entropy, Megatron's sequence
 * parallelism (layernorm regions split over the tensor group, all-gathers
 * and reduce-scatters), partitioned activation checkpoints, ZeRO 0-3 over
 * the data-parallel groups beside the tensor groups, LAMB's norms summed
 * over the tensor group, pipeline stages (4 ranks or more) and a
 * checkpoint saved on the devices and loaded on the CPU. Every tensor
 * collective runs on device buffers, through NCCL; where ranks share a GPU
 * (NCCL refuses them) libcomm routes them through pinned host memory and
 * MPI (comm_is_staged), so this runs on one GPU too.
 *
 * It needs an even number of ranks, started by mpirun (each rank takes its
 * node-local GPU modulo the GPUs, comm_local_device); the GPU bundle's
 * run.sh starts it with 2 ranks when it has mpirun. By hand, with strata
 * built there (make; Open MPI needed):
 *
 *   mpirun -np 2 --bind-to none build/bin/gpu_tp_engine
 *   mpirun -np 4 --bind-to none build/bin/gpu_tp_engine   (dp 2 or pp 2 beside tp 2)
 *
 * Otherwise (one rank, as the bundle starts it without mpirun; no GPU) it
 * exits 77: skipped. With --cpu-checks (mpi.list, 2
 * ranks, no GPU): device "auto" with tp = 2 falls back to the CPU and
 * trains bit for bit as the CPU engine (with and without sequence
 * parallelism), and device "cuda" is refused naming why; exit 0. With
 * --cpu-as-device, the device cases with the CPU in the device's place:
 * a check of this program's layouts and bookkeeping (every difference 0).
 *
 * Tolerances, as in gpu_engine.c (fp32: losses 2e-5 and gradient norms
 * 1e-4 relative, parameters 1e-3 of the move over STEPS steps): both runs
 * have the same layout, so each collective sums the same partial values;
 * with two ranks a sum is one rounding whichever side adds (NCCL's or
 * MPI's), and the vocabulary-parallel log-sum-exp is combined by the same
 * host code on both. What differs is what gpu_engine.c argues for: cuBLAS
 * and the CUDA kernels sum in other orders than OpenBLAS and the CPU
 * kernels, a few ulps per operation, dot products of at most 4 h = 128
 * terms. With more ranks (dp = 2 on 4 GPUs) NCCL's ring adds in another
 * order than MPI: again a few ulps. bf16 storage: 1e-3, 1e-2, 2e-2 as
 * there (a master now and then rounds to the other bf16 neighbour). A
 * missing or doubled tensor reduction, a gather of the wrong rows or a
 * stale buffer moves the losses by far more (tp_engine.c's failures are
 * whole percents). */
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
  int sp, zero, pp, accum, part, prec;
  const char *opt;
  double tol_loss, tol_gnorm, tol_move;
  int acts; /* the device's activations (par_engine_options_t.activations; the CPU's are f32): 0 f32 */
} case_t;

static const char *precs[] = {"fp32", "bf16", "fp16"};

/* Model, layout, optimizer and options of case k with tp ranks of mode
 * tp_mode on `device`; dp takes the rest of the ranks. */
static void setup(const case_t *k, int tp, int tp_mode, int device, par_gpt_config_t *m, par_layout_t *lay,
                  par_optim_config_t *oc, par_engine_options_t *eo) {
  *m = mc, m->recompute = k->part;
  *lay = (par_layout_t)PAR_LAYOUT_DEFAULTS;
  lay->tp = tp, lay->tp_mode = (par_tp_mode_t)tp_mode, lay->pp = k->pp, lay->dp = ranks / (tp * k->pp);
  lay->seq_parallel = k->sp, lay->partition_activations = k->part;
  lay->zero_stage = k->zero, lay->microbatch = 4, lay->global_batch = 4 * lay->dp * k->accum;
  lay->precision = k->prec;
  *oc = (par_optim_config_t)PAR_OPTIM_CONFIG_DEFAULTS;
  oc->name = k->opt, oc->lr = 1e-2, oc->clip = 0.5, oc->warmup = 2, oc->weight_decay = 0.01;
  *eo = (par_engine_options_t)PAR_ENGINE_OPTIONS_DEFAULTS;
  eo->steps = STEPS, eo->threads = 1, eo->seed = 7, eo->device = device;
  eo->activations = device == PAR_DEVICE_CPU ? 0 : k->acts; /* (the CPU reference computes in f32) */
  eo->bucket_mb = 0.004; /* several buckets */
}

static int create(par_engine_t **e, int device, const case_t *k, int tp, int tp_mode, char *err, size_t n) {
  par_gpt_config_t m;
  par_layout_t lay;
  par_optim_config_t oc;
  par_engine_options_t eo;
  setup(k, tp, tp_mode, device, &m, &lay, &oc, &eo);
  return par_engine_create(e, &m, &lay, &oc, &eo, err, n);
}

static par_engine_t *engine(int device, const case_t *k) {
  par_gpt_config_t m;
  par_layout_t lay;
  par_optim_config_t oc;
  par_engine_options_t eo;
  setup(k, 2, PAR_TP_1D, device, &m, &lay, &oc, &eo);
  return make_engine(&m, &lay, &oc, &eo);
}

static const char *name(const case_t *k, char *buf, size_t n) {
  static const char *const acts[] = {"", " bf16 activations", " f16 activations"};
  snprintf(buf, n, "tp 2%s pp %d dp %d zero %d %s %s%s%s accum %d", k->sp ? " seq_parallel" : "", k->pp,
           ranks / (2 * k->pp), k->zero, k->opt, precs[k->prec], acts[k->acts],
           k->part ? " partitioned recompute" : "", k->accum);
  return buf;
}

/* Trains the CPU engine and a device engine of layout k side by side. */
static void versus_cpu(const case_t *k, int device) {
  char what[160];
  name(k, what, sizeof what);
  par_engine_t *c = engine(PAR_DEVICE_CPU, k), *g = engine(device, k);
  par_data_t *dc, *dd;
  double dl, dg, dm = cpu_device_pair(c, g, mc.seq, STEPS, what, &dl, &dg, &dc, &dd);
  par_engine_info_t in;
  par_engine_info(g, &in);
  CHECK(in.device == device && in.tp == 2, "%s: the engine reports device %d tp %d", what, in.device, in.tp);
  CHECK(dl <= k->tol_loss && dg <= k->tol_gnorm && dm <= k->tol_move,
        "%s: losses %.2e apart (bound %.0e), gradient norms %.2e (%.0e), parameters %.2e of the move (%.0e)",
        what, dl, k->tol_loss, dg, k->tol_gnorm, dm, k->tol_move);
  if (rank == 0)
    printf("gpu_tp_engine: %s: losses %.2e, norms %.2e, parameters %.2e of the move\n", what, dl, dg, dm);
  par_data_destroy(dc), par_data_destroy(dd);
  par_engine_destroy(c), par_engine_destroy(g);
}

/* A checkpoint saved by the devices loads on the CPU (same layout) with the
 * very same parameters, and both go on alike. */
static void checkpoint(int device) {
  case_t k = {1, 1, 1, 1, 0, PAR_PREC_FP32, "adamw", 0, 0, 0, 0};
  char path[256];
  snprintf(path, sizeof path, "%s/strata_gpu_tp_engine_%d.h5", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
           (int)getpid());
  MPI_Bcast(path, sizeof path, MPI_CHAR, 0, MPI_COMM_WORLD);
  par_engine_t *g = engine(device, &k), *c = engine(PAR_DEVICE_CPU, &k);
  size_t n = local_count(par_engine_model(g));
  par_data_t *d = markov_data(mc.seq);
  par_step_t st, sc;
  for (int s = 0; s < 3; s++) CHECK(par_engine_step(g, d, &st) == 0, "step: %s", par_engine_error(g));
  CHECK(par_engine_save(g, path, d, 3, NULL, 0) == 0, "save on the devices: %s", par_engine_error(g));
  long step = 0;
  CHECK(par_engine_load(c, path, d, &step) == 0 && step == 3, "load on the CPU: %s", par_engine_error(c));
  float *pg = malloc(n * 4), *pc = malloc(n * 4);
  par_engine_get_params(g, pg), par_engine_get_params(c, pc);
  CHECK(!memcmp(pg, pc, n * 4), "a tp = 2 checkpoint of the devices loads on the CPU with other values");
  par_data_t *dg = markov_data(mc.seq), *dc = markov_data(mc.seq);
  par_data_set_position(dg, par_data_position(d)), par_data_set_position(dc, par_data_position(d));
  CHECK(par_engine_step(g, dg, &st) == 0 && par_engine_step(c, dc, &sc) == 0, "step after the load");
  CHECK(fabs(st.loss - sc.loss) <= 2e-5 * sc.loss, "after the load: loss %.8g on the devices, %.8g on the CPU",
        st.loss, sc.loss);
  if (rank == 0) unlink(path);
  free(pg), free(pc);
  par_data_destroy(d), par_data_destroy(dg), par_data_destroy(dc);
  par_engine_destroy(g), par_engine_destroy(c);
}

/* No GPU: auto falls back to the CPU bit for bit, cuda is refused. */
static void without_gpu(void) {
  for (int sp = 0; sp <= 1; sp++) {
    case_t k = {sp, 1, 1, 1, 0, PAR_PREC_FP32, "adamw", 0, 0, 0, 0};
    par_engine_t *a = engine(PAR_DEVICE_AUTO, &k), *c = engine(PAR_DEVICE_CPU, &k);
    par_engine_info_t in;
    par_engine_info(a, &in);
    CHECK(in.device == TENSOR_CPU && in.tp == 2, "auto without a GPU: device %d tp %d", in.device, in.tp);
    par_data_t *da = markov_data(mc.seq), *dc = markov_data(mc.seq);
    for (int s = 0; s < 3; s++) {
      par_step_t sa, sc;
      CHECK(par_engine_step(a, da, &sa) == 0 && par_engine_step(c, dc, &sc) == 0, "step");
      CHECK(sa.loss == sc.loss && sa.grad_norm == sc.grad_norm, "tp 2 sp %d, auto on the CPU: loss %.9g, CPU %.9g",
            sp, sa.loss, sc.loss);
    }
    par_data_destroy(da), par_data_destroy(dc);
    par_engine_destroy(a), par_engine_destroy(c);
  }
  case_t k = {0, 0, 1, 1, 0, PAR_PREC_FP32, "adamw", 0, 0, 0, 0};
  char err[1024];
  par_engine_t *e = NULL;
  int rc = create(&e, PAR_DEVICE_CUDA, &k, 2, PAR_TP_1D, err, sizeof err);
  CHECK(rc == STRATA_EUNSUPPORTED && strstr(err, "device cuda"), "tp 2 on device cuda without a GPU: %d, '%s'", rc,
        err);
  par_engine_destroy(e);
}

/* Every case of the layouts above on `device` against the CPU. */
static void gpu_cases(int device) {
  static const case_t cases[] = {
      {0, 0, 1, 1, 0, PAR_PREC_FP32, "adamw", 2e-5, 1e-4, 1e-3, 0},
      {1, 1, 1, 2, 0, PAR_PREC_FP32, "adamw", 2e-5, 1e-4, 1e-3, 0},
      {0, 3, 1, 1, 0, PAR_PREC_FP32, "adamw", 2e-5, 1e-4, 1e-3, 0},
      {0, 0, 1, 1, 1, PAR_PREC_FP32, "adamw", 2e-5, 1e-4, 1e-3, 0},
      {1, 2, 1, 1, 0, PAR_PREC_FP32, "lamb", 2e-5, 1e-4, 1e-3, 0},
      {1, 1, 1, 1, 0, PAR_PREC_BF16, "adamw", 1e-3, 1e-2, 2e-2, 0},
      {1, 1, 2, 2, 0, PAR_PREC_FP32, "adamw", 2e-5, 1e-4, 1e-3, 0}, /* (4 ranks or more) */
      /* bf16 activations (the CPU in f32): the bounds of gpu_engine.c's
       * bf16-activation cases, 2e-2, 1e-1, 0.5 (some 25 bf16 roundings a
       * value through the 2 blocks). The tensor collectives add two bf16
       * partial sums (NCCL in bf16: one more rounding, 2^-8 relative, per
       * all-reduce or reduce-scatter, 4 a block forward and backward) and
       * the unfused vocabulary-parallel head's input gradient is rounded
       * once from f32: a few more roundings of the same size, well inside
       * the factor the bounds leave. bf16 end to end; with sequence
       * parallelism, ZeRO 2 and two microbatches over fp32 storage; with
       * partitioned recompute (its 16-bit block inputs gathered). */
      {0, 1, 1, 1, 0, PAR_PREC_BF16, "adamw", 2e-2, 1e-1, 0.5, TENSOR_BF16},
      {1, 2, 1, 2, 0, PAR_PREC_FP32, "adamw", 2e-2, 1e-1, 0.5, TENSOR_BF16},
      {0, 1, 1, 1, 1, PAR_PREC_BF16, "adamw", 2e-2, 1e-1, 0.5, TENSOR_BF16},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    if (ranks % (2 * cases[i].pp) == 0) versus_cpu(&cases[i], device);
  checkpoint(device); /* (2D, 2.5D and 3D on devices: gpu_tpmd_engine.c) */
}

int main(int argc, char **argv) {
  return device_test_main(argc, argv, "gpu_tp_engine", gpu_cases, without_gpu,
                          "no GPU: tp = 2 with device auto on the CPU, device cuda refused",
                          "Megatron 1D tensor parallelism on the devices against the CPU");
}
