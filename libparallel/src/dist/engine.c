/* The training engine: model, optimizer and communicators of one rank,
 * with step, evaluate, save and load (strata/par_train.h). Tensor
 * parallelism runs inside the model, pipeline stages in pipeline.c, the
 * optimizer state's offload through liboffload (state.c).
 *
 * Data parallelism with ZeRO stage 0-3 (state.c has the layout and the
 * communication): every rank computes its share of the global batch; the
 * gradients are reduced while backward runs; the optimizer updates this
 * rank's part of the state (all of it at stage 0), with the norms that need
 * the whole tensor (clipping, LAMB's and LARS's trust ratios) summed over
 * the ranks from liboptim's partial sums. Resume is exact: the checkpoint
 * holds the parameters, the optimizer state and step, and the data
 * position, and the computation is deterministic for a given layout and
 * thread count, so the losses after a resume are bit-identical to an
 * uninterrupted run.
 *
 * On a CUDA device (opts.device) the model, the flat parameter and
 * gradient buffers, ZeRO's shards and pass buffers, the fp32 masters and
 * the optimizer state are all device tensors of the model's context: the
 * state's copies, casts and sums are libtensor's, the update liboptim's
 * multi-tensor kernels, the collectives on them NCCL's (libcomm). Ordering:
 * libtensor and liboptim queue their work on the legacy default stream;
 * libcomm starts a device collective on its own stream after the work
 * queued there before the call (an event), so a bucket posted from the
 * hook after backward queued its gradients reduces those gradients while
 * the rest of backward runs, and comm_wait/comm_test report completion on
 * the device, which the update (state_finish_reductions first) and the
 * buffers' release wait for. Norms and the loss come back to the host as
 * doubles (liboptim's sums); checkpoints pass through host buffers. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine_internal.h"

int engine_fail(par_engine_t *e, int all, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->err, sizeof e->err, fmt, ap);
  va_end(ap);
  e->err_all = all;
  return code;
}

const char *par_engine_error(const par_engine_t *e) { return e ? e->err : "no engine"; }
int par_engine_error_all_ranks(const par_engine_t *e) { return e ? e->err_all : 1; }
par_gpt_t *par_engine_model(par_engine_t *e) { return e ? e->model : NULL; }
comm_t *par_engine_comm(par_engine_t *e) { return e ? e->comm : NULL; }

comm_t *par_engine_group(par_engine_t *e, const char *name) {
  if (!e || !name) return NULL;
  if (!strcmp(name, "dp")) return e->comm;
  if (!strcmp(name, "tp")) return e->tpc;
  if (!strcmp(name, "pp")) return e->ppc;
  if (!strcmp(name, "embedding")) return e->embc;
  if (!strcmp(name, "run")) return e->wc;
  if (!strcmp(name, "sp")) return e->ringc;
  return NULL;
}

double engine_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const char *par_engine_describe(const par_engine_t *e, const char *what) {
  if (!e || !what) return "";
  if (!strcmp(what, "model")) return e->model_desc;
  if (!strcmp(what, "optim")) return e->optim_desc;
  if (!strcmp(what, "optim_name")) return e->optim_name;
  if (!strcmp(what, "layout")) return e->layout_desc;
  return "";
}

static int comm_failed(par_engine_t *e, int rc) {
  return engine_fail(e, 0, rc, "%s", comm_last_error(e->comm));
}

/* ------------------------------------------------------------ optimizer */

/* The optimizer and one optim_tensor per piece of this rank's state. */
static int setup_optimizer(par_engine_t *e, const par_optim_config_t *c) {
  int nv = par_gpt_num_views(e->model);
  if (!(e->tens = calloc((size_t)e->npieces + 1, sizeof *e->tens)) ||
      !(e->sq = calloc(2 * (size_t)e->npieces + 2, sizeof *e->sq)) ||
      !(e->vsq = calloc(4 * (size_t)nv, sizeof *e->vsq)) || /* (and the replicated views' own, sum_split_views) */
      !(e->trust = malloc((size_t)(nv > 0 ? nv : 1) * sizeof *e->trust)))
    return engine_fail(e, 0, STRATA_ENOMEM, "out of memory for %d optimizer tensors", e->npieces);
  for (int i = 0; i < e->npieces; i++) {
    float *p, *g, *m, *v;
    void *lowp;
    state_piece_ptrs(e, i, &p, &g, &m, &v, &lowp);
    e->tens[i] = (optim_tensor){.param = p, .grad = g, .m = m, .v = v, .lowp = lowp,
                                .lowp_dtype = !e->mixed              ? OPTIM_LOWP_NONE
                                              : e->wdt == TENSOR_BF16 ? OPTIM_LOWP_BF16
                                                                      : OPTIM_LOWP_F16,
                                .group = e->groups[par_gpt_view(e->model, e->pieces[i].view)->decay ? 0 : 1],
                                .n = e->pieces[i].n};
  }
  for (int i = 0; i < nv; i++) e->trust[i] = NAN;
  e->base_lr = c->lr;
  return STRATA_OK;
}

/* ------------------------------------------------------------ create */

/* Where the engine trains (opts.device): e->device, the CUDA device made
 * this process's current one before any collective (NCCL communicators and
 * libcomm's pointer queries use it). PAR_DEVICE_AUTO falls back to the CPU,
 * on every rank alike, when any rank has no GPU. */
static int pick_device(par_engine_t *e, const par_layout_t *lay) {
  int want = e->opts.device, dev = want, rc;
  char msg[320];
  e->device = TENSOR_CPU;
  if (want == PAR_DEVICE_CPU) return STRATA_OK;
  if (want < PAR_DEVICE_CUDA)
    return engine_fail(e, 1, STRATA_EINVAL,
                       "device %d: expected a CUDA ordinal >= 0, -1 (the CPU), -2 (auto: a GPU per rank when "
                       "there are GPUs) or -3 (a GPU per rank)", want);
  if (want < 0 && comm_local_device(e->world, &dev, NULL) != STRATA_OK)
    return engine_fail(e, 0, STRATA_EMPI, "device: cannot group the run's ranks by node");
  if (want == PAR_DEVICE_AUTO) {
    int have = dev >= 0;
    MPI_Allreduce(MPI_IN_PLACE, &have, 1, MPI_INT, MPI_MIN, e->world);
    if (!have) {
      if (e->wrank == 0)
        fprintf(stderr, "strata: device auto: %s; training on the CPU\n",
                comm_cuda_device_count() > 0 ? "a rank of the run has no GPU"
                                             : "no CUDA device here (or a build without CUDA)");
      return STRATA_OK;
    }
  }
  if (dev < 0) { /* (no device here: comm_cuda_set_device says why) */
    comm_cuda_set_device(0, msg, sizeof msg);
    return engine_fail(e, 1, STRATA_EUNSUPPORTED, "device cuda (a GPU per rank): %s", msg);
  }
  if ((rc = comm_cuda_set_device(dev, msg, sizeof msg)) != STRATA_OK)
    return engine_fail(e, 1, rc, "device cuda:%d: %s", dev, msg);
  e->device = dev;
  return STRATA_OK;
}

static int create(par_engine_t *e, const par_gpt_config_t *mc, const par_layout_t *lay,
                  const par_optim_config_t *oc) {
  char why[512];
  MPI_Comm world = e->opts.comm == MPI_COMM_NULL ? MPI_COMM_WORLD : e->opts.comm;
  e->world = world;
  MPI_Comm_rank(world, &e->wrank), MPI_Comm_size(world, &e->wsize);
  if (par_layout_validate(mc, lay, e->wsize, why, sizeof why) != STRATA_OK)
    return engine_fail(e, 1, STRATA_EINVAL, "layout: %s", why);
  int rc;
  if ((rc = pick_device(e, lay))) return rc;
  e->host_opt = e->device >= 0 && lay->offload_optimizer != PAR_TIER_DEVICE; /* ZeRO-Offload on a device */
  e->opt_host = e->host_opt || (e->device >= 0 && e->opts.offload_chunks);
  if (lay->tp_mode != PAR_TP_1D && (lay->pp > 1 || lay->sp > 1 || e->opts.offload_chunks))
    return engine_fail(e, 1, STRATA_EUNSUPPORTED,
                       "layout: 2D, 2.5D and 3D tensor parallelism train with data parallelism and ZeRO, without "
                       "pipeline or sequence parallelism or the chunk policy (pp %d, sp %d) in this version",
                       lay->pp, lay->sp);
  if (lay->sp > 1 && (lay->seq_parallel || lay->pp > 1 || e->opts.offload_chunks))
    return engine_fail(e, 1, STRATA_EUNSUPPORTED,
                       "layout sp %d: ring self-attention trains with data and tensor parallelism and ZeRO, without "
                       "Megatron's sequence parallelism, pipeline parallelism or the chunk policy (pp %d) in this version",
                       lay->sp, lay->pp);
  e->sp = lay->sp;
  if (lay->offload_params != PAR_TIER_DEVICE || lay->offload_gradients != PAR_TIER_DEVICE)
    return engine_fail(e, 1, STRATA_EUNSUPPORTED,
                       "layout: this engine offloads the optimizer state (to the host or to NVMe); parameter and "
                       "gradient offload are not in it yet");
  if (e->opts.offload_chunks) {
    int accum = lay->global_batch / (lay->dp * lay->microbatch);
    const char *why2 = lay->zero_stage != 0 && lay->zero_stage != 3
                           ? "ZeRO stage 0 (every rank keeps every chunk) or 3 (each keeps its share)"
                       : lay->zero_stage == 3 && accum != 1 ? "one microbatch per step with ZeRO stage 3"
                       : lay->tp != 1 || lay->pp != 1 ? "tp = pp = 1"
                       : lay->offload_optimizer != PAR_TIER_DEVICE ? "no optimizer offload besides it"
                       : !(e->opts.device_bytes > 0) ? "a device budget (offload.device_mb)" : NULL;
    if (why2)
      return engine_fail(e, 1, STRATA_EINVAL, "offload policy \"chunks\" needs %s (layout: zero %d, tp %d, pp %d)",
                         why2, lay->zero_stage, lay->tp, lay->pp);
    e->chunks = 1;
  }
  if (lay->partition_activations && !mc->recompute)
    return engine_fail(e, 1, STRATA_EINVAL,
                       "layout: partitioned activation checkpoints need the model's recompute (they split the "
                       "block inputs it keeps)");
  if (mc->layers % lay->pp)
    return engine_fail(e, 1, STRATA_EINVAL,
                       "layout: this engine gives every pipeline stage the same number of blocks: layers %d are "
                       "not divisible by %d stages (the planner estimates uneven splits; the runtime does not run "
                       "them)", mc->layers, lay->pp);
  if (lay->pp == 1 && lay->schedule == PAR_SCHED_INTERLEAVED)
    return engine_fail(e, 1, STRATA_EINVAL, "layout: the interleaved schedule needs pipeline stages (pp %d)", lay->pp);
  /* The mesh (Megatron's order): tensor groups of consecutive ranks (one
   * node), data-parallel groups across them, pipeline stages outermost. */
  comm_config_t cc = COMM_CONFIG_DEFAULTS;
  cc.timeout_s = e->opts.collective_timeout_s;
  int tp = lay->tp, dp = lay->dp * lay->sp, crc = STRATA_OK; /* (a sequence group's ranks reduce as data parallel ones) */
  int tpr = e->wrank % tp, dpr = e->wrank / tp % dp, ppr = e->wrank / (tp * dp);
  e->pp = lay->pp, e->stage = ppr;
  e->interleave = lay->schedule == PAR_SCHED_INTERLEAVED ? lay->interleave : 1;
  MPI_Comm dpm = MPI_COMM_NULL, tpm = MPI_COMM_NULL, ppm = MPI_COMM_NULL, embm = MPI_COMM_NULL;
  int split = tp > 1 || e->pp > 1;
  if (split && (MPI_Comm_split(world, ppr * tp + tpr, dpr, &dpm) != MPI_SUCCESS ||
                MPI_Comm_split(world, e->wrank / tp, tpr, &tpm) != MPI_SUCCESS ||
                MPI_Comm_split(world, dpr * tp + tpr, ppr, &ppm) != MPI_SUCCESS ||
                MPI_Comm_split(world, ppr == 0 || ppr == e->pp - 1 ? dpr * tp + tpr : MPI_UNDEFINED, ppr, &embm) !=
                    MPI_SUCCESS))
    return engine_fail(e, 0, STRATA_EMPI, "cannot split the run's ranks into tensor, data and pipeline groups");
  crc = comm_from_mpi(&e->comm, split ? dpm : world, &cc);
  if (crc == STRATA_OK && tp > 1) crc = comm_from_mpi(&e->tpc, tpm, &cc);
  if (crc == STRATA_OK && e->pp > 1) crc = comm_from_mpi(&e->ppc, ppm, &cc);
  if (crc == STRATA_OK && e->pp > 1 && embm != MPI_COMM_NULL) crc = comm_from_mpi(&e->embc, embm, &cc);
  if (crc == STRATA_OK && split) crc = comm_from_mpi(&e->wc, world, &cc);
  if (crc == STRATA_OK && lay->sp > 1) { /* ring self-attention: the sp ranks of consecutive data-parallel
                                          * places (with this tensor rank) share the sequences */
    MPI_Comm ringm = MPI_COMM_NULL;
    if (MPI_Comm_split(world, e->wrank / (tp * lay->sp) * tp + tpr, dpr % lay->sp, &ringm) != MPI_SUCCESS)
      return engine_fail(e, 0, STRATA_EMPI, "cannot split the run's ranks into sequence groups");
    crc = comm_from_mpi(&e->ringc, ringm, &cc);
    MPI_Comm_free(&ringm);
  }
  MPI_Comm *ms[] = {&dpm, &tpm, &ppm, &embm};
  for (int i = 0; i < 4; i++)
    if (*ms[i] != MPI_COMM_NULL) MPI_Comm_free(ms[i]);
  if (crc != STRATA_OK)
    return engine_fail(e, 0, crc == STRATA_ENOMEM ? crc : STRATA_EMPI,
                       "cannot attach libcomm to the run's MPI communicator (%s)", strata_status_string(crc));
  comm_set_name(e->comm, "dp");
  if (e->tpc) comm_set_name(e->tpc, "tp");
  if (e->ppc) comm_set_name(e->ppc, "pp");
  if (e->embc) comm_set_name(e->embc, "embedding");
  if (e->wc) comm_set_name(e->wc, "run");
  e->rank = comm_rank(e->comm), e->size = comm_size(e->comm);
  e->tp_rank = e->tpc ? comm_rank(e->tpc) : 0, e->tp_size = e->tpc ? comm_size(e->tpc) : 1;
  e->mixed = lay->precision != PAR_PREC_FP32;
  e->wdt = lay->precision == PAR_PREC_BF16 ? TENSOR_BF16 : lay->precision == PAR_PREC_FP16 ? TENSOR_F16 : TENSOR_F32;
  e->cdt = lay->precision == PAR_PREC_BF16 ? COMM_BF16 : lay->precision == PAR_PREC_FP16 ? COMM_F16 : COMM_F32;
  if (lay->precision == PAR_PREC_FP16) { /* dynamic loss scaling */
    optim_scaler_config sc = OPTIM_SCALER_DEFAULTS;
    char serr[256];
    if (e->opts.loss_scale > 0) sc.init_scale = (float)e->opts.loss_scale;
    if (e->opts.loss_scale_window > 0) sc.window = e->opts.loss_scale_window;
    if (sc.init_scale > sc.max_scale) sc.max_scale = sc.init_scale;
    if (sc.init_scale < sc.min_scale) sc.min_scale = sc.init_scale;
    if (!(e->opts.loss_scale >= 0 && isfinite(e->opts.loss_scale)) || e->opts.loss_scale_window < 0)
      return engine_fail(e, 1, STRATA_EINVAL, "loss scale %g, window %d: need a finite scale > 0 and a window >= 1",
                         e->opts.loss_scale, e->opts.loss_scale_window);
    int src = optim_scaler_create(&e->scaler, &sc, serr, sizeof serr);
    if (src != STRATA_OK) return engine_fail(e, 1, src, "loss scaler: %s", serr);
    e->scaler_min = sc.min_scale;
  }
  if (e->opts.bucket_mb <= 0)
    return engine_fail(e, 1, STRATA_EINVAL, "bucket size %g MiB must be > 0", e->opts.bucket_mb);
  e->zero = lay->zero_stage;
  e->bucket_bytes = (size_t)(e->opts.bucket_mb * 1048576.0);
  e->accum = lay->global_batch / (lay->dp * lay->microbatch); /* >= 1: validated */
  snprintf(e->model_desc, sizeof e->model_desc, "layers=%d hidden=%d heads=%d seq=%d vocab=%d",
           mc->layers, mc->hidden, mc->heads, mc->seq, mc->vocab);
  static const char *const precs[] = {"fp32", "bf16", "fp16"}, *const scheds[] = {"gpipe", "1f1b", "interleaved"};
  char pipe[96] = "";
  if (e->pp > 1) {
    int k = snprintf(pipe, sizeof pipe, " schedule=%s microbatches=%d", scheds[lay->schedule], e->accum);
    if (e->interleave > 1) snprintf(pipe + k, sizeof pipe - (size_t)k, " interleave=%d", e->interleave);
  }
  char tpmode[32] = "";
  if (lay->tp_mode == PAR_TP_2P5D) snprintf(tpmode, sizeof tpmode, " tp_mode=2.5d tp_depth=%d", lay->tp_depth);
  else if (lay->tp_mode != PAR_TP_1D) snprintf(tpmode, sizeof tpmode, " tp_mode=%s", lay->tp_mode == PAR_TP_2D ? "2d" : "3d");
  snprintf(e->layout_desc, sizeof e->layout_desc,
           "dp=%d tp=%d%s%s%s pp=%d%s sp=%d zero=%d precision=%s%s ranks=%d threads=%d", lay->dp, e->tp_size,
           tpmode,
           lay->seq_parallel ? " seq_parallel" : "", lay->partition_activations ? " partition_activations" : "", e->pp,
           pipe, e->sp, e->zero, precs[lay->precision],
           lay->offload_optimizer == PAR_TIER_CPU    ? " offload=optimizer"
           : lay->offload_optimizer == PAR_TIER_NVME ? " offload=optimizer-nvme"
                                                     : "",
           e->wsize, e->opts.threads);
  if (e->device >= 0) { /* (the CPU's description stays as it was) */
    size_t k = strlen(e->layout_desc);
    static const char *const acts[] = {"", " activations=bf16", " activations=f16"};
    int a = e->opts.activations;
    snprintf(e->layout_desc + k, sizeof e->layout_desc - k, " device=cuda%s%s",
             e->opts.bf16_matmul ? " bf16_matmul" : "", a == 1 || a == 2 ? acts[a] : "");
  }
  e->loss_ranks = e->wsize / e->pp; /* the last stage's */
  if (e->opts.seq < 0 || e->opts.seq > mc->seq)
    return engine_fail(e, 1, STRATA_EINVAL, "sequence length %d outside [1, %d] (the model's positions)",
                       e->opts.seq, mc->seq);
  e->seq = e->opts.seq ? e->opts.seq : mc->seq;
  /* The optimizer first: its configuration decides the state's arrays. */
  char err[512];
  /* (ZeRO-Offload on a device: liboptim's CPU update of the host's arrays) */
  rc = engine_optim_create(&e->opt, oc, e->opts.steps, e->opts.threads, e->opt_host ? TENSOR_CPU : e->device,
                           e->groups, err, sizeof err);
  if (rc != STRATA_OK) return engine_fail(e, 1, rc, "%s", err);
  snprintf(e->optim_name, sizeof e->optim_name, "%s", oc->name);
  par_optim_describe(oc, e->optim_desc, sizeof e->optim_desc);
  e->clip = oc->clip;
  e->state_arrays = par_optim_state_arrays(oc);
  if ((rc = engine_check_fit(e, mc, lay))) return rc;
  par_gpt_options_t go = PAR_GPT_OPTIONS_DEFAULTS;
  go.threads = e->opts.threads;
  go.external = 1; /* the engine holds parameters and gradients, sharded */
  go.device = e->device, go.bf16_matmul = e->device >= 0 && e->opts.bf16_matmul;
  go.tp = e->tpc;   /* tensor parallelism inside the model: Megatron's, or 2D, 2.5D, 3D */
  go.tp_mode = (int)lay->tp_mode, go.tp_depth = lay->tp_depth;
  go.seq_parallel = lay->seq_parallel;
  go.stages = e->pp, go.stage = e->stage, go.interleave = e->interleave;
  go.partition_activations = lay->partition_activations;
  go.ring = e->ringc;
  go.act_dtype = e->opts.activations; /* (the model refuses 16 bits on the CPU, naming why) */
  if (par_gpt_create_ex(&e->model, mc, &go, e->opts.seed) != STRATA_OK)
    return engine_fail(e, 1, STRATA_EINVAL, "model: %s", par_gpt_create_error());
  e->tc = par_gpt_tensor_ctx(e->model);
  e->device = par_gpt_device(e->model);
  if (e->opts.device_bytes > 0) tensor_memory_set_limit(e->tc, e->device, (size_t)e->opts.device_bytes);
  int64_t rows = 0;
  for (int i = 0; i < par_gpt_num_views(e->model); i++)
    if (par_gpt_view(e->model, i)->shape[0] > rows) rows = par_gpt_view(e->model, i)->shape[0];
  if (!(e->ranges = malloc(2 * (size_t)(rows + 3) * sizeof *e->ranges)))
    return engine_fail(e, 0, STRATA_ENOMEM, "out of memory for checkpoint ranges");
  if ((rc = state_create(e)) || (rc = setup_optimizer(e, oc)) || (e->pp > 1 && (rc = pipe_create(e)))) return rc;
  size_t bt = (size_t)lay->microbatch * (size_t)e->seq;
  if (!(e->in = malloc(bt * sizeof *e->in)) || !(e->tg = malloc(bt * sizeof *e->tg)))
    return engine_fail(e, 0, STRATA_ENOMEM, "out of memory for a batch of %zu tokens", bt);
  return STRATA_OK;
}

int par_engine_create(par_engine_t **out, const par_gpt_config_t *mc, const par_layout_t *lay,
                      const par_optim_config_t *oc, const par_engine_options_t *opts, char *err,
                      size_t errlen) {
  if (err && errlen) err[0] = 0;
  if (!out || !mc || !lay || !oc) {
    if (err && errlen) snprintf(err, errlen, "par_engine_create: NULL argument");
    return STRATA_EINVAL;
  }
  *out = NULL;
  par_engine_t *e = calloc(1, sizeof *e);
  if (!e) {
    if (err && errlen) snprintf(err, errlen, "par_engine_create: out of memory");
    return STRATA_ENOMEM;
  }
  par_engine_options_t od = PAR_ENGINE_OPTIONS_DEFAULTS;
  e->opts = opts ? *opts : od;
  e->mc = *mc;
  e->layout = *lay;
  e->loss0 = NAN;
  int rc = create(e, mc, lay, oc);
  if (rc != STRATA_OK) {
    if (err && errlen) snprintf(err, errlen, "%s", e->err);
    par_engine_destroy(e);
    return rc;
  }
  *out = e;
  return STRATA_OK;
}

void par_engine_destroy(par_engine_t *e) {
  if (!e) return;
  pipe_destroy(e);
  state_destroy(e);
  par_gpt_destroy(e->model);
  optim_destroy(e->opt);
  optim_scaler_destroy(e->scaler);
  comm_destroy(e->comm);
  comm_destroy(e->tpc);
  comm_destroy(e->ppc);
  comm_destroy(e->embc);
  comm_destroy(e->wc);
  comm_destroy(e->ringc);
  free(e->tens), free(e->sq), free(e->vsq), free(e->trust), free(e->in), free(e->tg), free(e->ranges);
  free(e);
}

int par_engine_memory(const par_engine_t *e, size_t *current, size_t *peak) {
  if (!e) return STRATA_EINVAL;
  return par_gpt_memory(e->model, current, peak);
}

int par_engine_info(const par_engine_t *e, par_engine_info_t *out) {
  if (!e || !out) return STRATA_EINVAL;
  memset(out, 0, sizeof *out);
  out->zero = e->zero;
  out->ranks = e->size;
  out->tp = e->tp_size;
  out->pp = e->pp, out->stage = e->stage, out->slots = e->pp > 1 ? e->nslots : 1;
  if (e->off) {
    offload_stats_t os;
    offload_stats(e->off, &os);
    out->offload_host_bytes = os.held[OFFLOAD_HOST], out->offload_nvme_bytes = os.held[OFFLOAD_NVME];
    for (int a = 0; a < OFFLOAD_TIERS; a++)
      for (int b = 0; b < OFFLOAD_TIERS; b++)
        out->offload_moved += os.moved[a][b], out->offload_moved_tier[a][b] = os.moved[a][b];
    out->offload_device_bytes = os.held[OFFLOAD_DEVICE];
  }
  if (e->stage_off) { /* ZeRO-Offload on a device: the gradients' pinned staging is host memory too */
    offload_stats_t os;
    offload_stats(e->stage_off, &os);
    out->offload_host_bytes += os.held[OFFLOAD_HOST];
  }
  if (e->chunks) {
    offload_stats_t os;
    offload_stats(e->off, &os);
    out->chunks = (size_t)os.chunks;
    out->chunk_bytes = e->chunk_size, out->stalls = e->stalls, out->chunk_groups = e->ngroups;
    offload_last_iteration(e->off, &out->last_moved, &out->last_optimal);
  }
  size_t peak = 0;
  tensor_memory(e->tc, e->device, NULL, &peak);
  out->device_peak = e->dev_peak > peak ? e->dev_peak : peak;
  out->precision = e->layout.precision;
  out->loss_scale = e->scaler ? optim_scaler_scale(e->scaler) : 1.0;
  out->params_padded = e->nfull;
  out->shard_elems = e->nshard;
  out->buckets = e->nbuckets;
  for (int i = 0; i < 3; i++) out->state_bytes[i] = e->state_bytes[i];
  out->buffer_peak = e->buf_peak;
  out->device = e->device;
  return STRATA_OK;
}

/* The whole parameters in the model's flat layout, on every rank: stages
 * 0-2 hold them (padding left out), stage 3 gathers each region; under
 * mixed precision the fp32 masters (gathered from stage 1 on). */
int par_engine_get_params(par_engine_t *e, float *out) {
  int rc = STRATA_OK;
  if (!e || !out) return STRATA_EINVAL;
  if (e->chunks) return chunks_get_params(e, out);
  tensor_t buf = {0};
  const par_gpt_view_t *last = par_gpt_view(e->model, par_gpt_num_views(e->model) - 1);
  size_t total = last->offset + last->numel; /* this rank's tensor slice of every view */
  if (e->pp > 1) memset(out, 0, total * sizeof *out); /* each stage its own regions, summed over the pipeline */
  /* the fp32 values are the masters (mixed precision; ZeRO-Offload on a
   * device, fp32 too), on the host there */
  int ms = e->mixed || e->host_opt, sdev = e->host_opt ? TENSOR_CPU : e->device;
  for (int r = 0; r < e->nregions && !rc; r++) {
    region_t *g = &e->regions[r];
    if (!g->n || (r == 0 && e->pp > 1 && e->stage != 0)) continue; /* another stage's; the tied embedding's copy */
    if (ms && (rc = state_resident(e, r, 1))) break;
    float *res0 = e->nvme && ms ? e->res[OFF_ARRAYS * r] : NULL; /* ZeRO-Infinity: the region's masters */
    /* the fp32 values: the parameters, or under mixed precision the masters */
    const float *src = ms ? (e->zero == 0 ? (res0 ? res0 : (const float *)e->master.data + g->foff) : NULL)
                          : (e->zero <= 2 ? (const float *)e->full_p.data + g->foff : NULL);
    if (!src) { /* sharded: gathered */
      int64_t n = (int64_t)((size_t)e->size * g->shard);
      const float *part = res0 ? res0 : (const float *)(ms ? e->master.data : e->shard_p.data) + g->soff;
      if ((rc = tensor_alloc(e->tc, &buf, TENSOR_F32, sdev, 1, &n)))
        return engine_fail(e, 0, rc, "%s", tensor_last_error(e->tc));
      if ((rc = comm_allgather(e->comm, buf.data, part, g->shard, COMM_F32)))
        rc = comm_failed(e, rc);
      src = buf.data;
    }
    tensor_t d = tensor_view1(out + g->off, TENSOR_F32, TENSOR_CPU, (int64_t)g->n);
    tensor_t sv = tensor_view1((float *)src, TENSOR_F32, sdev, (int64_t)g->n);
    if (!rc && (rc = tensor_copy(e->tc, &d, &sv))) engine_fail(e, 0, rc, "%s", tensor_last_error(e->tc));
    if (buf.data) tensor_free(e->tc, &buf);
    if (ms && !rc) rc = state_resident(e, r, 0);
  }
  if (!rc && e->pp > 1 && (rc = comm_allreduce(e->ppc, out, out, total, COMM_F32, COMM_SUM)))
    engine_fail(e, 0, rc, "%s", comm_last_error(e->ppc));
  return rc;
}

/* ------------------------------------------------------------ steps */

static int model_fail(par_engine_t *e, int rc, const char *what) {
  return engine_fail(e, 0, rc, "%s: %s", what, par_gpt_last_error(e->model));
}

/* Makes this rank's status the run's: when any rank failed, every rank
 * returns the status and the message of the lowest failing rank (prefixed
 * with it), so all leave together instead of waiting for the failed one.
 * Collective; one small allreduce, plus a broadcast when something failed. */
int engine_agree(par_engine_t *e, int rc) {
  if (e->wsize == 1) {
    if (rc != STRATA_OK) e->err_all = 1;
    return rc;
  }
  comm_t *c = ctl_comm(e);
  int32_t in[2] = {rc != STRATA_OK ? e->wrank : e->wsize, rc}, who[2];
  int crc = comm_allreduce(c, who, in, 1, COMM_I32, COMM_MIN);
  if (crc != STRATA_OK) return engine_fail(e, 0, crc, "%s", comm_last_error(c));
  if (who[0] == e->wsize) return STRATA_OK;
  int32_t code = rc;
  char msg[sizeof e->err];
  snprintf(msg, sizeof msg, "%s", e->err);
  if ((crc = comm_broadcast(c, &code, 1, COMM_I32, who[0])) != STRATA_OK ||
      (crc = comm_broadcast(c, msg, sizeof msg, COMM_U8, who[0])) != STRATA_OK)
    return engine_fail(e, 0, crc, "%s", comm_last_error(c));
  msg[sizeof msg - 1] = 0;
  return engine_fail(e, 1, code, "[rank %d] %s", who[0], msg);
}

/* Ring self-attention: this rank's tokens [r Tl, (r + 1) Tl) of each of
 * the B sequences of its group, moved to the front of e->in and e->tg. */
static void slice_tokens(par_engine_t *e, int B) {
  if (e->sp < 2) return;
  size_t T = (size_t)e->seq, Tl = T / (size_t)e->sp, r = (size_t)(e->rank % e->sp);
  for (size_t b = 0; b < (size_t)B; b++) {
    memmove(e->in + b * Tl, e->in + b * T + r * Tl, Tl * sizeof *e->in);
    memmove(e->tg + b * Tl, e->tg + b * T + r * Tl, Tl * sizeof *e->tg);
  }
}

/* The step's local part: the sum over this rank's microbatches of the
 * gradient of each one's mean loss (all hold the same number of targets),
 * reduced over the ranks from the model's hooks. A local failure keeps
 * this rank in step with the others (state_replay plays the collectives of
 * the rest of the pass) and is returned once the microbatches are through. */
static int local_step(par_engine_t *e, par_data_t *data, double *loss_out) {
  int rc, failed = STRATA_OK, B = e->layout.microbatch;
  float loss;
  double l = 0;
  char msg[sizeof e->err] = "";
  if ((rc = state_zero_grads(e))) return rc;
  for (int k = 0; k < e->accum; k++) {
    e->microbatch = k;
    e->reducing = k == e->accum - 1;
    e->events = 0;
    if (!failed && (rc = par_data_next(data, e->rank / e->sp, e->size / e->sp, B, e->in, e->tg)) != STRATA_OK)
      failed = engine_fail(e, 0, rc, "data: %s", par_data_error(data));
    slice_tokens(e, B);
    if (!failed && (rc = par_gpt_forward(e->model, e->in, e->tg, B, e->seq / e->sp, &loss)) != STRATA_OK)
      failed = e->hook_rc ? rc : model_fail(e, rc, "forward");
    if (!failed && (rc = par_gpt_backward(e->model)) != STRATA_OK)
      failed = e->hook_rc ? rc : model_fail(e, rc, "backward");
    if (e->hook_rc) return e->hook_rc; /* the collectives themselves failed: no way to keep in step */
    if (failed) {
      if (!msg[0]) snprintf(msg, sizeof msg, "%s", e->err);
      if ((rc = state_replay(e, e->events, 1))) return rc;
      continue;
    }
    l += loss;
  }
  if ((rc = state_finish_reductions(e))) return rc;
  if (failed) {
    snprintf(e->err, sizeof e->err, "%s", msg);
    return failed;
  }
  *loss_out = l / e->accum;
  return STRATA_OK;
}

/* Over the tensor group, the per-view sums (w per view) of the views it
 * splits; a replicated view's (every tensor rank holds the same values)
 * counts once. */
static int sum_split_views(par_engine_t *e, double *vsq, int w) {
  int nv = par_gpt_num_views(e->model), rc;
  if (e->tp_size < 2) return STRATA_OK;
  double *keep = e->vsq + (size_t)nv * (size_t)w; /* the replicated views' own sums */
  for (int i = 0; i < nv; i++)
    for (int k = 0; k < w; k++) {
      const par_gpt_view_t *v = par_gpt_view(e->model, i);
      int split = v->split != PAR_GPT_SPLIT_NONE;
      keep[(size_t)i * w + k] = split ? 0 : vsq[(size_t)i * w + k];
      if (!split || (v->split == PAR_GPT_SPLIT_BLOCK && v->block.replica)) vsq[(size_t)i * w + k] = 0; /* (a
        block that several ranks hold alike counts on its one replica 0) */
    }
  if ((rc = comm_allreduce(e->tpc, vsq, vsq, (size_t)nv * w, COMM_F64, COMM_SUM)))
    return engine_fail(e, 0, rc, "%s", comm_last_error(e->tpc));
  for (size_t j = 0; j < (size_t)nv * w; j++) vsq[j] += keep[j];
  return STRATA_OK;
}

/* Sums per view over the ranks: vsq[nv * w] from per-piece sums sq[npieces * w]
 * (w values per piece), back into sq: over the data-parallel shards (stage
 * 0 holds whole views: none) and over the tensor group for split views. */
static int sum_views(par_engine_t *e, double *sq, int w) {
  int nv = par_gpt_num_views(e->model), rc;
  int dp = e->zero > 0 && e->size > 1;
  if (!dp && e->tp_size < 2 && e->pp < 2) return STRATA_OK;
  memset(e->vsq, 0, sizeof(double) * (size_t)nv * (size_t)w);
  for (int i = 0; i < e->npieces; i++)
    for (int k = 0; k < w; k++) e->vsq[(size_t)e->pieces[i].view * w + k] += sq[(size_t)i * w + k];
  if (dp && (rc = comm_allreduce(e->comm, e->vsq, e->vsq, (size_t)nv * w, COMM_F64, COMM_SUM)))
    return comm_failed(e, rc);
  if ((rc = sum_split_views(e, e->vsq, w)) || (rc = pipe_sum_views(e, e->vsq, w))) return rc;
  for (int i = 0; i < e->npieces; i++)
    for (int k = 0; k < w; k++) sq[(size_t)i * w + k] = e->vsq[(size_t)e->pieces[i].view * w + k];
  return STRATA_OK;
}

/* Per-piece sums of squares of the gradients into e->sq; the chunk policy's
 * region by region, each on the host for it. */
static int grad_sumsq(par_engine_t *e) {
  int rc = STRATA_OK;
  for (int i0 = 0, i1 = e->npieces; i0 < e->npieces && !rc; i0 = i1) {
    int r = e->chunks || e->host_opt ? state_region_pieces(e, i0, &i1) : -1;
    if (r >= 0 && (rc = state_resident(e, r, 1))) break;
    for (int i = i0; i < i1 && r >= 0; i++) {
      float *p, *g, *m, *v;
      state_piece_ptrs(e, i, &p, &g, &m, &v, NULL);
      e->tens[i].grad = g;
    }
    if ((rc = optim_grad_sumsq(e->opt, e->sq + i0, e->tens + i0, i1 - i0)) != STRATA_OK)
      engine_fail(e, 0, rc, "gradient norm: %s", optim_last_error(e->opt));
    for (int i = i0; i < i1 && r >= 0; i++) e->tens[i].grad = NULL;
    int rr = r >= 0 ? state_resident(e, r, 0) : STRATA_OK;
    if (!rc) rc = rr;
  }
  return rc;
}

/* The global gradient norm: per-piece sums of squares, summed per view over
 * the ranks (each view counted once: data-parallel shards summed, tensor
 * slices summed, replicated views once). */
static int grad_norm2(par_engine_t *e, double *total, int *nonfinite_here) {
  int rc;
  double here = 0;
  *total = 0;
  if ((rc = grad_sumsq(e))) return rc;
  for (int i = 0; i < e->npieces; i++) here += e->sq[i];
  *nonfinite_here = !isfinite(here);
  if ((e->zero == 0 || e->size == 1) && e->tp_size < 2 && e->pp < 2) {
    for (int i = 0; i < e->npieces; i++) *total += e->sq[i];
    return STRATA_OK;
  }
  int nv = par_gpt_num_views(e->model);
  memset(e->vsq, 0, sizeof(double) * (size_t)nv);
  for (int i = 0; i < e->npieces; i++) e->vsq[e->pieces[i].view] += e->sq[i];
  if (e->zero > 0 && e->size > 1 &&
      (rc = comm_allreduce(e->comm, e->vsq, e->vsq, (size_t)nv, COMM_F64, COMM_SUM)))
    return comm_failed(e, rc);
  if ((rc = sum_split_views(e, e->vsq, 1)) || (rc = pipe_sum_views(e, e->vsq, 1))) return rc;
  for (int i = 0; i < nv; i++) *total += e->vsq[i];
  return STRATA_OK;
}

/* The update of this rank's pieces; LAMB and LARS need norms of whole
 * tensors: partial sums per piece, summed per view over the ranks, then
 * applied (liboptim's two phases). */
/* ZeRO-Infinity: the update region by region, each region's optimizer
 * arrays brought to the host for it (and written back to NVMe as others
 * come), in one liboptim step over the parts (optim_step_begin/_end);
 * LAMB's and LARS's phase one over all regions first, their sums reduced,
 * then phase two. */
static int update_streamed(par_engine_t *e, float scale) {
  int rc, kind = par_optim_kind(e->optim_name), two = kind == OPTIM_LARS || kind == OPTIM_LAMB;
  long s0 = optim_get_step(e->opt);
  if ((rc = optim_step_begin(e->opt))) return engine_fail(e, 0, rc, "optimizer: %s", optim_last_error(e->opt));
  for (int phase = two ? 0 : 1; phase < 2 && !rc; phase++) {
    for (int i0 = 0, i1; i0 < e->npieces && !rc; i0 = i1) {
      int r = state_region_pieces(e, i0, &i1);
      if ((rc = state_resident(e, r, 1))) break;
      for (int i = i0; i < i1; i++) {
        float *p, *g, *m, *v;
        void *lowp;
        state_piece_ptrs(e, i, &p, &g, &m, &v, &lowp);
        e->tens[i].param = p, e->tens[i].m = m, e->tens[i].v = v;
        if (e->chunks || e->host_opt) e->tens[i].grad = g, e->tens[i].lowp = lowp;
      }
      e->pushing = e->host_opt && phase == 1; /* (the region's release sends its parameters to the device) */
      double *sq = e->sq + 2 * (size_t)i0;
      size_t nsq = 2 * (size_t)(i1 - i0);
      if (phase == 0) rc = optim_partials(e->opt, sq, nsq, e->tens + i0, i1 - i0, scale);
      else rc = optim_apply(e->opt, e->tens + i0, i1 - i0, two ? sq : NULL, two ? nsq : 0, scale);
      if (rc) engine_fail(e, 0, rc, "optimizer: %s", optim_last_error(e->opt));
      for (int i = i0; i < i1; i++) {
        e->tens[i].param = NULL, e->tens[i].m = e->tens[i].v = NULL;
        if (e->chunks || e->host_opt) e->tens[i].grad = NULL, e->tens[i].lowp = NULL;
      }
      if (rc) e->pushing = 0; /* (a failed update sends nothing) */
      int rr = state_resident(e, r, 0);
      e->pushing = 0;
      if (!rc) rc = rr;
    }
    if (!rc && phase == 0) rc = sum_views(e, e->sq, 2);
  }
  int w = state_copies_wait(e); /* (the parameters on the device before the next pass) */
  if (!rc) rc = w;
  if (rc) {
    optim_set_step(e->opt, s0); /* (the step is not counted) */
    return rc;
  }
  if ((rc = optim_step_end(e->opt))) return engine_fail(e, 0, rc, "optimizer: %s", optim_last_error(e->opt));
  return STRATA_OK;
}

/* LAMB's and LARS' trust ratio per view, from the sums the update uses:
 * per piece where every rank holds whole views (`whole`), else the views'
 * totals summed over the ranks (e->vsq, sum_views); unknown (NaN) across
 * pipeline stages. Costs one division per view. */
static void record_trust(par_engine_t *e, int whole) {
  int nv = par_gpt_num_views(e->model);
  for (int v = 0; v < nv; v++) e->trust[v] = NAN;
  if (e->pp > 1) return;
  if (whole)
    for (int i = 0; i < e->npieces; i++)
      optim_trust_ratio(e->opt, e->tens[i].group, e->sq[2 * i], e->sq[2 * i + 1], &e->trust[e->pieces[i].view]);
  else
    for (int v = 0; v < nv; v++)
      optim_trust_ratio(e->opt, e->groups[par_gpt_view(e->model, v)->decay ? 0 : 1], e->vsq[2 * v],
                        e->vsq[2 * v + 1], &e->trust[v]);
}

static int update(par_engine_t *e, float scale) {
  int rc, kind = par_optim_kind(e->optim_name);
  if (e->nvme || e->chunks || e->host_opt) return update_streamed(e, scale);
  if (kind != OPTIM_LAMB && kind != OPTIM_LARS) {
    if ((rc = optim_step(e->opt, e->tens, e->npieces, scale)) != STRATA_OK)
      return engine_fail(e, 0, rc, "optimizer: %s", optim_last_error(e->opt));
    return STRATA_OK;
  }
  /* Both phases here also where views are whole (what optim_step would do),
   * so that the trust ratios are kept. */
  int whole = (e->zero == 0 || e->size == 1) && e->tp_size < 2 && e->pp < 2;
  size_t ns = 2 * (size_t)e->npieces;
  if ((rc = optim_partials(e->opt, e->sq, ns, e->tens, e->npieces, scale)) != STRATA_OK)
    return engine_fail(e, 0, rc, "optimizer: %s", optim_last_error(e->opt));
  if (!whole && (rc = sum_views(e, e->sq, 2))) return rc;
  record_trust(e, whole);
  if ((rc = optim_apply(e->opt, e->tens, e->npieces, e->sq, ns, scale)) != STRATA_OK)
    return engine_fail(e, 0, rc, "optimizer: %s", optim_last_error(e->opt));
  return STRATA_OK;
}

int par_engine_trust_ratios(const par_engine_t *e, double *out, int n) {
  if (!e || !out || n != par_gpt_num_views(e->model)) return STRATA_EINVAL;
  memcpy(out, e->trust, (size_t)n * sizeof *out);
  return STRATA_OK;
}

int par_engine_set_batch(par_engine_t *e, int global_batch, double lr_scale) {
  if (!e) return STRATA_EINVAL;
  int q = e->layout.dp * e->layout.microbatch, accum = global_batch / q;
  if (global_batch < q || global_batch % q)
    return engine_fail(e, 1, STRATA_EINVAL, "global batch %d is not a multiple of dp x microbatch = %d x %d",
                       global_batch, e->layout.dp, e->layout.microbatch);
  if (!(lr_scale > 0) || isinf(lr_scale) || !(e->base_lr * lr_scale <= 3.0e38))
    return engine_fail(e, 1, STRATA_EINVAL, "learning-rate scale %g must be finite and > 0", lr_scale);
  if (accum != e->accum && (e->pp > 1 || e->chunks))
    return engine_fail(e, 1, STRATA_EUNSUPPORTED,
                       "the microbatches per step cannot change (%d to %d) with pipeline stages or the chunk "
                       "policy: their schedules are fixed when the engine is created",
                       e->accum, accum);
  e->accum = accum;
  e->layout.global_batch = global_batch;
  for (int k = 0; k < 2; k++) {
    optim_group g;
    int rc = optim_get_group(e->opt, e->groups[k], &g);
    g.lr = (float)(e->base_lr * lr_scale);
    if (rc == STRATA_OK) rc = optim_set_group(e->opt, e->groups[k], &g);
    if (rc != STRATA_OK) return engine_fail(e, 1, rc, "optimizer: %s", optim_last_error(e->opt));
  }
  return STRATA_OK;
}

/* One step: the local part (reductions posted during backward); one small
 * allreduce that carries the loss, the stop flags and the local failures
 * together (a rank whose data or forward failed still takes part, so that
 * every rank leaves the step with the same status); clipping and the
 * update; ZeRO 1-2 then gather the updated shards. A loss or gradient that
 * is not finite skips the update. */
static int step(par_engine_t *e, par_data_t *data, par_step_t *out) {
  int rc;
  float lr = 0;
  memset(out, 0, sizeof *out);
  double t0 = engine_now(), l = NAN;
  optim_current_lr(e->opt, 0, &lr);
  e->hook_rc = STRATA_OK;
  e->t_first_post = e->t_first_done = e->t_backward_end = e->t_inflight = 0;
  float lscale = e->scaler ? optim_scaler_scale(e->scaler) : 1.0f;
  par_gpt_set_loss_scale(e->model, lscale);
  int local = e->pp > 1 ? pipe_local_step(e, data, &l) : local_step(e, data, &l);
  if (e->hook_rc || (local != STRATA_OK && !e->err_all && local == STRATA_ETIMEOUT)) {
    state_release_all(e);
    return local; /* a collective failed: this rank alone knows (the watchdog's report) */
  }
  out->backward_end_s = e->t_backward_end > 0 ? e->t_backward_end - t0 : 0;
  out->first_post_s = e->t_first_post > 0 ? e->t_first_post - t0 : 0;
  out->inflight_s = e->t_inflight > 0 ? e->t_inflight - t0 : 0;
  out->first_done_s = e->t_first_done > 0 ? e->t_first_done - t0 : 0;
  if (e->pending_rc != STRATA_OK && local == STRATA_OK) { /* from the loop: metrics, ... */
    local = e->pending_rc;
    snprintf(e->err, sizeof e->err, "%s", e->pending_msg);
  }
  e->pending_rc = STRATA_OK;
  double ctl[3] = {l, e->stop_flag && *e->stop_flag ? 1 : 0, local != STRATA_OK ? 1 : 0};
  out->loss_scale = lscale;
  out->pipe_busy_s = e->t_busy;
  if (e->wsize > 1) { /* every rank: the tensor ranks of a group hold the same loss */
    comm_t *c = ctl_comm(e);
    if ((rc = comm_allreduce(c, ctl, ctl, 3, COMM_F64, COMM_SUM)) != STRATA_OK)
      return engine_fail(e, 0, rc, "%s", comm_last_error(c));
    ctl[0] /= e->loss_ranks;
  }
  if (ctl[2] > 0 && (rc = engine_agree(e, local)) != STRATA_OK) return rc;
  out->loss = ctl[0];
  out->stop = ctl[1] > 0;
  out->lr = lr;
  if (isnan(e->loss0)) e->loss0 = out->loss;
  double total = 0, gnorm = 0;
  e->grads_live = 1;
  if ((rc = state_take_g32(e)) || (rc = grad_norm2(e, &total, &out->overflow_here))) goto done;
  /* The gradients hold the loss scale times the sum over the microbatches:
   * dividing by both gives the mean's norm and update. */
  float scale;
  optim_grad_scale(total, (float)e->accum * lscale, (float)e->clip, &scale, &gnorm);
  out->grad_norm = gnorm;
  /* The loss and the norm are every rank's: every rank decides alike, the
   * loss scaler's overflow too (a rank whose shard holds no inf skips with
   * the others). */
  if (e->scaler && isfinite(out->loss)) {
    int skip = 0;
    optim_scaler_update(e->scaler, !isfinite(gnorm), &skip);
    out->overflow = skip && lscale > e->scaler_min; /* at the floor it is divergence */
  }
  if (!isfinite(gnorm) || !isfinite(out->loss)) {
    out->skipped = 1;
  } else if ((rc = update(e, scale)) || (rc = state_gather_updates(e))) {
    goto done;
  } else {
    e->updated = 1;
  }
  out->seconds = engine_now() - t0;
done:
  state_drop_g32(e);
  return rc;
}

/* The chunk policy closes each step (chunks.c), whatever its outcome. */
int par_engine_step(par_engine_t *e, par_data_t *data, par_step_t *out) {
  if (!e || !data || !out) return STRATA_EINVAL;
  int rc = step(e, data, out);
  if (e->chunks) {
    int end = chunks_end_step(e);
    if (!rc) rc = end;
  }
  return rc;
}

void par_engine_watch_stop(par_engine_t *e, const volatile sig_atomic_t *flag) {
  if (e) e->stop_flag = flag;
}

void engine_defer_error(par_engine_t *e, int rc, const char *msg) {
  if (e->pending_rc != STRATA_OK) return; /* the first one counts */
  e->pending_rc = rc;
  snprintf(e->pending_msg, sizeof e->pending_msg, "%s", msg);
}

double par_engine_initial_loss(const par_engine_t *e) { return e ? e->loss0 : NAN; }

/* Mean validation loss over `batches` batches shared among the ranks. Under
 * ZeRO-3 every forward gathers parameters collectively, so every rank runs
 * the same number of forwards (a rank past the last batch repeats one and
 * does not count it). */
int par_engine_evaluate(par_engine_t *e, par_data_t *data, int batches, double *out) {
  int rc = STRATA_OK, B;
  if (!e || !data || !out || batches < 1) return STRATA_EINVAL;
  *out = NAN;
  if (par_data_samples(data, PAR_SPLIT_VAL) == 0) return STRATA_OK;
  B = e->layout.microbatch;
  double sum = 0;
  /* (a sequence group shares its batches: ring self-attention splits their tokens) */
  int dranks = e->size / e->sp, rounds = (batches + dranks - 1) / dranks, failed = STRATA_OK;
  e->hook_rc = STRATA_OK;
  for (int i = 0; i < rounds; i++) {
    int k = i * dranks + e->rank / e->sp, counted = k < batches;
    float loss;
    if (!counted && e->zero < 3) break;
    if (!failed && (rc = par_data_fill(data, PAR_SPLIT_VAL, (uint64_t)(k % batches) * (uint64_t)B, B, e->in,
                                       e->tg)) != STRATA_OK)
      failed = engine_fail(e, 0, rc, "validation data: %s", par_data_error(data));
    slice_tokens(e, B);
    if (e->pp > 1) { /* a failed rank passes the messages on without computing */
      if ((rc = pipe_forward_only(e, failed ? NULL : e->in, e->tg, &loss, &failed)) != STRATA_OK) return rc;
    } else if (!failed && (rc = par_gpt_forward(e->model, e->in, e->tg, B, e->seq / e->sp, &loss)) != STRATA_OK)
      failed = e->hook_rc ? rc : model_fail(e, rc, "validation");
    if (e->hook_rc) return e->hook_rc;
    if (failed) { /* keep in step: the forward's gathers */
      if (e->pp < 2 && (rc = state_replay(e, e->events, 0))) return rc;
      continue;
    }
    if (counted) sum += loss;
  }
  if ((rc = engine_agree(e, failed))) return rc;
  if (e->size > 1 && (rc = comm_allreduce(e->comm, &sum, &sum, 1, COMM_F64, COMM_SUM)) != STRATA_OK)
    return comm_failed(e, rc);
  if (e->pp > 1) { /* the last stage's, to every stage */
    if (e->stage != e->pp - 1) sum = 0;
    if ((rc = comm_allreduce(e->ppc, &sum, &sum, 1, COMM_F64, COMM_SUM)) != STRATA_OK)
      return engine_fail(e, 0, rc, "%s", comm_last_error(e->ppc));
  }
  *out = sum / batches / e->sp; /* (each of a group's ranks the mean over its tokens) */
  return STRATA_OK;
}
