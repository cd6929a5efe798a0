/* Pipeline parallelism in the engine (mpirun -np 2, 4 and 8), composed with
 * tensor parallelism, sequence parallelism, data parallelism and ZeRO-1.
 *  - Parallel equals serial over a matrix of layouts (tp x pp x dp, each
 *    schedule, 1 to 8 microbatches, recompute, ZeRO 0/1, AdamW and LAMB,
 *    clipping on): STEPS steps give the serial run's losses, gradient norms
 *    and parameters. The serial run takes the same microbatches (B dp
 *    sequences each, accumulated over m), so only the order of fp32 sums
 *    differs: the pipeline changes none of them, the tensor and data groups
 *    reorder them as tests/train/tp_engine.c and zero_equiv.c argue, and the
 *    tolerances are theirs: losses 1e-6 relative, norms 1e-5, parameters
 *    1e-4 of the training's move. A lost microbatch, a gradient missing
 *    from a stage, the tied embedding's gradient summed twice or not at all,
 *    or a view counted twice in a norm moves them by far more.
 *  - Communication equals the formulas, from libcomm's counters: each
 *    stage sends b s h floats (b s h / t under sequence parallelism) per
 *    microbatch across each boundary it has, forward and back; the first
 *    and last stages sum the embedding's V h / t gradient once a step.
 *  - Activations in flight, measured by the accountant: GPipe holds all m
 *    microbatches, 1F1B p - stage of them; the worst rank's model states
 *    and activations equal the planner's within 10% for both and for a few
 *    3D layouts (tp x pp x dp, sequence parallel, recompute, ZeRO-1).
 *  - The measured bubble is the schedule's, (p - 1) / (m + p - 1), divided
 *    by the interleave (with the operations slowed to dominate).
 *  - DeepSpeed's partitioned activation checkpoints (recompute, tp > 1):
 *    the serial results, the gathers' bytes by the formula, memory by the
 *    planner's.
 *  - bf16 parameters, gradients and collectives compose too, within the
 *    bounds tests/train/mixed_precision.c argues for bf16 (losses 1e-3
 *    relative, parameters 5e-2 of the move; gradient norms, which carry the
 *    drift of the masters into later steps, 5e-2).
 *  - Validation runs forward through the stages: the serial loss.
 *  - A failure of one stage's forward is every rank's, in the same step.
 *  - Checkpoints: saved under tp x pp x dp, loaded serially and under
 *    other layouts with every parameter exact, and the runs go on. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <strata/parallel.h>
#include <strata/tensor.h>

#include "bad_tokens.h"
#include "harness.h"

#define STEPS 10
static par_gpt_config_t mc = {.layers = 4, .hidden = 24, .heads = 4, .seq = 18, .vocab = 256};

typedef struct {
  int tp, pp, dp;
  par_schedule_t sched;
  int m, v, recompute, zero, seqpar;
  const char *opt;
  int part; /* DeepSpeed's partitioned activation checkpoints (with recompute) */
  int prec; /* par_precision_t */
} case_t;

static const char *sched_name(par_schedule_t s) {
  return s == PAR_SCHED_GPIPE ? "gpipe" : s == PAR_SCHED_1F1B ? "1f1b" : "interleaved";
}

static par_layout_t layout_of(const case_t *c, int B) {
  par_layout_t lay = PAR_LAYOUT_DEFAULTS;
  lay.tp = c->tp, lay.pp = c->pp, lay.dp = c->dp, lay.zero_stage = c->zero, lay.microbatch = B;
  lay.global_batch = B * c->dp * c->m, lay.schedule = c->sched, lay.interleave = c->v;
  lay.seq_parallel = c->seqpar;
  lay.partition_activations = c->part;
  lay.precision = (par_precision_t)c->prec;
  return lay;
}

static par_engine_t *engine(MPI_Comm comm, const case_t *c, int B) {
  par_layout_t lay = layout_of(c, B);
  par_gpt_config_t m = mc;
  m.recompute = c->recompute;
  par_optim_config_t oc = PAR_OPTIM_CONFIG_DEFAULTS;
  oc.name = c->opt, oc.lr = 1e-2, oc.clip = 0.5, oc.warmup = 2, oc.weight_decay = 0.01;
  par_engine_options_t eo = PAR_ENGINE_OPTIONS_DEFAULTS;
  eo.steps = STEPS, eo.threads = 1, eo.seed = 5, eo.comm = comm, eo.bucket_mb = 0.004;
  return make_engine(&m, &lay, &oc, &eo);
}

static void describe(const case_t *c, char *buf, size_t n) {
  snprintf(buf, n, "tp %d%s x pp %d x dp %d %s m=%d%s%s zero %d %s%s", c->tp, c->seqpar ? " seq-parallel" : "", c->pp,
           c->dp, sched_name(c->sched), c->m, c->v > 1 ? " interleave 2" : "",
           c->part ? " recompute partitioned" : c->recompute ? " recompute" : "", c->zero, c->opt,
           c->prec == PAR_PREC_BF16 ? " bf16" : "");
}

static uint64_t sent(comm_t *c, comm_kind_t k) {
  comm_counter_t cnt = {0};
  if (c) comm_counters(c, k, &cnt);
  return cnt.bytes_sent;
}

/* One step's pipeline and embedding traffic against the formulas. */
static void volumes(par_engine_t *e, const case_t *c, par_data_t *d, int B) {
  comm_t *pp = par_engine_group(e, "pp"), *emb = par_engine_group(e, "embedding");
  comm_counters_reset(pp);
  if (emb) comm_counters_reset(emb);
  par_step_t st;
  CHECK(par_engine_step(e, d, &st) == 0, "step: %s", par_engine_error(e));
  int stage = rank / (c->tp * c->dp), P = c->pp * c->v, fwd = 0, bwd = 0;
  for (int k = 0; k < c->v; k++) {
    int vs = k * c->pp + stage;
    fwd += vs < P - 1, bwd += vs > 0;
  }
  /* the activations' element size: 4 (f32) on the CPU; bf16 ones on a device send 2 (gpu_pp_engine.c) */
  uint64_t es = tensor_dtype_size((tensor_dtype_t)par_gpt_act_dtype(par_engine_model(e)));
  uint64_t msg = (uint64_t)B * mc.seq * mc.hidden * es / (c->seqpar ? c->tp : 1);
  uint64_t want = (uint64_t)c->m * (fwd + bwd) * msg, got = sent(pp, COMM_K_SEND);
  CHECK(got == want, "pipeline sends %llu bytes, the formula %d x (%d + %d) x %llu = %llu",
        (unsigned long long)got, c->m, fwd, bwd, (unsigned long long)msg, (unsigned long long)want);
  if (stage == 0 || stage == c->pp - 1) {
    /* an allreduce of two ranks sends its whole vector once: wte's V h / t floats (ZeRO-1: this rank's share) */
    uint64_t wte = (uint64_t)mc.vocab * mc.hidden / c->tp * (c->prec ? 2 : 4), e_got = sent(emb, COMM_K_ALLREDUCE);
    CHECK(c->zero ? e_got <= wte && e_got > 0 : e_got == wte, "embedding gradient sum %llu bytes, wte %llu",
          (unsigned long long)e_got, (unsigned long long)wte);
  } else {
    CHECK(emb == NULL, "a middle stage in the embedding group");
  }
  if (rank == 0) {
    char what[160];
    describe(c, what, sizeof what);
    printf("%s: pipeline sends %llu bytes per step on stage 0 (m x boundaries x b s h x %llu), embedding sum %llu\n",
           what, (unsigned long long)got, (unsigned long long)es, (unsigned long long)sent(emb, COMM_K_ALLREDUCE));
  }
}

static void equiv(const case_t *c) {
  const int B = 2;
  char what[160];
  describe(c, what, sizeof what);
  case_t sc = {1, 1, 1, PAR_SCHED_1F1B, c->m, 1, 0, 0, 0, c->opt, 0, c->prec};
  size_t np = par_gpt_param_count(&mc);
  par_engine_t *s = engine(MPI_COMM_SELF, &sc, B * c->dp), *e = engine(MPI_COMM_WORLD, c, B);
  par_gpt_t *sm = par_engine_model(s), *em = par_engine_model(e);
  size_t nl = local_count(em);
  float *ps = malloc(np * 4), *p0 = malloc(np * 4), *pe = malloc(nl * 4), *want = malloc(nl * 4),
        *w0 = malloc(nl * 4);
  par_data_t *ds = markov_data(mc.seq), *dd = markov_data(mc.seq);
  double max_dl = 0, max_dg = 0;
  par_engine_get_params(s, p0);
  for (int step = 1; step <= STEPS; step++) {
    par_step_t a, b;
    if (par_engine_step(s, ds, &a) || par_engine_step(e, dd, &b)) {
      CHECK(0, "%s step %d: %s / %s", what, step, par_engine_error(s), par_engine_error(e));
      break;
    }
    max_dl = fmax(max_dl, fabs(a.loss - b.loss) / a.loss);
    max_dg = fmax(max_dg, fabs(a.grad_norm - b.grad_norm) / a.grad_norm);
  }
  /* bf16 (tests/train/mixed_precision.c argues the bounds): the tied
   * embedding's gradient is rounded to bf16 in two parts, the head's on the
   * last stage and the lookup's on the first, and summed in bf16, where the
   * serial run rounds their sum once */
  double tl = c->prec ? 1e-3 : 1e-6, tg = c->prec ? 5e-2 : 1e-5, tm = c->prec ? 5e-2 : 1e-4;
  /* validation, forward only through the stages: 4 batches of B, the serial run's 4 / dp of B dp */
  double va = NAN, vb = NAN;
  CHECK(par_engine_evaluate(s, ds, 4 / c->dp, &va) == 0 && par_engine_evaluate(e, dd, 4, &vb) == 0,
        "%s: evaluate: %s / %s", what, par_engine_error(s), par_engine_error(e));
  CHECK(fabs(va - vb) <= tl * va, "%s: validation loss %.9g, serial %.9g", what, vb, va);
  CHECK(par_engine_get_params(s, ps) == 0 && par_engine_get_params(e, pe) == 0, "%s: get_params: %s / %s", what,
        par_engine_error(s), par_engine_error(e));
  slice_all(em, sm, ps, want, rank % c->tp);
  slice_all(em, sm, p0, w0, rank % c->tp);
  double sums[2] = {0, 0};
  move_sums(want, pe, w0, nl, sums);
  MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  double rel = sqrt(sums[0] / sums[1]);
  CHECK(max_dl <= tl && max_dg <= tg && rel <= tm,
        "%s: losses %.3g relative, norms %.3g, parameters %.3g of the move apart", what, max_dl, max_dg, rel);
  if (rank == 0)
    printf("%s: losses within %.2g relative of one rank's, norms %.2g, parameters %.2g of the move\n", what, max_dl,
           max_dg, rel);
  if (c->recompute == 0 && !strcmp(c->opt, "adamw")) volumes(e, c, dd, B);
  par_engine_destroy(e), par_engine_destroy(s);
  par_data_destroy(ds), par_data_destroy(dd);
  free(ps), free(p0), free(pe), free(want), free(w0);
}

/* Partitioned checkpoints gather each kept block input over the tensor
 * group before recomputing it: per step m x (blocks of the stage) more
 * all-gathers of b s h floats, (t - 1) / t of them sent by each rank, and
 * nothing else changes. */
static void part_volume(const case_t *c, int B) {
  case_t plain = *c;
  plain.part = 0;
  uint64_t got[2];
  for (int k = 0; k < 2; k++) {
    par_engine_t *e = engine(MPI_COMM_WORLD, k ? c : &plain, B);
    par_data_t *d = markov_data(mc.seq);
    par_step_t st;
    CHECK(par_engine_step(e, d, &st) == 0, "step: %s", par_engine_error(e));
    comm_t *tp = par_engine_group(e, "tp");
    comm_counters_reset(tp);
    CHECK(par_engine_step(e, d, &st) == 0, "step: %s", par_engine_error(e));
    got[k] = sent(tp, COMM_K_ALLGATHER);
    par_engine_destroy(e), par_data_destroy(d);
  }
  uint64_t blocks = (uint64_t)mc.layers / c->pp, row = (uint64_t)B * mc.seq * mc.hidden * 4;
  uint64_t want = (uint64_t)c->m * blocks * row * (c->tp - 1) / c->tp;
  CHECK(got[1] - got[0] == want, "partitioned checkpoints gather %llu more bytes a step, the formula %llu",
        (unsigned long long)(got[1] - got[0]), (unsigned long long)want);
  /* and the planner's tensor-parallel bytes grow by as many */
  double plan_tp[2];
  for (int k = 0; k < 2; k++) {
    par_layout_t lay = layout_of(k ? c : &plain, B);
    par_gpt_config_t m = mc;
    m.recompute = c->recompute;
    par_cluster_t cl;
    par_cluster_preset("this-machine", &cl, NULL, 0);
    cl.gpus_per_node = ranks;
    par_plan_params_t pp;
    par_plan_params_engine(&pp);
    par_plan_t pl;
    CHECK(par_plan_estimate(&m, &lay, &cl, &pp, &pl) == 0, "planner: %s", pl.why);
    plan_tp[k] = pl.comm_bytes[PAR_T_TP];
  }
  CHECK(plan_tp[1] - plan_tp[0] == (double)want, "the planner's partitioned checkpoints: %.0f more bytes, %llu gathered",
        plan_tp[1] - plan_tp[0], (unsigned long long)want);
  if (rank == 0)
    printf("partitioned checkpoints over tp %d: %llu more bytes gathered a step (m x blocks x b s h x 4 x (t-1)/t)\n",
           c->tp, (unsigned long long)(got[1] - got[0]));
}

/* Trains two steps of case c; *slots: the microbatches this rank held at
 * once; returns the worst rank's model states and activations against the
 * planner's worst stage (*planned). */
static double measured_memory(const case_t *c, int B, int *slots, double *planned) {
  par_engine_t *e = engine(MPI_COMM_WORLD, c, B);
  par_data_t *d = markov_data(mc.seq);
  par_step_t st;
  for (int s = 0; s < 2; s++) CHECK(par_engine_step(e, d, &st) == 0, "step: %s", par_engine_error(e));
  par_engine_info_t info;
  par_engine_info(e, &info);
  size_t peak = 0;
  par_engine_memory(e, NULL, &peak);
  *slots = info.slots;
  /* the accountant's peak less the pass's transient buffers (the planner counts the engine's apart) */
  double mine = (double)peak - (double)info.buffer_peak, worst = 0;
  MPI_Allreduce(&mine, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  par_plan_t pl;
  par_layout_t lay = layout_of(c, B);
  par_gpt_config_t m = mc;
  m.recompute = c->recompute;
  CHECK(plan_here(&m, &lay, &pl) == 0, "planner: %s", pl.why);
  *planned = pl.mem[PAR_MEM_PARAMS] + pl.mem[PAR_MEM_GRADS] + pl.mem[PAR_MEM_OPTIM] + pl.mem[PAR_MEM_ACTIV];
  par_engine_destroy(e), par_data_destroy(d);
  return worst;
}

/* Memory per rank against the planner's, within 10%: GPipe against 1F1B
 * over pp = ranks stages and 8 microbatches (the slots each stage holds: m,
 * and p - stage; up to 4 stages), then the 3D layouts given. */
static void memory(const case_t *layouts, int n) {
  const int B = 2, m = 8;
  case_t g = {1, ranks, 1, PAR_SCHED_GPIPE, m, 1, 0, 0, 0, "adamw", 0, 0}, f = g;
  f.sched = PAR_SCHED_1F1B;
  int slots[2];
  for (int k = 0; k < 2 + n; k++) {
    if (k < 2 && mc.layers % ranks) continue; /* (4 layers: not over 8 stages) */
    const case_t *c = k == 0 ? &g : k == 1 ? &f : &layouts[k - 2];
    char what[160];
    describe(c, what, sizeof what);
    double planned, worst = measured_memory(c, B, &slots[k < 2 ? k : 0], &planned);
    CHECK(fabs(planned / worst - 1) <= 0.10, "%s: the worst rank's %.0f bytes, planner %.0f", what, worst, planned);
    if (rank == 0)
      printf("%s: the worst rank holds %.0f bytes of model states and activations (planner %+.1f%%)\n", what, worst,
             100 * (planned / worst - 1));
    if (k == 1)
      CHECK(slots[0] == m && slots[1] == ranks - rank, "stage %d holds %d microbatches (GPipe, want %d) and %d "
            "(1F1B, want %d)", rank, slots[0], m, slots[1], ranks - rank);
    if (k == 1 && rank == 0)
      printf("pp %d m=%d: stage 0 holds %d microbatches under GPipe, %d under 1F1B\n", ranks, m, slots[0], slots[1]);
  }
}

/* The measured bubble: with every forward made to last 20 ms (a chunk's
 * share of it) and every backward 40 ms, far above the tiny model's compute,
 * the share of the step each stage spends outside its forwards and
 * backwards (1 - par_step_t.pipe_busy_s / seconds) is the schedule's idle share:
 * (p - 1) / (m + p - 1) for GPipe and 1F1B, (p - 1) / (v m + p - 1)
 * interleaved. Within 0.03 (the least idle of three steps: a busy
 * machine's noise only adds waiting): the compute, the sends and the
 * machine's scheduling noise are a few ms against the 0.4 s or more of a step, and
 * a schedule that serialised the stages, or a device that waited for a
 * send, would idle far more. */
static void bubble(void) {
  const int m = 4, p = ranks;
  case_t cases[] = {{1, p, 1, PAR_SCHED_GPIPE, m, 1, 0, 0, 0, "adamw", 0, 0},
                    {1, p, 1, PAR_SCHED_1F1B, m, 1, 0, 0, 0, "adamw", 0, 0},
                    {1, p, 1, PAR_SCHED_INTERLEAVED, m, 2, 0, 0, 0, "adamw", 0, 0}};
  for (int k = 0; k < 3; k++) {
    const case_t *c = &cases[k];
    if (mc.layers % (p * c->v)) continue; /* (4 layers: interleaved over 2 stages only) */
    par_layout_t lay = layout_of(c, 2);
    par_optim_config_t oc = PAR_OPTIM_CONFIG_DEFAULTS;
    par_engine_options_t eo = PAR_ENGINE_OPTIONS_DEFAULTS;
    eo.steps = 4, eo.threads = 1, eo.delay_ops_s = 0.02;
    par_engine_t *e = make_engine(&mc, &lay, &oc, &eo);
    par_data_t *d = markov_data(mc.seq);
    par_step_t st;
    double share[2] = {1, 0};
    /* the least idle of three steps after the first: a neighbour's load only ever adds waiting */
    for (int s = 0; s < 4; s++) {
      CHECK(par_engine_step(e, d, &st) == 0, "step: %s", par_engine_error(e));
      if (s > 0) share[0] = fmin(share[0], 1 - st.pipe_busy_s / st.seconds);
    }
    MPI_Allreduce(MPI_IN_PLACE, share, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    double got = share[0] / p, want = (p - 1.0) / (c->v * m + p - 1.0);
    CHECK(fabs(got - want) <= 0.03, "%s over %d stages, m = %d: idle share %.3f, the schedule's %.3f",
          sched_name(c->sched), p, m, got, want);
    if (rank == 0)
      printf("pp %d %s m=%d%s: measured idle share %.3f, the schedule's (p - 1) / (%sm + p - 1) = %.3f\n", p,
             sched_name(c->sched), m, c->v > 1 ? " interleave 2" : "", got, c->v > 1 ? "v " : "", want);
    par_engine_destroy(e), par_data_destroy(d);
  }
}

/* The first stage's forward fails in step 2 (its data holds tokens the
 * vocabulary lacks): it passes the schedule's messages on without
 * computing, every rank returns its error in that step, and the next step
 * works. */
static void fault(const char *dir) {
  case_t c = {1, ranks, 1, PAR_SCHED_1F1B, 4, 1, 0, 0, 0, "adamw", 0, 0};
  par_engine_t *e = engine(MPI_COMM_WORLD, &c, 2);
  par_data_t *good = markov_data(mc.seq), *bad = rank == 0 ? bad_tokens(dir, rank, mc.seq) : NULL;
  par_step_t st;
  int rc = 0, step;
  for (step = 1; step <= 3 && rc == 0; step++) rc = par_engine_step(e, step == 2 && bad ? bad : good, &st);
  CHECK(rc == STRATA_EINVAL && step - 1 == 2, "rc %d after step %d, want EINVAL in step 2", rc, step - 1);
  CHECK(strstr(par_engine_error(e), "[rank 0] forward: par_gpt_forward: tokens[") != NULL, "message '%s'",
        par_engine_error(e));
  CHECK(par_engine_error_all_ranks(e), "the error is not every rank's");
  CHECK(par_engine_step(e, good, &st) == 0 && isfinite(st.loss), "the step after the failure: %s",
        par_engine_error(e));
  if (rank == 0) printf("pp %d: a failed first stage is every rank's error in the same step; the next step trains\n",
                        ranks);
  par_data_destroy(bad), par_data_destroy(good);
  par_engine_destroy(e);
  char path[600];
  snprintf(path, sizeof path, "%s/bad-%d.u16", dir, rank);
  unlink(path);
}

/* 3 layers over 2 stages: the planner estimates the uneven split (the
 * heavier stage's 2 blocks govern), the engine refuses it (its stages hold
 * layers / pp blocks each), naming both numbers. */
static void uneven(void) {
  par_gpt_config_t m = mc;
  m.layers = 3;
  case_t c = {1, ranks, 1, PAR_SCHED_1F1B, 2, 1, 0, 0, 0, "adamw", 0, 0};
  par_layout_t lay = layout_of(&c, 2);
  char why[256];
  CHECK(par_layout_validate(&m, &lay, ranks, why, sizeof why) == 0, "the planner's check: %s", why);
  par_optim_config_t oc = PAR_OPTIM_CONFIG_DEFAULTS;
  par_engine_options_t eo = PAR_ENGINE_OPTIONS_DEFAULTS;
  par_engine_t *e = NULL;
  char err[512] = "";
  int rc = par_engine_create(&e, &m, &lay, &oc, &eo, err, sizeof err);
  CHECK(rc == STRATA_EINVAL && strstr(err, "layers 3 are not divisible by 2 stages"), "uneven split: rc %d, '%s'",
        rc, err);
  if (e) par_engine_destroy(e);
  if (rank == 0 && rc == STRATA_EINVAL) printf("pp %d: the engine refuses 3 layers over 2 stages: %s\n", ranks, err);
}

/* Saved under the first layout, every other one holds the same model. */
static void reshard(const char *dir, const case_t *save, const case_t *loads, int nloads) {
  char path[600];
  snprintf(path, sizeof path, "%s/pp.h5", dir);
  size_t np = par_gpt_param_count(&mc);
  par_engine_t *a = engine(MPI_COMM_WORLD, save, 2);
  par_data_t *d = markov_data(mc.seq);
  par_step_t st;
  for (int k = 0; k < 3; k++) CHECK(par_engine_step(a, d, &st) == 0, "step: %s", par_engine_error(a));
  CHECK(par_engine_save(a, path, d, 3, NULL, 0) == 0, "save: %s", par_engine_error(a));
  size_t na = local_count(par_engine_model(a));
  float *saved = malloc(na * 4), *full = malloc(np * 4), *want = malloc(np * 4);
  par_engine_get_params(a, saved);
  par_data_destroy(d);
  case_t one = {1, 1, 1, PAR_SCHED_1F1B, 1, 1, 0, 0, 0, "adamw", 0, 0};
  par_engine_t *s = engine(MPI_COMM_SELF, &one, 2);
  d = markov_data(mc.seq);
  long step = 0;
  CHECK(par_engine_load(s, path, d, &step) == 0 && step == 3, "serial load: %s", par_engine_error(s));
  par_engine_get_params(s, full);
  slice_all(par_engine_model(a), par_engine_model(s), full, want, rank % save->tp);
  CHECK(!memcmp(want, saved, na * 4), "serial load: not the saved model");
  CHECK(par_engine_step(s, d, &st) == 0 && isfinite(st.loss), "a serial step after loading: %s", par_engine_error(s));
  par_data_destroy(d);
  for (int k = 0; k < nloads; k++) {
    char what[160];
    describe(&loads[k], what, sizeof what);
    par_engine_t *b = engine(MPI_COMM_WORLD, &loads[k], 2);
    d = markov_data(mc.seq);
    check_loaded(b, d, path, par_engine_model(s), full, loads[k].tp, what);
    par_engine_destroy(b), par_data_destroy(d);
  }
  par_engine_destroy(s), par_engine_destroy(a);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    char what[160];
    describe(save, what, sizeof what);
    printf("a checkpoint saved under %s loads serially and under %d other layouts, every parameter exact\n", what,
           nloads);
    unlink(path);
  }
  free(saved), free(full), free(want);
}

int main(int argc, char **argv) {
  char dir[256];
  harness_start(&argc, &argv, "pp_engine", dir, sizeof dir);
  const par_schedule_t G = PAR_SCHED_GPIPE, F = PAR_SCHED_1F1B, I = PAR_SCHED_INTERLEAVED;
  if (ranks == 2) {
    const case_t cases[] = {
        {1, 2, 1, G, 4, 1, 0, 0, 0, "adamw", 0, 0}, {1, 2, 1, F, 4, 1, 0, 0, 0, "adamw", 0, 0},
        {1, 2, 1, F, 1, 1, 0, 0, 0, "lamb", 0, 0},  {1, 2, 1, I, 4, 2, 0, 0, 0, "adamw", 0, 0},
        {1, 2, 1, F, 3, 1, 1, 0, 0, "lamb", 0, 0},  {1, 2, 1, I, 2, 2, 1, 0, 0, "lamb", 0, 0},
        {2, 1, 1, F, 2, 1, 1, 0, 0, "adamw", 1, 0}, {1, 2, 1, F, 4, 1, 0, 0, 0, "adamw", 0, PAR_PREC_BF16},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) equiv(&cases[k]);
    const case_t layouts[] = {{2, 1, 1, F, 2, 1, 1, 0, 0, "adamw", 1, 0}};
    memory(layouts, 1);
    part_volume(&layouts[0], 2);
    bubble();
    fault(dir);
    uneven();
    const case_t loads[] = {{2, 1, 1, F, 1, 1, 0, 0, 0, "adamw", 0, 0}, {1, 1, 2, F, 1, 1, 0, 1, 0, "adamw", 0, 0}};
    const case_t save = {1, 2, 1, I, 2, 2, 0, 0, 0, "adamw", 0, 0};
    reshard(dir, &save, loads, 2);
  } else if (ranks == 4) {
    const case_t cases[] = {
        {1, 4, 1, F, 8, 1, 0, 0, 0, "adamw", 0, 0}, {1, 2, 2, F, 4, 1, 0, 1, 0, "adamw", 0, 0},
        {2, 2, 1, F, 4, 1, 0, 0, 1, "adamw", 0, 0}, {2, 2, 1, G, 2, 1, 1, 0, 0, "lamb", 0, 0},
        {1, 2, 2, I, 4, 2, 0, 1, 0, "lamb", 0, 0},  {1, 4, 1, G, 5, 1, 0, 0, 0, "lamb", 0, 0},
        {2, 2, 1, F, 4, 1, 1, 0, 0, "lamb", 1, 0},  {2, 2, 1, F, 4, 1, 0, 0, 0, "lamb", 0, PAR_PREC_BF16},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) equiv(&cases[k]);
    const case_t layouts[] = {{2, 2, 1, F, 4, 1, 0, 0, 1, "adamw", 0, 0},
                              {2, 2, 1, G, 4, 1, 1, 0, 0, "adamw", 0, 0},
                              {2, 2, 1, G, 4, 1, 1, 0, 0, "adamw", 1, 0}};
    memory(layouts, 3);
    part_volume(&layouts[2], 2);
    bubble();
    fault(dir);
  } else if (ranks == 8) {
    const case_t cases[] = {
        {2, 2, 2, F, 4, 1, 0, 1, 1, "adamw", 0, 0}, {2, 2, 2, I, 2, 2, 1, 1, 0, "lamb", 0, 0},
        {4, 2, 1, G, 2, 1, 0, 0, 1, "adamw", 0, 0}, {1, 4, 2, F, 8, 1, 0, 1, 0, "lamb", 0, 0},
        {2, 2, 2, F, 4, 1, 1, 1, 0, "adamw", 1, 0}, {2, 2, 2, F, 4, 1, 0, 1, 1, "adamw", 0, PAR_PREC_BF16},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) equiv(&cases[k]);
    const case_t layouts[] = {{2, 2, 2, F, 4, 1, 0, 1, 1, "adamw", 0, 0}, {2, 4, 1, F, 8, 1, 0, 0, 0, "adamw", 0, 0}};
    memory(layouts, 2);
    /* saved under tp 2 x pp 2 x dp 2; loaded under tp 1 x pp 4 x dp 2 and tp 4 x pp 2 */
    const case_t save = {2, 2, 2, F, 2, 1, 0, 1, 0, "adamw", 0, 0};
    const case_t loads[] = {{1, 4, 2, F, 4, 1, 0, 1, 0, "adamw", 0, 0}, {4, 2, 1, G, 2, 1, 0, 0, 0, "adamw", 0, 0}};
    reshard(dir, &save, loads, 2);
  }
  if (rank == 0) rmdir(dir);
  return harness_finish(NULL);
}
