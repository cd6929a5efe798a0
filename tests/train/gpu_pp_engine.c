/* The interleaved pipeline schedule and ring self-attention (sequence
 * parallelism) trained on CUDA devices against the same layouts on the
 * CPU: pp 2 under the interleaved schedule (2 chunks a stage, 4 and 2
 * microbatches, AdamW and LAMB, recompute), sp 2 (the key/value blocks
 * passed over NCCL, libtensor's block attention on CUDA, ZeRO 0 and 1,
 * recompute), pp 2 with bf16 activations (par_engine_options_t.activations:
 * the stage-boundary activations and gradients sent in bf16) under 1F1B and
 * the interleaved schedule; with 4 ranks also pp 2 x dp 2 interleaved under ZeRO-1 (the
 * data-parallel reductions on their own NCCL communicator while pipeline
 * messages are in flight: every rank launches them in one order, see
 * libparallel/src/dist/pipeline.c), sp 2 x dp 2 and sp 2 x Megatron tp 2.
 *
 * It runs under mpirun, each rank on its node-local GPU (comm_local_device);
 * ranks may share a GPU (NCCL refuses that, so libcomm stages those
 * communicators' collectives through the host: the GPU bundle runs it with 2
 * ranks on the machine's GPUs). By hand, with strata built there (make; Open
 * MPI needed):
 *
 *   mpirun -np 2 --bind-to none build/bin/gpu_pp_engine
 *   mpirun -np 4 --bind-to none build/bin/gpu_pp_engine   (4 GPUs)
 *
 * Otherwise (one rank, as the GPU bundle starts it first; an odd number of
 * ranks; no GPU) it exits 77: skipped. With --cpu-checks (mpi.list, 2
 * ranks, no GPU): device "auto" with the interleaved schedule and with
 * sp = 2 falls back to the CPU and trains bit for bit as the CPU engine,
 * and device "cuda" is refused for want of a GPU (no longer for the
 * layout; with bf16 activations too, not for the pipeline); exit 0. With --cpu-as-device, the device cases with the CPU in
 * the device's place: a check of this program's layouts and bookkeeping
 * (every difference 0; the bf16 cases run there in f32, the CPU's dtype).
 *
 * Tolerances, as in gpu_engine.c and gpu_tp_engine.c (fp32: losses 2e-5
 * and gradient norms 1e-4 relative, parameters 1e-3 of the move over STEPS
 * steps): both runs have the same layout, so the pipeline moves the same
 * activations and gradients (copies, exact) and each collective sums the
 * same partial values (two ranks: one rounding whichever side adds). What
 * differs is cuBLAS and the CUDA kernels against OpenBLAS and the CPU
 * kernels, a few ulps per operation; the ring's block attention sums its
 * keys 32 a warp step instead of in OpenBLAS's order (tests/tensor/
 * gpu_equiv.c compares the blocks alone at 1e-4 relative). A message
 * paired with the wrong receive (the NCCL order this program exists to
 * check), a block missed or a stale landing buffer moves the losses by
 * whole percents (tests/train/pp_engine.c, sp_engine.c).
 *
 * bf16 activations (the CPU engine, f32, the reference): losses within 2e-2
 * relative, gradient norms 1e-1, parameters 0.5 of the move, validation
 * 2e-2, as gpu_engine.c's bf16-activation cases argue for one device (8
 * significant bits a stored value, some 25 roundings through 2 blocks; the
 * bounds twice bf16_matmul's). The pipeline adds no rounding: a stage
 * sends its bf16 output and input gradient as they are (a copy into a bf16
 * landing buffer and out of it), so the device run rounds exactly where a
 * single device would; this model's 4 blocks pass twice the roundings,
 * which, independent, grow the error by about sqrt 2, inside the bounds'
 * factor 2. A boundary sent in f32 bits read as bf16 (or the reverse), or
 * a message of the wrong length, gives garbage or a failed receive, not a
 * percent. Each step's pipeline bytes on each stage are then the formula's
 * exactly: m x boundaries x b s h x 2 (bf16's element size; 4 in f32, and
 * in the --cpu-as-device run).
 *
 * Ring self-attention with bf16 activations adds to those roundings one of
 * q, k, v and one of the output and gradients each (its blocks run on f32
 * copies): the same size, inside the same bounds. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <strata/comm.h>
#include <strata/parallel.h>
#include <strata/tensor.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define STEPS 6
static par_gpt_config_t mc = {.layers = 4, .hidden = 32, .heads = 4, .seq = 16, .vocab = 256};

typedef struct {
  int pp, sp, tp, accum, zero, recompute;
  const char *opt;
  int onef1b; /* pp > 1: 1F1B (else interleaved, 2 chunks a stage) */
  int acts;   /* the activations' dtype on a device (par_engine_options_t.activations; the CPU's are f32) */
  int prec;   /* the storage precision (0: fp32) */
} case_t;

/* Model, layout, optimizer and options of case k on `device`; dp takes the
 * rest of the ranks. */
static void setup(const case_t *k, int device, par_gpt_config_t *m, par_layout_t *lay, par_optim_config_t *oc,
                  par_engine_options_t *eo) {
  *m = mc, m->recompute = k->recompute;
  *lay = (par_layout_t)PAR_LAYOUT_DEFAULTS;
  lay->pp = k->pp, lay->sp = k->sp, lay->tp = k->tp, lay->dp = ranks / (k->pp * k->sp * k->tp);
  if (k->pp > 1 && k->onef1b) lay->schedule = PAR_SCHED_1F1B;
  else if (k->pp > 1) lay->schedule = PAR_SCHED_INTERLEAVED, lay->interleave = 2;
  lay->zero_stage = k->zero, lay->microbatch = 2, lay->global_batch = 2 * lay->dp * k->accum;
  lay->precision = k->prec;
  *oc = (par_optim_config_t)PAR_OPTIM_CONFIG_DEFAULTS;
  oc->name = k->opt, oc->lr = 1e-2, oc->clip = 0.5, oc->warmup = 2, oc->weight_decay = 0.01;
  *eo = (par_engine_options_t)PAR_ENGINE_OPTIONS_DEFAULTS;
  eo->steps = STEPS, eo->threads = 1, eo->seed = 11, eo->device = device;
  eo->bucket_mb = 0.004; /* several buckets */
  eo->activations = device >= 0 || device == PAR_DEVICE_CUDA ? k->acts : TENSOR_F32; /* (the CPU keeps f32) */
}

static par_engine_t *engine(int device, const case_t *k) {
  par_gpt_config_t m;
  par_layout_t lay;
  par_optim_config_t oc;
  par_engine_options_t eo;
  setup(k, device, &m, &lay, &oc, &eo);
  return make_engine(&m, &lay, &oc, &eo);
}

static const char *name(const case_t *k, char *buf, size_t n) {
  static const char *const acts[] = {"", " bf16 activations", " f16 activations"};
  snprintf(buf, n, "pp %d%s sp %d tp %d dp %d zero %d %s accum %d%s%s%s", k->pp,
           k->pp < 2 ? "" : k->onef1b ? " 1f1b" : " interleaved 2", k->sp, k->tp, ranks / (k->pp * k->sp * k->tp),
           k->zero, k->opt, k->accum, k->recompute ? " recompute" : "", acts[k->acts],
           k->prec == PAR_PREC_BF16 ? " bf16 storage" : "");
  return buf;
}

/* One more step of engine g (layout k): the bytes each stage sends to its
 * neighbours (libcomm's counters) are m x boundaries x b s h x es, es the
 * activations' element size. */
static void pipeline_bytes(par_engine_t *g, const case_t *k, par_data_t *d, size_t es, const char *what) {
  comm_t *pp = par_engine_group(g, "pp");
  CHECK(pp != NULL, "%s: no pipeline group", what);
  if (!pp) return;
  comm_counters_reset(pp);
  par_step_t st;
  CHECK(par_engine_step(g, d, &st) == 0, "%s: step: %s", what, par_engine_error(g));
  par_engine_info_t in;
  par_engine_info(g, &in);
  int stage = in.stage, v = k->onef1b ? 1 : 2, P = k->pp * v;
  int fwd = 0, bwd = 0;
  for (int c = 0; c < v; c++) {
    int vs = c * k->pp + stage;
    fwd += vs < P - 1, bwd += vs > 0;
  }
  comm_counter_t cnt = {0};
  comm_counters(pp, COMM_K_SEND, &cnt);
  uint64_t msg = (uint64_t)2 * mc.seq * mc.hidden * es, want = (uint64_t)k->accum * (fwd + bwd) * msg;
  CHECK(cnt.bytes_sent == want, "%s: stage %d sends %llu pipeline bytes a step, the formula %d x (%d + %d) x %llu = %llu",
        what, stage, (unsigned long long)cnt.bytes_sent, k->accum, fwd, bwd, (unsigned long long)msg,
        (unsigned long long)want);
  if (rank == 0)
    printf("gpu_pp_engine: %s: %llu pipeline bytes a step on stage 0 (m x boundaries x b s h x %zu)\n", what,
           (unsigned long long)cnt.bytes_sent, es);
}

/* Trains the CPU engine and a device engine of layout k side by side. */
static void versus_cpu(const case_t *k, int device) {
  char what[160];
  name(k, what, sizeof what);
  par_engine_t *c = engine(PAR_DEVICE_CPU, k), *g = engine(device, k);
  par_data_t *dc, *dd;
  double dl, dg, dm = cpu_device_pair(c, g, mc.seq, STEPS, what, &dl, &dg, &dc, &dd);
  double vc = NAN, vg = NAN; /* validation: the pipeline's and the ring's forward-only paths */
  CHECK(par_engine_evaluate(c, dc, 2, &vc) == 0 && par_engine_evaluate(g, dd, 2, &vg) == 0, "%s: evaluate: %s / %s",
        what, par_engine_error(c), par_engine_error(g));
  par_engine_info_t in;
  par_engine_info(g, &in);
  CHECK(in.device == device, "%s: the engine reports device %d", what, in.device);
  /* (tolerances: the header) */
  double tl = k->acts ? 2e-2 : 2e-5, tg = k->acts ? 1e-1 : 1e-4, tm = k->acts ? 0.5 : 1e-3;
  CHECK(dl <= tl && dg <= tg && dm <= tm && fabs(vc - vg) <= tl * vc,
        "%s: losses %.2e apart (bound %.0e), gradient norms %.2e (%.0e), parameters %.2e of the move (%.0e), "
        "validation %.8g against %.8g",
        what, dl, tl, dg, tg, dm, tm, vg, vc);
  int adt = par_gpt_act_dtype(par_engine_model(g)), want_dt = device >= 0 ? k->acts : TENSOR_F32;
  CHECK(adt == want_dt, "%s: the model keeps activations of dtype %d, not %d", what, adt, want_dt);
  if (k->pp > 1) pipeline_bytes(g, k, dd, (size_t)tensor_dtype_size((tensor_dtype_t)adt), what);
  if (rank == 0)
    printf("gpu_pp_engine: %s: losses %.2e, norms %.2e, parameters %.2e of the move\n", what, dl, dg, dm);
  par_data_destroy(dc), par_data_destroy(dd);
  par_engine_destroy(c), par_engine_destroy(g);
}

/* No GPU: auto falls back to the CPU bit for bit, cuda is refused for want
 * of a device (the layouts themselves are no longer refused). */
static void without_gpu(void) {
  static const case_t ks[] = {{2, 1, 1, 4, 0, 0, "adamw", 0, 0, 0}, {1, 2, 1, 1, 1, 0, "adamw", 0, 0, 0}};
  for (int i = 0; i < 2; i++) {
    const case_t *k = &ks[i];
    char what[160];
    name(k, what, sizeof what);
    par_engine_t *a = engine(PAR_DEVICE_AUTO, k), *c = engine(PAR_DEVICE_CPU, k);
    par_engine_info_t in;
    par_engine_info(a, &in);
    CHECK(in.device == TENSOR_CPU, "%s, auto without a GPU: device %d", what, in.device);
    par_data_t *da = markov_data(mc.seq), *dc = markov_data(mc.seq);
    for (int s = 0; s < 3; s++) {
      par_step_t sa, sc;
      CHECK(par_engine_step(a, da, &sa) == 0 && par_engine_step(c, dc, &sc) == 0, "step");
      CHECK(sa.loss == sc.loss && sa.grad_norm == sc.grad_norm, "%s, auto on the CPU: loss %.9g, CPU %.9g", what,
            sa.loss, sc.loss);
    }
    par_data_destroy(da), par_data_destroy(dc);
    par_engine_destroy(a), par_engine_destroy(c);
    par_gpt_config_t m;
    par_layout_t lay;
    par_optim_config_t oc;
    par_engine_options_t eo;
    setup(k, PAR_DEVICE_CUDA, &m, &lay, &oc, &eo);
    char err[1024];
    par_engine_t *e = NULL;
    int rc = par_engine_create(&e, &m, &lay, &oc, &eo, err, sizeof err);
    CHECK(rc == STRATA_EUNSUPPORTED && strstr(err, "device cuda") && !strstr(err, "does not run on a device"),
          "%s on device cuda without a GPU: %d, '%s'", what, rc, err);
    par_engine_destroy(e);
  }
  /* bf16 activations with pipeline stages: refused here for the GPU only */
  const case_t k = {2, 1, 1, 4, 0, 0, "adamw", 1, TENSOR_BF16, 0};
  par_gpt_config_t m;
  par_layout_t lay;
  par_optim_config_t oc;
  par_engine_options_t eo;
  setup(&k, PAR_DEVICE_CUDA, &m, &lay, &oc, &eo);
  char err[1024];
  par_engine_t *e = NULL;
  int rc = par_engine_create(&e, &m, &lay, &oc, &eo, err, sizeof err);
  CHECK(rc == STRATA_EUNSUPPORTED && strstr(err, "device cuda") && !strstr(err, "pipeline"),
        "pp 2 1f1b bf16 activations on device cuda without a GPU: %d, '%s'", rc, err);
  par_engine_destroy(e);
}

/* Every case that fits the ranks on `device` against the CPU. */
static void gpu_cases(int device) {
  static const case_t cases[] = {
      {2, 1, 1, 4, 0, 0, "adamw", 0, 0, 0}, /* interleaved: both directions share the one link of 2 stages */
      {2, 1, 1, 2, 0, 1, "lamb", 0, 0, 0},
      {1, 2, 1, 1, 0, 0, "adamw", 0, 0, 0}, /* ring self-attention */
      {1, 2, 1, 2, 1, 1, "adamw", 0, 0, 0},
      /* bf16 activations: the pipeline's boundaries sent in bf16 */
      {2, 1, 1, 4, 0, 0, "adamw", 1, TENSOR_BF16, 0}, /* 1F1B */
      {2, 1, 1, 4, 1, 1, "adamw", 0, TENSOR_BF16, 0}, /* interleaved, recompute */
      /* bf16 end to end: the ring's blocks on f32 copies of the bf16 q, k, v,
       * the output and gradients rounded back; alone and (4 ranks) beside
       * Megatron tp 2 */
      {1, 2, 1, 1, 0, 0, "adamw", 0, TENSOR_BF16, PAR_PREC_BF16},
      {2, 1, 1, 4, 1, 0, "lamb", 0, 0, 0},                         /* (4 ranks: dp 2 beside the pipeline, ZeRO-1) */
      {1, 2, 2, 1, 1, 0, "adamw", 0, 0, 0},                        /* (4 ranks: sp 2 x Megatron tp 2) */
      {1, 2, 2, 1, 1, 0, "adamw", 0, TENSOR_BF16, PAR_PREC_BF16}, /* (4 ranks) */
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const case_t *k = &cases[i];
    int group = k->pp * k->sp * k->tp;
    if (ranks % group == 0 && (i < 7 || ranks / group >= 2 || k->tp > 1)) versus_cpu(k, device);
  }
}

int main(int argc, char **argv) {
  return device_test_main(argc, argv, "gpu_pp_engine", gpu_cases, without_gpu,
                          "no GPU: the interleaved schedule and sp = 2 with device auto on the CPU",
                          "the interleaved schedule and ring self-attention on the devices against the CPU");
}
