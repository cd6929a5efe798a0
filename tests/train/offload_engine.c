/* ZeRO-Offload's static policy in the engine (mpirun -np 1 and 2): the fp32
 * masters and the optimizer's moments live in liboffload's host tier and
 * the optimizer updates them there. Only the placement differs from a run
 * without offload, never the arithmetic: over ZeRO 0, 1 and 3, fp32 and
 * bf16, AdamW and LAMB, 6 steps give bit-identical losses, gradient norms
 * and parameters. The optimizer state leaves the device's accountant
 * exactly (its peak falls by the state's bytes) and the host tier holds it
 * (one chunk per array, rounded up to 4 KiB). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <strata/parallel.h>

#include "harness.h"

static par_gpt_config_t mc = {.layers = 2, .hidden = 32, .heads = 4, .seq = 16, .vocab = 256};

static par_engine_t *engine(int zero, par_precision_t prec, const char *opt, int offload) {
  par_layout_t lay = PAR_LAYOUT_DEFAULTS;
  lay.dp = ranks, lay.zero_stage = zero, lay.microbatch = 2, lay.global_batch = 2 * ranks, lay.precision = prec;
  lay.offload_optimizer = offload ? PAR_TIER_CPU : PAR_TIER_DEVICE;
  par_optim_config_t oc = PAR_OPTIM_CONFIG_DEFAULTS;
  oc.name = opt, oc.lr = 1e-2, oc.clip = 0.5, oc.weight_decay = 0.01;
  par_engine_options_t eo = PAR_ENGINE_OPTIONS_DEFAULTS;
  eo.steps = 6, eo.threads = 1, eo.seed = 3, eo.bucket_mb = 0.004;
  return make_engine(&mc, &lay, &oc, &eo);
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
  size_t peak_a = 0, peak_b = 0;
  par_engine_memory(a, NULL, &peak_a), par_engine_memory(b, NULL, &peak_b);
  size_t opt_bytes = ia.state_bytes[2], arrays = opt_bytes / (ia.zero == 0 ? ia.params_padded : ia.shard_elems) / 4;
  size_t chunk = (opt_bytes / arrays + 4095) / 4096 * 4096;
  CHECK(peak_a - peak_b == opt_bytes, "ZeRO-%d %s %s: the device's peak fell by %zu bytes, the optimizer state is %zu",
        zero, pn[prec], opt, peak_a - peak_b, opt_bytes);
  CHECK(ib.offload_host_bytes == arrays * chunk && ia.offload_host_bytes == 0,
        "host tier %zu bytes, want %zu arrays of %zu", ib.offload_host_bytes, arrays, chunk);
  if (rank == 0)
    printf("ZeRO-%d %s %-5s: bit-identical with the optimizer state offloaded; device peak %zu -> %zu bytes, host tier "
           "%zu\n",
           zero, pn[prec], opt, peak_a, peak_b, ib.offload_host_bytes);
  free(pa), free(pb);
  par_data_destroy(da), par_data_destroy(db);
  par_engine_destroy(a), par_engine_destroy(b);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  harness_name = "offload_engine";
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const int zeros[3] = {0, 1, 3};
  for (int z = 0; z < 3; z++) {
    same(zeros[z], PAR_PREC_FP32, "adamw");
    same(zeros[z], PAR_PREC_BF16, "lamb");
  }
  same(1, PAR_PREC_FP32, "lamb");
  return harness_finish(NULL);
}
