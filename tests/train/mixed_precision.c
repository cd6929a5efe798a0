/* Mixed precision in the engine (mpirun -np 1..4): bf16 and fp16
 * parameters, gradients and communication with fp32 masters.
 *
 *  1. The scheme itself, on one rank, against a reference written here from
 *     Micikevicius et al. (arXiv 1710.03740, sec. 3): a model with its own
 *     fp32 storage runs on the masters rounded to 16 bits, its gradients of
 *     the scaled loss are rounded to 16 bits, and liboptim's update of the
 *     fp32 masters divides the scale out. The engine (regions widened one at
 *     a time, gradients rounded per region, optimizer writing the 16-bit
 *     copy) must give the same losses, norms and masters: the same
 *     operations on the same values, so equal up to the order of the
 *     gradient norm's double sums (seen: equal bits; bound 1e-6 relative for
 *     losses and norms, 1e-5 of the training's move for the masters).
 *  2. Data parallel with ZeRO 0-3 against one rank training the whole
 *     global batch in the same precision, 20 steps of AdamW (and LAMB at
 *     ZeRO-3, whose trust ratios need the shards' partial sums). Each rank
 *     rounds its own gradient to bf16 before the reduction and the reduced
 *     sum is rounded again, where the serial run rounds the whole batch's
 *     gradient once: gradients differ by up to two bf16 roundings (2^-8
 *     relative), where fp32 runs differ by fp32 roundings (2^-24). Adam's
 *     update m / sqrt(v) moves with the relative error of the gradient, so
 *     the masters drift apart, most of all where a gradient is itself at
 *     rounding level and Adam's normalised step takes its sign from the
 *     rounding (an embedding row seen once): seen 1.2e-2 of the training's
 *     move on 2 ranks, 1.8e-2 on 4 (2e-3 with LAMB, whose trust ratio
 *     rescales whole tensors); the bound is 5e-2 of the move, and 1e-3
 *     relative for the losses (seen 1e-4). A missing or doubled reduction,
 *     a wrong shard or a stale 16-bit copy moves them by a sizeable part of
 *     the move.
 *     Also: libcomm's counters equal ZeRO's volumes in 2-byte elements (2 Psi
 *     per rank for stages 0-2, 3 Psi for stage 3), the model states equal
 *     ZeRO's mixed-precision formulas (2 + 2 + K, K = 12 for Adam's fp32
 *     master, m and v) and the planner's for precision bf16 exactly, and
 *     the activations (fp32: the engine computes in fp32) are within 10%.
 *  3. fp16's dynamic loss scale: started at 2^24 with a window of 2 good
 *     steps, the scale backs off until the gradients fit fp16 and then
 *     keeps crossing the overflow limit. On every rank the same steps are
 *     skipped, a skipped step leaves the masters and the optimizer's step
 *     untouched, the scale follows the rule (halved after an overflow,
 *     doubled after `window` good steps), and under ZeRO-2/3 some skipped
 *     step overflowed on some ranks' shards only: the others skipped with
 *     them, as they must (each rank sees only its shard of the gradients).
 *  4. Checkpoints hold the fp32 masters: an fp16 ZeRO-2 run saved at step 3
 *     resumes bit for bit (losses and loss scale), and the same file loads
 *     under bf16 ZeRO-3 and fp32 serially with the masters unchanged. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <strata/optim.h>
#include <strata/parallel.h>

#include "harness.h"
#include <string.h>
#include <unistd.h>

#define STEPS 20
static par_gpt_config_t mc = {.layers = 2, .hidden = 24, .heads = 3, .seq = 18, .vocab = 256};

static par_optim_config_t recipe_optim(const char *opt) {
  par_optim_config_t oc = PAR_OPTIM_CONFIG_DEFAULTS;
  oc.name = opt, oc.lr = 1e-2, oc.clip = 0.5, oc.warmup = 2, oc.weight_decay = 0.01;
  return oc;
}

static par_engine_t *engine(MPI_Comm comm, int dp, int zero, int B, par_precision_t prec,
                            const char *opt, double scale, int window) {
  par_layout_t lay = PAR_LAYOUT_DEFAULTS;
  lay.dp = dp, lay.zero_stage = zero, lay.microbatch = B, lay.global_batch = B * dp;
  lay.precision = prec;
  par_optim_config_t oc = recipe_optim(opt);
  par_engine_options_t eo = PAR_ENGINE_OPTIONS_DEFAULTS;
  eo.steps = STEPS, eo.threads = 1, eo.seed = 5, eo.comm = comm, eo.bucket_mb = 0.004;
  eo.loss_scale = scale, eo.loss_scale_window = window;
  return make_engine(&mc, &lay, &oc, &eo);
}

static par_data_t *data(void) { return markov_data(mc.seq); }

/* ---------------------------------------------------------------- rounding */

/* x rounded to bfloat16 (nearest, ties to even), back in a float. */
static float round_bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  memcpy(&x, &u, 4);
  return x;
}

/* x rounded to IEEE binary16 (nearest, ties to even; inf beyond 65520),
 * back in a float: scaling by a power of two moves the binary16 grid onto
 * float's integers, where rintf rounds to even. */
static float round_f16(float x) {
  float a = fabsf(x);
  if (!(a < 65520.0f)) return isnan(x) ? x : copysignf(INFINITY, x);
  int ex;
  frexpf(a, &ex);         /* a = f 2^ex, f in [0.5, 1) */
  if (ex < -13) ex = -13; /* subnormals: a fixed spacing of 2^-24 */
  float q = ldexpf(1.0f, ex - 11);
  return copysignf(rintf(a / q) * q, x);
}

static float round16(par_precision_t p, float x) { return p == PAR_PREC_BF16 ? round_bf16(x) : round_f16(x); }

/* ---------------------------------------------------------------- 1. the scheme */

static void reference(par_precision_t prec, float scale) {
  const int B = 4;
  size_t np = par_gpt_param_count(&mc);
  par_engine_t *e = engine(MPI_COMM_SELF, 1, 0, B, prec, "adamw", scale, 1 << 30);
  par_data_t *de = data(), *dr = data();
  par_gpt_t *m = NULL;
  par_gpt_options_t go = PAR_GPT_OPTIONS_DEFAULTS;
  go.threads = 1;
  if (par_gpt_create_ex(&m, &mc, &go, 5)) MPI_Abort(MPI_COMM_WORLD, 1);
  float *master = malloc(np * 4), *g = malloc(np * 4), *mm = calloc(np, 4), *vv = calloc(np, 4),
        *p0 = malloc(np * 4), *pe = malloc(np * 4);
  int32_t *in = malloc((size_t)B * mc.seq * 4), *tg = malloc((size_t)B * mc.seq * 4);
  par_engine_get_params(e, master); /* the same start */
  memcpy(p0, master, np * 4);
  optim *opt = NULL;
  int groups[2];
  char err[256];
  par_optim_config_t oc = recipe_optim("adamw");
  if (par_optim_create(&opt, &oc, STEPS, 1, groups, err, sizeof err)) MPI_Abort(MPI_COMM_WORLD, 1);
  int nv = par_gpt_num_views(m);
  optim_tensor *t = calloc((size_t)nv, sizeof *t);
  for (int i = 0; i < nv; i++) {
    const par_gpt_view_t *v = par_gpt_view(m, i);
    t[i] = (optim_tensor){.param = master + v->offset, .grad = g + v->offset, .m = mm + v->offset,
                          .v = vv + v->offset, .group = groups[v->decay ? 0 : 1], .n = v->numel};
  }
  par_gpt_set_loss_scale(m, scale);
  double dl = 0, dg = 0;
  for (int step = 1; step <= STEPS; step++) {
    par_step_t st;
    if (par_engine_step(e, de, &st)) {
      CHECK(0, "step %d: %s", step, par_engine_error(e));
      break;
    }
    float *p = par_gpt_params(m, NULL), *gr = par_gpt_grads(m, NULL), loss;
    for (size_t i = 0; i < np; i++) p[i] = round16(prec, master[i]);
    par_data_next(dr, 0, 1, B, in, tg);
    par_gpt_zero_grad(m);
    if (par_gpt_forward(m, in, tg, B, mc.seq, &loss) || par_gpt_backward(m)) MPI_Abort(MPI_COMM_WORLD, 1);
    double total = 0;
    for (size_t i = 0; i < np; i++) {
      g[i] = round16(prec, gr[i]);
      total += (double)g[i] * g[i];
    }
    float gs;
    double norm;
    optim_grad_scale(total, scale, (float)oc.clip, &gs, &norm);
    CHECK(isfinite(norm), "reference step %d: the gradients overflowed at scale %g", step, (double)scale);
    optim_step(opt, t, nv, gs);
    double a = fabs(st.loss - loss) / loss, b = fabs(st.grad_norm - norm) / norm;
    if (a > dl) dl = a;
    if (b > dg) dg = b;
  }
  par_engine_get_params(e, pe);
  double sums[2] = {0, 0};
  move_sums(master, pe, p0, np, sums);
  double rel = sqrt(sums[0] / sums[1]);
  const char *name = prec == PAR_PREC_BF16 ? "bf16" : "fp16";
  CHECK(dl <= 1e-6 && dg <= 1e-6 && rel <= 1e-5,
        "%s against the reference: losses %.3g relative, norms %.3g, masters %.3g of the move apart", name,
        dl, dg, rel);
  if (rank == 0)
    printf("%s (loss scale %g) against the reference scheme: losses within %.2g relative, norms %.2g, "
           "masters %.2g of the training's move\n",
           name, (double)scale, dl, dg, rel);
  optim_destroy(opt), par_gpt_destroy(m), par_engine_destroy(e);
  par_data_destroy(de), par_data_destroy(dr);
  free(master), free(g), free(mm), free(vv), free(p0), free(pe), free(in), free(tg), free(t);
}

/* ---------------------------------------------------------------- 2. parallel */

static uint64_t sent(comm_t *c, comm_kind_t k) {
  comm_counter_t n;
  comm_counters(c, k, &n);
  return n.bytes_sent;
}

static void parallel(int zero, const char *opt) {
  const int B = 2;
  size_t np = par_gpt_param_count(&mc);
  float *ps = malloc(np * 4), *pp = malloc(np * 4), *p0 = malloc(np * 4);
  par_engine_t *s = engine(MPI_COMM_SELF, 1, 0, B * ranks, PAR_PREC_BF16, opt, 0, 0),
               *e = engine(MPI_COMM_WORLD, ranks, zero, B, PAR_PREC_BF16, opt, 0, 0);
  par_data_t *ds = data(), *dd = data();
  double max_dl = 0;
  par_engine_get_params(s, p0);
  for (int step = 1; step <= STEPS; step++) {
    par_step_t a, b;
    comm_counters_reset(par_engine_comm(e));
    if (par_engine_step(s, ds, &a) || par_engine_step(e, dd, &b)) {
      CHECK(0, "zero %d step %d: %s / %s", zero, step, par_engine_error(s), par_engine_error(e));
      break;
    }
    double dl = fabs(a.loss - b.loss) / a.loss;
    if (dl > max_dl) max_dl = dl;
    if (step != 3 || !strcmp(opt, "lamb")) continue;
    par_engine_info_t in;
    par_engine_info(e, &in);
    comm_t *c = par_engine_comm(e);
    /* ZeRO's volumes in 2-byte elements, each times (n-1)/n as the rings
     * move them; the small fp64 allreduces (control word, per-view norms)
     * as zero_equiv counts them */
    double psi = (double)in.params_padded * 2, f = (double)(ranks - 1) / ranks;
    int nv = par_gpt_num_views(par_engine_model(e));
#define AR(bytes) (2 * (uint64_t)(ranks - 1) * (uint64_t)(bytes) / (uint64_t)ranks)
    uint64_t small = AR(3 * 8) + (zero >= 1 ? AR(nv * 8) : 0);
#undef AR
    double want_ar = (zero == 0 ? 2 * f * psi : 0) + (double)small, want_rs = zero >= 1 ? f * psi : 0;
    double want_ag = zero == 0 ? 0 : zero == 3 ? 2 * f * psi : f * psi, slack = zero == 0 ? in.buckets : 0;
    if (ranks == 1) want_ar = want_rs = want_ag = slack = 0;
    double got_ar = (double)sent(c, COMM_K_ALLREDUCE);
    CHECK(got_ar <= want_ar && got_ar >= want_ar - slack &&
              sent(c, COMM_K_REDUCE_SCATTER) == (uint64_t)llround(want_rs) &&
              sent(c, COMM_K_ALLGATHER) == (uint64_t)llround(want_ag),
          "bf16 zero %d: sent allreduce %.0f (want %.0f), reduce-scatter %llu (%.0f), all-gather %llu (%.0f)",
          zero, got_ar, want_ar, (unsigned long long)sent(c, COMM_K_REDUCE_SCATTER), want_rs,
          (unsigned long long)sent(c, COMM_K_ALLGATHER), want_ag);
    /* model states: 2 + 2 bytes and K = 12 (fp32 master, m, v) */
    double P = (double)in.params_padded;
    double want[3] = {2 * P / (zero >= 3 ? ranks : 1), 2 * P / (zero >= 2 ? ranks : 1),
                      12 * P / (zero >= 1 ? ranks : 1)};
    for (int i = 0; i < 3; i++)
      CHECK((double)in.state_bytes[i] == want[i], "bf16 zero %d: state %d holds %zu bytes, ZeRO's formula %.0f",
            zero, i, in.state_bytes[i], want[i]);
    par_cluster_t cl;
    par_cluster_preset("this-machine", &cl, NULL, 0);
    cl.nodes = 1, cl.gpus_per_node = ranks;
    par_layout_t lay = PAR_LAYOUT_DEFAULTS;
    lay.dp = ranks, lay.zero_stage = zero, lay.microbatch = B, lay.global_batch = B * ranks;
    lay.precision = PAR_PREC_BF16;
    par_plan_t pl;
    par_plan_params_t pp0;
    par_plan_params_engine(&pp0);
    CHECK(par_plan_estimate(&mc, &lay, &cl, &pp0, &pl) == 0, "planner: %s", pl.why);
    CHECK((double)in.state_bytes[0] == pl.mem[PAR_MEM_PARAMS] && (double)in.state_bytes[1] == pl.mem[PAR_MEM_GRADS] &&
              (double)in.state_bytes[2] == pl.mem[PAR_MEM_OPTIM],
          "bf16 zero %d: model states %zu + %zu + %zu bytes, planner %.0f + %.0f + %.0f", zero, in.state_bytes[0],
          in.state_bytes[1], in.state_bytes[2], pl.mem[PAR_MEM_PARAMS], pl.mem[PAR_MEM_GRADS], pl.mem[PAR_MEM_OPTIM]);
    size_t cur = 0, peak = 0;
    par_engine_memory(e, &cur, &peak);
    double act = (double)peak - (double)(in.state_bytes[0] + in.state_bytes[1] + in.state_bytes[2]) -
                 (double)in.buffer_peak;
    CHECK(fabs(pl.mem[PAR_MEM_ACTIV] / act - 1) <= 0.10, "bf16 zero %d: activations %.0f bytes, planner %.0f",
          zero, act, pl.mem[PAR_MEM_ACTIV]);
    if (rank == 0)
      printf("np=%d bf16 zero %d: model states %zu + %zu + %zu bytes (ZeRO's 2 + 2 + 12, planner equal), "
             "activations %.0f (planner %+.1f%%), pass buffers %zu; sent %.0f bytes per step\n",
             ranks, zero, in.state_bytes[0], in.state_bytes[1], in.state_bytes[2], act,
             100 * (pl.mem[PAR_MEM_ACTIV] / act - 1), in.buffer_peak,
             got_ar + (double)sent(c, COMM_K_REDUCE_SCATTER) + (double)sent(c, COMM_K_ALLGATHER));
  }
  par_engine_get_params(s, ps);
  par_engine_get_params(e, pp);
  double sums[2] = {0, 0};
  move_sums(ps, pp, p0, np, sums);
  double rel = sqrt(sums[0] / sums[1]);
  if (ranks == 1) /* nothing reordered, nothing rounded twice */
    CHECK(max_dl == 0 && rel == 0, "bf16 zero %d %s on one rank: losses %.3g, masters %.3g apart", zero, opt,
          max_dl, rel);
  CHECK(max_dl <= 1e-3 && rel <= 5e-2, "bf16 zero %d %s: losses %.3g relative, masters %.3g of the move apart",
        zero, opt, max_dl, rel);
  if (rank == 0)
    printf("np=%d bf16 zero %d %-5s: losses within %.2g relative of one rank's, masters %.2g of the move\n", ranks,
           zero, opt, max_dl, rel);
  par_engine_destroy(e), par_engine_destroy(s);
  par_data_destroy(ds), par_data_destroy(dd);
  free(ps), free(pp), free(p0);
}

/* ---------------------------------------------------------------- 3. loss scale */

static void loss_scale(int zero) {
  const int window = 2;
  size_t np = par_gpt_param_count(&mc);
  float *before = malloc(np * 4), *after = malloc(np * 4);
  par_engine_t *e = engine(MPI_COMM_WORLD, ranks, zero, 2, PAR_PREC_FP16, "adamw", 16777216.0, window);
  par_data_t *d = data();
  int skipped = 0, split = 0, good = 0, applied = 0;
  double expect = 16777216.0;
  for (int step = 1; step <= STEPS; step++) {
    par_step_t st;
    par_engine_get_params(e, before);
    if (par_engine_step(e, d, &st)) {
      CHECK(0, "fp16 zero %d step %d: %s", zero, step, par_engine_error(e));
      break;
    }
    par_engine_get_params(e, after);
    CHECK(st.loss_scale == expect, "fp16 zero %d step %d: loss scale %g, the rule gives %g", zero, step,
          st.loss_scale, expect);
    int flags[2] = {st.skipped, -st.skipped}, here[2] = {st.overflow_here, -st.overflow_here};
    MPI_Allreduce(MPI_IN_PLACE, flags, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, here, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    CHECK(flags[0] == -flags[1], "fp16 zero %d step %d: the ranks disagree on skipping", zero, step);
    CHECK(st.skipped == st.overflow, "fp16 zero %d step %d: skipped %d but overflow %d", zero, step, st.skipped,
          st.overflow);
    if (st.skipped) {
      skipped++, good = 0, expect /= 2;
      CHECK(!memcmp(before, after, np * 4), "fp16 zero %d step %d: a skipped step changed the masters", zero, step);
      if (here[0] != -here[1]) split++; /* some shards overflowed, others did not */
    } else {
      applied++;
      CHECK(memcmp(before, after, np * 4), "fp16 zero %d step %d: an applied step left the masters", zero, step);
      if (++good == window) expect *= 2, good = 0;
      if (expect > 16777216.0) expect = 16777216.0;
    }
  }
  CHECK(skipped >= 2 && applied >= 5, "fp16 zero %d: %d steps skipped, %d applied (the schedule needs both)", zero,
        skipped, applied);
  if (ranks > 1 && zero >= 2)
    CHECK(split > 0, "fp16 zero %d: no skipped step overflowed on some shards only (agreement untested)", zero);
  if (rank == 0)
    printf("np=%d fp16 zero %d: %d of %d steps skipped on every rank alike (%d overflowed on some ranks' shards "
           "only), final loss scale %g\n",
           ranks, zero, skipped, STEPS, split, expect);
  par_engine_destroy(e), par_data_destroy(d);
  free(before), free(after);
}

/* ---------------------------------------------------------------- 4. checkpoints */

static void checkpoints(const char *dir) {
  char path[600];
  snprintf(path, sizeof path, "%s/fp16.h5", dir);
  size_t np = par_gpt_param_count(&mc);
  float *saved = malloc(np * 4), *got = malloc(np * 4);
  double la[6], lb[6], sa[6], sb[6];
  par_engine_t *a = engine(MPI_COMM_WORLD, ranks, 2, 2, PAR_PREC_FP16, "adamw", 16777216.0, 2);
  par_data_t *d = data();
  for (int step = 1; step <= 6; step++) {
    par_step_t st;
    CHECK(par_engine_step(a, d, &st) == 0, "fp16 step %d: %s", step, par_engine_error(a));
    la[step - 1] = st.loss, sa[step - 1] = st.loss_scale;
    if (step == 3) {
      CHECK(par_engine_save(a, path, d, step, NULL, 0) == 0, "save: %s", par_engine_error(a));
      par_engine_get_params(a, saved);
    }
  }
  par_engine_destroy(a), par_data_destroy(d);
  /* the same layout resumes bit for bit */
  par_engine_t *b = engine(MPI_COMM_WORLD, ranks, 2, 2, PAR_PREC_FP16, "adamw", 16777216.0, 2);
  d = data();
  long step = 0;
  CHECK(par_engine_load(b, path, d, &step) == 0 && step == 3, "load: %s", par_engine_error(b));
  for (int s = 4; s <= 6; s++) {
    par_step_t st;
    CHECK(par_engine_step(b, d, &st) == 0, "resumed step %d: %s", s, par_engine_error(b));
    lb[s - 1] = st.loss, sb[s - 1] = st.loss_scale;
    CHECK(lb[s - 1] == la[s - 1] && sb[s - 1] == sa[s - 1],
          "fp16 resumed step %d: loss %.9g scale %g, uninterrupted %.9g scale %g", s, lb[s - 1], sb[s - 1],
          la[s - 1], sa[s - 1]);
  }
  par_engine_destroy(b), par_data_destroy(d);
  /* the masters load under another precision and layout unchanged */
  struct {
    MPI_Comm comm;
    int dp, zero;
    par_precision_t prec;
  } other[] = {{MPI_COMM_WORLD, ranks, 3, PAR_PREC_BF16}, {MPI_COMM_SELF, 1, 0, PAR_PREC_FP32}};
  for (int i = 0; i < 2; i++) {
    par_engine_t *c = engine(other[i].comm, other[i].dp, other[i].zero, 2, other[i].prec, "adamw", 0, 0);
    d = data();
    CHECK(par_engine_load(c, path, d, &step) == 0, "load under %d: %s", i, par_engine_error(c));
    par_engine_get_params(c, got);
    CHECK(!memcmp(saved, got, np * 4), "the masters changed loading under layout %d", i);
    par_step_t st;
    CHECK(par_engine_step(c, d, &st) == 0 && isfinite(st.loss), "a step after loading: %s", par_engine_error(c));
    par_engine_destroy(c), par_data_destroy(d);
  }
  MPI_Barrier(MPI_COMM_WORLD); /* every rank's serial load is done with the file */
  if (rank == 0) {
    printf("np=%d fp16 ZeRO-2 checkpoint: resumed bit for bit (losses and loss scale), loaded under bf16 ZeRO-3 "
           "and fp32 with the masters unchanged\n",
           ranks);
    unlink(path);
  }
  free(saved), free(got);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  harness_name = "mixed_precision";
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  char dir[256];
  snprintf(dir, sizeof dir, "%s/strata_mixed_XXXXXX", tmp);
  if (rank == 0 && !mkdtemp(dir)) MPI_Abort(MPI_COMM_WORLD, 1);
  MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (ranks == 1) {
    reference(PAR_PREC_BF16, 1.0f);
    reference(PAR_PREC_FP16, 1024.0f);
  }
  for (int zero = 0; zero <= 3; zero++) parallel(zero, "adamw");
  parallel(3, "lamb");
  for (int zero = 0; zero <= 3; zero++) loss_scale(zero);
  checkpoints(dir);
  if (rank == 0) rmdir(dir);
  return harness_finish(NULL);
}
