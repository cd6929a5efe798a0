/* 2D (Optimus' SUMMA), 2.5D (Tesseract) and 3D tensor parallelism on CUDA
 * devices against the same layouts on the CPU: first one layer alone
 * (strata/par_tplayer.h: its output, input gradient and every parameter's
 * gradient, and the bytes libcomm counted), then the engine (losses,
 * gradient norms, parameters after STEPS steps under AdamW and LAMB, ZeRO
 * 1-3, data parallelism beside the tensor groups, activation recompute;
 * the tensor group's bytes; a checkpoint saved on the devices loaded on
 * the CPU). Every SUMMA broadcast and reduce, 3D all-gather and
 * reduce-scatter, layernorm statistic and replica sum runs on device
 * buffers, through NCCL; only the rows' losses come back to the host.
 *
 * It runs under mpirun, each rank on its node-local GPU (comm_local_device);
 * ranks may share a GPU (NCCL refuses that, so libcomm stages those
 * communicators' collectives through the host: the GPU bundle runs it with 4
 * ranks on the machine's GPUs). With strata built on a machine with GPUs:
 *
 *   mpirun -np 4 --bind-to none build/bin/gpu_tpmd_engine   (2D, q = 2)
 *   mpirun -np 8 --bind-to none build/bin/gpu_tpmd_engine   (2.5D q = 2 d = 2, 3D q = 2, 2D x dp 2)
 *
 * Otherwise (one rank, as the GPU bundle starts it first; no GPU; a rank
 * count other than 4 or 8) it exits 77: skipped. With --cpu-checks
 * (mpi.list: 4 ranks; 8 by hand; no GPU): device "auto" with 2D falls back to the CPU
 * and trains bit for bit as the CPU engine, device "cuda" is refused
 * naming why, and every case below runs with the CPU in the device's
 * place, where every difference must be 0 (a check of this program's
 * layouts and bookkeeping); exit 0.
 *
 * Tolerances. Both sides run the same layout, so every collective sums
 * the same partial values; here every group a sum runs over has 2 ranks
 * (q = 2, d = 2, dp = 2), and a sum of two is one rounding whichever side
 * adds: NCCL and MPI agree to the bit. What differs is the arithmetic on
 * the rank: cuBLAS and the CUDA kernels sum in other orders than OpenBLAS
 * and the CPU loops, a few ulps per operation, dot products of at most
 * 4 h = 128 terms; the split layernorm sums rows in double on both. The
 * layer: 2e-5 of each tensor's largest element (as tplayer_equiv.c allows
 * between the blocked and the serial layer, which differ by as much). The
 * engine, as gpu_tp_engine.c: losses 2e-5 and gradient norms 1e-4
 * relative, parameters 1e-3 of the move over STEPS steps (Adam divides by
 * the square root of the second moment, so early ulps grow into the move).
 * A missing or doubled reduction, a block broadcast from the wrong root, a
 * statistic summed over the wrong group or a stale device buffer moves
 * them by whole percents (tpmd_engine.c's failures). Bytes: libcomm counts
 * what a call moves from its count and kind, on both paths alike: equal. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strata/comm.h>
#include <strata/par_tplayer.h>
#include <strata/parallel.h>
#include <unistd.h>

#include "harness.h"

#define STEPS 6
static par_gpt_config_t mc = {.layers = 2, .hidden = 32, .heads = 4, .seq = 16, .vocab = 256};

static const char *mode_name(par_tp_mode_t m) {
  return m == PAR_TP_2D ? "2D" : m == PAR_TP_2P5D ? "2.5D" : m == PAR_TP_3D ? "3D" : "1D";
}

/* ---- one layer ------------------------------------------------------------ */

/* max |a - b| over max |b| (0 when both are 0). */
static double rel_apart(const float *a, const float *b, size_t n) {
  double d = 0, m = 0;
  for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i])), m = fmax(m, fabs((double)b[i]));
  return m > 0 ? d / m : d;
}

static par_tplayer_t *layer(comm_t *c, tensor_ctx_t *tc, par_tp_mode_t mode, int depth, int device) {
  par_tplayer_config_t cfg = {.mode = mode, .depth = depth, .batch = 8, .seq = 16, .hidden = 32, .heads = 4,
                              .seed = 11, .on_device = device >= 0, .device = device};
  par_tplayer_t *L = NULL;
  char err[512];
  if (par_tplayer_create(&L, c, tc, &cfg, err, sizeof err)) {
    fprintf(stderr, "gpu_tpmd_engine: the %s layer on device %d: %s\n", mode_name(mode), device, err);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return L;
}

/* This rank's block (host) into a tensor on `device`, or back. */
static void to_dev(tensor_ctx_t *tc, tensor_t *d, const float *h) {
  tensor_t v = tensor_view1((void *)h, TENSOR_F32, TENSOR_CPU, tensor_numel(d));
  tensor_t dv = tensor_view1(d->data, TENSOR_F32, d->device, tensor_numel(d));
  CHECK(tensor_copy(tc, &dv, &v) == 0, "copy to the device: %s", tensor_last_error(tc));
}
static void to_host(tensor_ctx_t *tc, float *h, const tensor_t *d) {
  tensor_t v = tensor_view1(h, TENSOR_F32, TENSOR_CPU, tensor_numel(d));
  tensor_t dv = tensor_view1(d->data, TENSOR_F32, d->device, tensor_numel(d));
  CHECK(tensor_copy(tc, &v, &dv) == 0, "copy to the host: %s", tensor_last_error(tc));
}

/* The layer of mode on the CPU and on `device` over comm c, from the same
 * blocks: outputs, input gradients, parameter gradients, bytes. */
static void layer_versus_cpu(comm_t *c, tensor_ctx_t *tcc, tensor_ctx_t *tcd, par_tp_mode_t mode, int depth,
                             int device) {
  par_tplayer_t *Lc = layer(c, tcc, mode, depth, -1), *Lg = layer(c, tcd, mode, depth, device);
  int64_t rows, cols;
  par_tplayer_block(Lc, &rows, &cols, NULL, NULL);
  size_t n = (size_t)(rows * cols);
  int dev = device >= 0 ? device : TENSOR_CPU;
  tensor_t hx, hdy, hy, hdx, gx, gdy, gy, gdx;
  int64_t sh[2] = {rows, cols};
  tensor_t *hs[4] = {&hx, &hdy, &hy, &hdx}, *gs[4] = {&gx, &gdy, &gy, &gdx};
  for (int k = 0; k < 4; k++)
    if (tensor_alloc(tcc, hs[k], TENSOR_F32, TENSOR_CPU, 2, sh) || tensor_alloc(tcd, gs[k], TENSOR_F32, dev, 2, sh))
      MPI_Abort(MPI_COMM_WORLD, 1);
  tensor_fill_normal(tcc, &hx, 3 + (uint64_t)rank, "x", NULL, 0.f, 1.f);
  tensor_fill_normal(tcc, &hdy, 5 + (uint64_t)rank, "dy", NULL, 0.f, 1.f);
  to_dev(tcd, &gx, hx.data), to_dev(tcd, &gdy, hdy.data);
  par_tplayer_traffic_reset(Lc), par_tplayer_traffic_reset(Lg);
  CHECK(par_tplayer_forward(Lc, &hy, &hx) == 0 && par_tplayer_backward(Lc, &hdx, &hdy) == 0, "CPU layer: %s",
        par_tplayer_error(Lc));
  CHECK(par_tplayer_forward(Lg, &gy, &gx) == 0 && par_tplayer_backward(Lg, &gdx, &gdy) == 0, "device layer: %s",
        par_tplayer_error(Lg));
  float *y = malloc(n * 4), *dx = malloc(n * 4);
  to_host(tcd, y, &gy), to_host(tcd, dx, &gdx);
  double worst = fmax(rel_apart(y, hy.data, n), rel_apart(dx, hdx.data, n));
  for (int i = 0; i < par_tplayer_nparams(); i++) {
    int64_t N, K;
    par_tplayer_param_shape(Lc, i, &N, &K);
    size_t m = (size_t)(N * (K ? K : 1));
    float *a = malloc(m * 4), *b = malloc(m * 4);
    CHECK(par_tplayer_get(Lc, i, 1, a) == 0 && par_tplayer_get(Lg, i, 1, b) == 0, "the gradient of %s",
          par_tplayer_param_name(i));
    double d = rel_apart(b, a, m);
    CHECK(d <= 2e-5, "%s layer: the gradient of %s %.2e of its largest element apart", mode_name(mode),
          par_tplayer_param_name(i), d);
    worst = fmax(worst, d);
    free(a), free(b);
  }
  CHECK(rel_apart(y, hy.data, n) <= 2e-5 && rel_apart(dx, hdx.data, n) <= 2e-5,
        "%s layer: y %.2e, dx %.2e of their largest element apart", mode_name(mode), rel_apart(y, hy.data, n),
        rel_apart(dx, hdx.data, n));
  if (device < 0) CHECK(worst == 0, "%s layer with the CPU as the device: %.2e apart", mode_name(mode), worst);
  uint64_t sc, rc_, sg, rg;
  par_tplayer_traffic(Lc, &sc, &rc_), par_tplayer_traffic(Lg, &sg, &rg);
  CHECK(sc == sg && rc_ == rg && sc > 0,
        "%s layer: bytes sent %llu / received %llu on the device, %llu / %llu on the CPU",
        mode_name(mode), (unsigned long long)sg, (unsigned long long)rg, (unsigned long long)sc,
        (unsigned long long)rc_);
  CHECK(par_tplayer_partners(Lc) == par_tplayer_partners(Lg), "%s layer: partners %d on the device, %d on the CPU",
        mode_name(mode), par_tplayer_partners(Lg), par_tplayer_partners(Lc));
  MPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0)
    printf("gpu_tpmd_engine: the %s layer on %d ranks: %.2e of the largest element apart, %llu bytes sent alike\n",
           mode_name(mode), ranks, worst, (unsigned long long)sc);
  free(y), free(dx);
  for (int k = 0; k < 4; k++) tensor_free(tcc, hs[k]), tensor_free(tcd, gs[k]);
  par_tplayer_destroy(Lc), par_tplayer_destroy(Lg);
}

/* ---- the engine ----------------------------------------------------------- */

typedef struct {
  int ranks; /* the run's ranks this case is for */
  par_tp_mode_t mode;
  int tp, depth, zero, accum, recompute;
  const char *opt;
} case_t;

static void setup(const case_t *k, int device, par_gpt_config_t *m, par_layout_t *lay, par_optim_config_t *oc,
                  par_engine_options_t *eo) {
  *m = mc, m->recompute = k->recompute;
  *lay = (par_layout_t)PAR_LAYOUT_DEFAULTS;
  lay->tp = k->tp, lay->tp_mode = k->mode, lay->tp_depth = k->depth, lay->dp = ranks / k->tp;
  lay->zero_stage = k->zero, lay->microbatch = 4, lay->global_batch = 4 * lay->dp * k->accum;
  *oc = (par_optim_config_t)PAR_OPTIM_CONFIG_DEFAULTS;
  oc->name = k->opt, oc->lr = 1e-2, oc->clip = 0.5, oc->warmup = 2, oc->weight_decay = 0.01;
  *eo = (par_engine_options_t)PAR_ENGINE_OPTIONS_DEFAULTS;
  eo->steps = STEPS, eo->threads = 1, eo->seed = 7, eo->device = device;
  eo->bucket_mb = 0.004; /* several buckets */
}

static int create(par_engine_t **e, int device, const case_t *k, char *err, size_t n) {
  par_gpt_config_t m;
  par_layout_t lay;
  par_optim_config_t oc;
  par_engine_options_t eo;
  setup(k, device, &m, &lay, &oc, &eo);
  return par_engine_create(e, &m, &lay, &oc, &eo, err, n);
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
  snprintf(buf, n, "%s tp %d%s x dp %d zero %d %s accum %d%s", mode_name(k->mode), k->tp,
           k->mode == PAR_TP_2P5D ? " (depth 2)" : "", ranks / k->tp, k->zero, k->opt, k->accum,
           k->recompute ? " recompute" : "");
  return buf;
}

static void versus_cpu(const case_t *k, int device) {
  char what[160];
  name(k, what, sizeof what);
  par_engine_t *c = engine(PAR_DEVICE_CPU, k), *g = engine(device, k);
  par_data_t *dc, *dd;
  double dl, dg, dm = cpu_device_pair(c, g, mc.seq, STEPS, what, &dl, &dg, &dc, &dd);
  par_engine_info_t in;
  par_engine_info(g, &in);
  CHECK(in.device == device && in.tp == k->tp, "%s: the engine reports device %d tp %d", what, in.device, in.tp);
  CHECK(dl <= 2e-5 && dg <= 1e-4 && dm <= 1e-3,
        "%s: losses %.2e apart (bound 2e-5), gradient norms %.2e (1e-4), parameters %.2e of the move (1e-3)", what,
        dl, dg, dm);
  if (device < 0) CHECK(dl == 0 && dg == 0 && dm == 0, "%s with the CPU as the device: not the same run", what);
  uint64_t sc = 0, sg = 0;
  par_gpt_tp_sent(par_engine_model(c), &sc), par_gpt_tp_sent(par_engine_model(g), &sg);
  CHECK(sc == sg && sc > 0, "%s: the tensor group sent %llu bytes on the device, %llu on the CPU", what,
        (unsigned long long)sg, (unsigned long long)sc);
  if (rank == 0)
    printf("gpu_tpmd_engine: %s: losses %.2e, norms %.2e, parameters %.2e of the move; %llu tensor bytes alike\n",
           what, dl, dg, dm, (unsigned long long)sc);
  par_data_destroy(dc), par_data_destroy(dd);
  par_engine_destroy(c), par_engine_destroy(g);
}

/* A checkpoint saved by the devices loads on the CPU (same layout) with the
 * very same parameters, and both go on alike. */
static void checkpoint(int device, const case_t *k) {
  char path[256];
  snprintf(path, sizeof path, "%s/strata_gpu_tpmd_engine_%d.h5", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
           (int)getpid());
  MPI_Bcast(path, sizeof path, MPI_CHAR, 0, MPI_COMM_WORLD);
  par_engine_t *g = engine(device, k), *c = engine(PAR_DEVICE_CPU, k);
  size_t n = local_count(par_engine_model(g));
  par_data_t *d = markov_data(mc.seq);
  par_step_t st, sc;
  for (int s = 0; s < 3; s++) CHECK(par_engine_step(g, d, &st) == 0, "step: %s", par_engine_error(g));
  CHECK(par_engine_save(g, path, d, 3, NULL, 0) == 0, "save on the devices: %s", par_engine_error(g));
  long step = 0;
  CHECK(par_engine_load(c, path, d, &step) == 0 && step == 3, "load on the CPU: %s", par_engine_error(c));
  float *pg = malloc(n * 4), *pc = malloc(n * 4);
  par_engine_get_params(g, pg), par_engine_get_params(c, pc);
  CHECK(!memcmp(pg, pc, n * 4), "a %s checkpoint of the devices loads on the CPU with other values",
        mode_name(k->mode));
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

/* Every case for this many ranks on `device` (TENSOR_CPU: the CPU in its place). */
static void cases(int device) {
  comm_t *world = NULL;
  tensor_ctx_t *tcc = NULL, *tcd = NULL;
  tensor_ctx_options_t o = TENSOR_CTX_OPTIONS_DEFAULTS;
  o.threads = 1;
  if (comm_from_mpi(&world, MPI_COMM_WORLD, NULL) || tensor_ctx_create(&tcc, &o)) MPI_Abort(MPI_COMM_WORLD, 1);
  o.device = device >= 0 ? device : 0;
  if (tensor_ctx_create(&tcd, &o)) MPI_Abort(MPI_COMM_WORLD, 1);
  if (ranks == 4) layer_versus_cpu(world, tcc, tcd, PAR_TP_2D, 1, device);
  if (ranks == 8) {
    layer_versus_cpu(world, tcc, tcd, PAR_TP_2P5D, 2, device);
    layer_versus_cpu(world, tcc, tcd, PAR_TP_3D, 1, device);
  }
  tensor_ctx_destroy(tcd), tensor_ctx_destroy(tcc);
  comm_destroy(world);
  static const case_t all[] = {
      {4, PAR_TP_2D, 4, 1, 1, 1, 0, "adamw"},   {4, PAR_TP_2D, 4, 1, 3, 2, 1, "lamb"},
      {8, PAR_TP_2P5D, 8, 2, 1, 1, 0, "adamw"}, {8, PAR_TP_2P5D, 8, 2, 2, 1, 1, "lamb"},
      {8, PAR_TP_3D, 8, 1, 1, 1, 0, "adamw"},   {8, PAR_TP_3D, 8, 1, 3, 2, 1, "adamw"},
      {8, PAR_TP_2D, 4, 1, 2, 1, 0, "adamw"}, /* dp 2 beside the tensor groups */
  };
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    if (all[i].ranks == ranks) versus_cpu(&all[i], device);
  checkpoint(device, &all[ranks == 8 ? 4 : 0]);
}

/* No GPU: auto falls back to the CPU bit for bit, cuda is refused. */
static void without_gpu(void) {
  case_t k = {4, PAR_TP_2D, 4, 1, 1, 1, 0, "adamw"};
  par_engine_t *a = engine(PAR_DEVICE_AUTO, &k), *c = engine(PAR_DEVICE_CPU, &k);
  par_engine_info_t in;
  par_engine_info(a, &in);
  CHECK(in.device == TENSOR_CPU && in.tp == 4, "auto without a GPU: device %d tp %d", in.device, in.tp);
  par_data_t *da = markov_data(mc.seq), *dc = markov_data(mc.seq);
  for (int s = 0; s < 3; s++) {
    par_step_t sa, sc;
    CHECK(par_engine_step(a, da, &sa) == 0 && par_engine_step(c, dc, &sc) == 0, "step");
    CHECK(sa.loss == sc.loss && sa.grad_norm == sc.grad_norm, "2D tp 4, auto on the CPU: loss %.9g, CPU %.9g",
          sa.loss, sc.loss);
  }
  par_data_destroy(da), par_data_destroy(dc);
  par_engine_destroy(a), par_engine_destroy(c);
  char err[1024];
  par_engine_t *e = NULL;
  int rc = create(&e, PAR_DEVICE_CUDA, &k, err, sizeof err);
  CHECK(rc == STRATA_EUNSUPPORTED && strstr(err, "device cuda"), "2D tp 4 on device cuda without a GPU: %d, '%s'", rc,
        err);
  par_engine_destroy(e);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank), MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  harness_name = "gpu_tpmd_engine";
  int cpu_checks = argc > 1 && !strcmp(argv[1], "--cpu-checks");
  int gpus = comm_cuda_device_count(), device = -1, local = 0;
  comm_local_device(MPI_COMM_WORLD, &device, &local);
  int have = gpus > 0; /* (ranks may share a GPU: libcomm stages their collectives through the host) */
  MPI_Allreduce(MPI_IN_PLACE, &have, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (cpu_checks && (ranks == 4 || ranks == 8)) {
    if (!have) without_gpu();
    cases(TENSOR_CPU);
    return harness_finish("no device: 2D with device auto on the CPU, cuda refused; the cases with the CPU as device");
  }
  if (!have || (ranks != 4 && ranks != 8)) {
    if (rank == 0)
      printf("gpu_tpmd_engine np=%d: skipped: needs 4 or 8 ranks under mpirun and a GPU (%d here "
             "on rank 0's node)\n",
             ranks, gpus);
    MPI_Finalize();
    return cpu_checks ? 0 : 77;
  }
  char msg[256];
  if (comm_cuda_set_device(device, msg, sizeof msg)) { /* (the layers' NCCL communicators use the current device) */
    fprintf(stderr, "gpu_tpmd_engine: device %d: %s\n", device, msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  cases(device);
  return harness_finish("2D, 2.5D and 3D tensor parallelism on the devices against the CPU");
}
