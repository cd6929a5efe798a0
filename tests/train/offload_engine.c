/* Optimizer offload in the engine (mpirun -np 1 and 2).
 *  - ZeRO-Offload's static policy: the fp32 masters and the optimizer's
 *    moments live in liboffload's host tier and the optimizer updates them
 *    there. Only the placement differs from a run without offload, never
 *    the arithmetic: over ZeRO 0, 1 and 3, fp32 and bf16, AdamW and LAMB,
 *    6 steps give bit-identical losses, gradient norms and parameters. The
 *    optimizer state leaves the device's accountant exactly (its bytes
 *    between steps fall by the state's) and the host tier holds it (one
 *    chunk per array, rounded up to 4 KiB; under mixed precision the
 *    update's fp32 gradients are on the host too, for each step only).
 *  - ZeRO-Infinity's: the same arrays per region on the NVMe tier, brought
 *    to a host tier of one chunk per array and one more, region by region
 *    for the update: again
 *    bit-identical (AdamW, LAMB, LARS, SGD with momentum: one liboptim step
 *    over the regions, optim_step_begin/_end), the NVMe tier holding
 *    them and bytes moved both ways every step; a checkpoint saved from it
 *    loads into a run without offload and continues bit-identically. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <strata/parallel.h>

#include "harness.h"

static par_gpt_config_t mc = {.layers = 2, .hidden = 32, .heads = 4, .seq = 16, .vocab = 256};

static const char *dir;

/* offload: 0 none, 1 the host (static), 2 NVMe, 3 chunks (device_bytes, chunk_bytes; accum microbatches) */
static double device_bytes, chunk_bytes;
static int accum = 1;

static par_engine_t *engine(int zero, par_precision_t prec, const char *opt, int offload) {
  par_layout_t lay = PAR_LAYOUT_DEFAULTS;
  lay.dp = ranks, lay.zero_stage = zero, lay.microbatch = 2, lay.global_batch = 2 * ranks * accum, lay.precision = prec;
  lay.offload_optimizer = offload == 2 ? PAR_TIER_NVME : offload == 1 ? PAR_TIER_CPU : PAR_TIER_DEVICE;
  par_optim_config_t oc = PAR_OPTIM_CONFIG_DEFAULTS;
  oc.name = opt, oc.lr = 1e-2, oc.clip = 0.5, oc.weight_decay = 0.01;
  par_engine_options_t eo = PAR_ENGINE_OPTIONS_DEFAULTS;
  eo.steps = 6, eo.threads = 1, eo.seed = 3, eo.bucket_mb = 0.004, eo.offload_dir = dir;
  if (offload == 3) eo.offload_chunks = 1, eo.device_bytes = device_bytes, eo.chunk_bytes = chunk_bytes;
  return make_engine(&mc, &lay, &oc, &eo);
}

/* PatrickStar's chunk policy: bit-identical to no offload at ZeRO stage 0
 * (losses, norms, parameters over 6 steps, and a checkpoint that resumes
 * without the policy); the device never holds more than its budget (the
 * accountant's bytes and the chunks there at each moment); the chunks move
 * every step; with dp = 2 libcomm's bytes are, at ZeRO stage 0, one ring
 * allreduce of every gradient chunk's bytes, 2 (p - 1) / p of them sent per
 * rank, and at ZeRO stage 3 (the chunks sharded) PatrickStar's 3 (p - 1) / p
 * of the chunks a step: every group of p parameter chunks all-gathered for
 * the forward and for the backward, and its gradient chunks reduce-scattered
 * (the same elementwise means as the allreduce: still bit-identical). */
static void chunked(par_precision_t prec, const char *opt, int mb, double budget, int zero) {
  static const char *const pn[] = {"fp32", "bf16", "fp16"};
  accum = mb, device_bytes = budget;
  par_engine_t *a = engine(0, prec, opt, 0), *b = engine(zero, prec, opt, 3);
  par_data_t *da = markov_data(mc.seq), *db = markov_data(mc.seq);
  int same_steps = 1;
  par_engine_info_t ib;
  comm_counter_t c0, c1, g0, g1, r0, r1;
  for (int s = 1; s <= 6; s++) {
    par_step_t x, y;
    if (s == 6) {
      comm_counters(par_engine_comm(b), COMM_K_ALLREDUCE, &c0);
      comm_counters(par_engine_comm(b), COMM_K_ALLGATHER, &g0);
      comm_counters(par_engine_comm(b), COMM_K_REDUCE_SCATTER, &r0);
    }
    CHECK(par_engine_step(a, da, &x) == 0 && par_engine_step(b, db, &y) == 0, "step %d: %s / %s", s,
          par_engine_error(a), par_engine_error(b));
    if (s == 6) {
      comm_counters(par_engine_comm(b), COMM_K_ALLREDUCE, &c1);
      comm_counters(par_engine_comm(b), COMM_K_ALLGATHER, &g1);
      comm_counters(par_engine_comm(b), COMM_K_REDUCE_SCATTER, &r1);
    }
    same_steps &= x.loss == y.loss && x.grad_norm == y.grad_norm;
  }
  size_t n = par_gpt_param_count(&mc);
  float *pa = malloc(n * 4), *pb = malloc(n * 4);
  CHECK(par_engine_get_params(a, pa) == 0 && par_engine_get_params(b, pb) == 0, "get_params");
  CHECK(same_steps && !memcmp(pa, pb, n * 4),
        "chunks ZeRO-%d %s %s accum %d: the policy changed the losses, norms or parameters", zero, pn[prec], opt, mb);
  par_engine_info(b, &ib);
  CHECK(ib.device_peak <= (size_t)device_bytes, "chunks: the device held %zu bytes, its budget %.0f", ib.device_peak,
        device_bytes);
  CHECK(ib.last_moved > 0 && ib.last_optimal <= ib.last_moved, "chunks: moved %llu, an optimal schedule %llu",
        (unsigned long long)ib.last_moved, (unsigned long long)ib.last_optimal);
  if (ranks > 1 && zero == 3) { /* whole chunks: the groups of ranks chunks, gathered twice, reduced once */
    double cb = (double)ib.chunk_bytes, groups = ib.chunk_groups;
    double ag = (double)(g1.bytes_sent - g0.bytes_sent), rs = (double)(r1.bytes_sent - r0.bytes_sent);
    CHECK(ag == 2 * (ranks - 1) * groups * cb && rs == (ranks - 1) * groups * cb,
          "sharded chunks: a step sent %.0f bytes by all-gather and %.0f by reduce-scatter; %.0f groups of %d chunks "
          "of %.0f bytes make %.0f and %.0f",
          ag, rs, groups, ranks, cb, 2 * (ranks - 1) * groups * cb, (ranks - 1) * groups * cb);
  } else if (ranks > 1) { /* the gradient chunks' bytes: every region's gradients, packed and 64-byte aligned */
    size_t wsz = prec == PAR_PREC_FP32 ? 4 : 2, elems = 0;
    for (int r = 0; r < par_gpt_num_regions(par_engine_model(b)); r++) {
      size_t off, cnt;
      int fv, nv;
      par_gpt_region(par_engine_model(b), r, &off, &cnt, &fv, &nv);
      elems += cnt;
    }
    double sent = (double)(c1.bytes_sent - c0.bytes_sent);
    double lo = 2.0 * (ranks - 1) / ranks * (double)(elems * wsz), hi = lo + 2.0 * ib.chunks * 64 + 64; /* + alignment, the step's 24-byte control word */
    CHECK(sent >= lo && sent <= hi, "chunks dp=%d: %.0f bytes sent by allreduce in a step, the ring's %.0f to %.0f",
          ranks, sent, lo, hi);
  }
  char path[600];
  snprintf(path, sizeof path, "%s/chunks.h5", dir);
  CHECK(par_engine_save(b, path, db, 6, NULL, 0) == 0, "save: %s", par_engine_error(b));
  par_engine_t *c = engine(0, prec, opt, 0);
  par_data_t *dc = markov_data(mc.seq);
  long step;
  CHECK(par_engine_load(c, path, dc, &step) == 0 && step == 6, "load: %s", par_engine_error(c));
  par_step_t x, z;
  CHECK(par_engine_step(a, da, &x) == 0 && par_engine_step(c, dc, &z) == 0, "step 7: %s", par_engine_error(c));
  CHECK(x.loss == z.loss && x.grad_norm == z.grad_norm, "chunks: resumed without offload, step 7 differs");
  if (rank == 0) {
    printf("chunks ZeRO-%d %s %-5s accum %d: bit-identical; %zu chunks of %zu bytes, device peak %zu of %.0f, a step "
           "moved %llu bytes (an optimal schedule %llu), %ld stalls; its checkpoint resumes without offload\n",
           zero, pn[prec], opt, mb, ib.chunks, ib.chunk_bytes, ib.device_peak, device_bytes,
           (unsigned long long)ib.last_moved, (unsigned long long)ib.last_optimal, ib.stalls);
    unlink(path);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  free(pa), free(pb);
  par_data_destroy(da), par_data_destroy(db), par_data_destroy(dc);
  par_engine_destroy(a), par_engine_destroy(b), par_engine_destroy(c);
  accum = 1;
}

static void same(int zero, par_precision_t prec, const char *opt) {
  static const char *const pn[] = {"fp32", "bf16", "fp16"};
  par_engine_t *a = engine(zero, prec, opt, 0), *b = engine(zero, prec, opt, 1);
  par_data_t *da = markov_data(mc.seq), *db = markov_data(mc.seq);
  int steps_same = 1;
  for (int s = 1; s <= 6; s++) {
    par_step_t x, y;
    CHECK(par_engine_step(a, da, &x) == 0 && par_engine_step(b, db, &y) == 0, "step %d: %s / %s", s,
          par_engine_error(a), par_engine_error(b));
    steps_same &= x.loss == y.loss && x.grad_norm == y.grad_norm;
  }
  size_t n = par_gpt_param_count(&mc);
  float *pa = malloc(n * 4), *pb = malloc(n * 4);
  par_engine_get_params(a, pa), par_engine_get_params(b, pb);
  CHECK(steps_same && !memcmp(pa, pb, n * 4), "ZeRO-%d %s %s: offload changed the losses, norms or parameters", zero,
        pn[prec], opt);
  par_engine_info_t ia, ib;
  par_engine_info(a, &ia), par_engine_info(b, &ib);
  /* the accountant's bytes between steps (the pass's transient buffers, whose lifetimes follow the
   * collectives' completion and so move the peak by a few bytes, all given back) */
  size_t peak_a = 0, peak_b = 0;
  par_engine_memory(a, &peak_a, NULL), par_engine_memory(b, &peak_b, NULL);
  size_t opt_bytes = ia.state_bytes[2], arrays = opt_bytes / (ia.zero == 0 ? ia.params_padded : ia.shard_elems) / 4;
  size_t chunk = (opt_bytes / arrays + 4095) / 4096 * 4096;
  CHECK(peak_a - peak_b == opt_bytes, "ZeRO-%d %s %s: the device's bytes fell by %zu, the optimizer state is %zu",
        zero, pn[prec], opt, peak_a - peak_b, opt_bytes);
  CHECK(ib.offload_host_bytes == arrays * chunk && ia.offload_host_bytes == 0,
        "host tier %zu bytes, want %zu arrays of %zu", ib.offload_host_bytes, arrays, chunk);
  if (rank == 0)
    printf("ZeRO-%d %s %-5s: bit-identical with the optimizer state offloaded; device %zu -> %zu bytes, host tier "
           "%zu\n",
           zero, pn[prec], opt, peak_a, peak_b, ib.offload_host_bytes);
  free(pa), free(pb);
  par_data_destroy(da), par_data_destroy(db);
  par_engine_destroy(a), par_engine_destroy(b);
}

/* ZeRO-Infinity: bit-identical to no offload; the state on NVMe, moving. */
static void nvme(int zero, par_precision_t prec, const char *opt) {
  static const char *const pn[] = {"fp32", "bf16", "fp16"};
  par_engine_t *a = engine(zero, prec, opt, 0), *b = engine(zero, prec, opt, 2);
  par_data_t *da = markov_data(mc.seq), *db = markov_data(mc.seq);
  int same_steps = 1;
  uint64_t moved[7] = {0};
  for (int s = 1; s <= 6; s++) {
    par_step_t x, y;
    CHECK(par_engine_step(a, da, &x) == 0 && par_engine_step(b, db, &y) == 0, "step %d: %s / %s", s,
          par_engine_error(a), par_engine_error(b));
    same_steps &= x.loss == y.loss && x.grad_norm == y.grad_norm;
    par_engine_info_t ib;
    par_engine_info(b, &ib);
    moved[s] = ib.offload_moved;
  }
  size_t n = par_gpt_param_count(&mc);
  float *pa = malloc(n * 4), *pb = malloc(n * 4);
  CHECK(par_engine_get_params(a, pa) == 0 && par_engine_get_params(b, pb) == 0, "get_params");
  CHECK(same_steps && !memcmp(pa, pb, n * 4), "NVMe ZeRO-%d %s %s: offload changed the losses, norms or parameters",
        zero, pn[prec], opt);
  par_engine_info_t ib;
  par_engine_info(b, &ib);
  CHECK(ib.offload_nvme_bytes > 0 && moved[6] > moved[5] && moved[5] > moved[4],
        "NVMe ZeRO-%d: the tier holds %zu bytes, moved %llu then %llu", zero, ib.offload_nvme_bytes,
        (unsigned long long)moved[5], (unsigned long long)moved[6]);
  /* a checkpoint from it loads into a run without offload, which goes on as the first one does */
  char path[600];
  snprintf(path, sizeof path, "%s/nvme.h5", dir);
  CHECK(par_engine_save(b, path, db, 6, NULL, 0) == 0, "save: %s", par_engine_error(b));
  par_engine_t *c = engine(zero, prec, opt, 0);
  par_data_t *dc = markov_data(mc.seq);
  long step;
  CHECK(par_engine_load(c, path, dc, &step) == 0 && step == 6, "load: %s", par_engine_error(c));
  par_step_t x, z;
  CHECK(par_engine_step(a, da, &x) == 0 && par_engine_step(c, dc, &z) == 0, "step 7: %s", par_engine_error(c));
  CHECK(x.loss == z.loss && x.grad_norm == z.grad_norm, "NVMe ZeRO-%d: resumed without offload, step 7 differs", zero);
  /* and the other way: loaded into the NVMe run */
  CHECK(par_engine_load(b, path, db, &step) == 0, "load into NVMe: %s", par_engine_error(b));
  par_step_t y;
  CHECK(par_engine_step(b, db, &y) == 0 && y.loss == x.loss, "NVMe ZeRO-%d: reloaded, step 7 differs", zero);
  if (rank == 0) {
    printf("NVMe ZeRO-%d %s %-8s: bit-identical with the optimizer state on NVMe (%zu bytes there, %llu moved a step); "
           "its checkpoint resumes without offload and with it\n",
           zero, pn[prec], opt, ib.offload_nvme_bytes, (unsigned long long)(moved[6] - moved[5]));
    unlink(path);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  free(pa), free(pb);
  par_data_destroy(da), par_data_destroy(db), par_data_destroy(dc);
  par_engine_destroy(a), par_engine_destroy(b), par_engine_destroy(c);
}

int main(int argc, char **argv) {
  char tmp[256];
  harness_start(&argc, &argv, "offload_engine", tmp, sizeof tmp);
  dir = tmp;
  const int zeros[3] = {0, 1, 3};
  for (int z = 0; z < 3; z++) {
    same(zeros[z], PAR_PREC_FP32, "adamw");
    same(zeros[z], PAR_PREC_BF16, "lamb");
  }
  same(1, PAR_PREC_FP32, "lamb");
  for (int z = 0; z < 3; z++) nvme(zeros[z], z == 1 ? PAR_PREC_BF16 : PAR_PREC_FP32, z == 2 ? "lars" : "adamw");
  nvme(1, PAR_PREC_FP32, "momentum");
  nvme(0, PAR_PREC_BF16, "lamb");
  nvme(3, PAR_PREC_FP32, "lamb");
  /* a device of 400 KB of activations and room for 5 chunks of 52 KB, against 470 KB of fp32
   * parameters and gradients (4 layers of h = 32) */
  mc.layers = 4, chunk_bytes = 0;
  chunked(PAR_PREC_FP32, "adamw", 1, 0.7e6, 0);
  chunked(PAR_PREC_BF16, "lamb", 1, 0.7e6, 0);
  chunked(PAR_PREC_BF16, "adamw", 2, 0.9e6, 0); /* (+ the fp32 working copies and accumulators) */
  chunked(PAR_PREC_FP32, "momentum", 2, 0.7e6, 0);
  /* sharded (+ a group's gather and reduction buffers) */
  chunked(PAR_PREC_FP32, "adamw", 1, 1.2e6, 3);
  chunked(PAR_PREC_BF16, "lamb", 1, 1.2e6, 3);
  if (rank == 0) rmdir(tmp);
  return harness_finish(NULL);
}
