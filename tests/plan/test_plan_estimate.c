/* The cost model: Megatron's throughput after a one-row calibration, memory
 * accounting against closed forms, pipeline terms, fit verdicts, errors. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <strata/parallel.h>

typedef struct {
  double tflops;
  int heads, h, l, t, p, gpus, B;
} mrow_t;
/* Megatron-LM (arXiv 2104.04473) Table 1 rows of PUBLISHED.md. */
static const mrow_t mrows[] = {{137, 24, 2304, 24, 1, 1, 32, 512},
                               {135, 48, 6144, 40, 8, 1, 256, 1024},
                               {148, 96, 12288, 80, 8, 8, 1536, 2304}};

static void mrow(const mrow_t *r, par_gpt_config_t *m, par_layout_t *l, par_cluster_t *c) {
  *m = (par_gpt_config_t){.layers = r->l, .hidden = r->h, .heads = r->heads, .seq = 2048,
                          .vocab = 51200, .recompute = 1};
  *l = (par_layout_t)PAR_LAYOUT_DEFAULTS;
  l->tp = r->t;
  l->pp = r->p;
  l->dp = r->gpus / (r->t * r->p);
  l->global_batch = r->B;
  l->precision = PAR_PREC_FP16;
  cr_assert_eq(par_cluster_preset("dgx-a100-80gb", c, NULL, 0), 0);
  c->nodes = r->gpus / 8;
}

Test(estimate, megatron_throughput_within_15_percent) {
  /* gemm_efficiency is calibrated on the 1.7B row only; the default is
   * that calibration (docs/planner.md), checked here so it cannot go stale.
   * The other rows are predictions: 15% is the bound, the model's
   * remaining error being GEMM-shape effects it does not model. */
  par_plan_params_t p = PAR_PLAN_PARAMS_DEFAULTS;
  par_gpt_config_t m;
  par_layout_t l;
  par_cluster_t c;
  mrow(&mrows[0], &m, &l, &c);
  double eff = 0;
  cr_assert_eq(par_plan_calibrate(&m, &l, &c, &p, mrows[0].tflops, &eff), 0);
  cr_expect(fabs(eff - p.gemm_efficiency) < 5e-4, "calibrated %.5f, default %.5f", eff,
            p.gemm_efficiency);
  p.gemm_efficiency = eff;
  for (int i = 0; i < 3; i++) {
    mrow(&mrows[i], &m, &l, &c);
    par_plan_t r;
    cr_assert_eq(par_plan_estimate(&m, &l, &c, &p, &r), 0, "%s", r.why);
    cr_expect(r.fits, "row %d: %s", i, r.why);
    double err = r.tflops_per_gpu / mrows[i].tflops - 1;
    cr_expect(fabs(err) < (i ? 0.15 : 1e-6), "row %d: %.1f vs %.0f TFLOP/s (%+.1f%%)", i,
              r.tflops_per_gpu, mrows[i].tflops, 100 * err);
    /* Megatron's convention: F with recompute over time and GPUs. */
    double f = par_megatron_flops(&m, l.global_batch, 1) / r.step_time / (l.dp * l.tp * l.pp) / 1e12;
    cr_expect(fabs(f / r.tflops_per_gpu - 1) < 1e-12);
    cr_expect(r.mfu < r.tflops_per_gpu * 1e12 / 312e12, "MFU counts no recompute");
  }
  cr_expect_eq(par_plan_calibrate(&m, &l, &c, &p, 1e6, &eff), STRATA_EINVAL, "unreachable target");
}

Test(estimate, model_states_follow_zero_accounting) {
  par_gpt_config_t m = {.layers = 12, .hidden = 1024, .heads = 16, .seq = 1024, .vocab = 50304};
  par_cluster_t c;
  par_cluster_preset("dgx-a100-40gb", &c, NULL, 0);
  c.nodes = 2;
  for (int st = 0; st <= 3; st++) {
    par_layout_t l = PAR_LAYOUT_DEFAULTS;
    l.dp = 16;
    l.global_batch = 32;
    l.zero_stage = st;
    l.precision = PAR_PREC_BF16;
    par_plan_t r;
    cr_assert_eq(par_plan_estimate(&m, &l, &c, NULL, &r), 0, "%s", r.why);
    cr_expect_eq(r.params_device, par_plan_param_count(&m));
    double o[3];
    par_zero_model_states(r.params, 16, st, 12.0, o);
    cr_expect(fabs(r.mem[PAR_MEM_PARAMS] - o[0]) < 1e-6 * o[0]);
    cr_expect(fabs(r.mem[PAR_MEM_GRADS] - o[1]) < 1e-6 * o[1]);
    cr_expect(fabs(r.mem[PAR_MEM_OPTIM] - o[2]) < 1e-6 * o[2]);
    double sum = 0;
    for (int i = 0; i < PAR_MEM_COUNT; i++) sum += r.mem[i];
    cr_expect(fabs(sum - r.mem_total) < 1e-6 * sum);
  }
  /* fp32 training: 4-byte parameters and gradients, Adam moments only (K = 8). */
  par_layout_t l = PAR_LAYOUT_DEFAULTS;
  l.dp = 16;
  l.global_batch = 16;
  par_plan_t r;
  cr_assert_eq(par_plan_estimate(&m, &l, &c, NULL, &r), 0);
  cr_expect(fabs(r.mem[PAR_MEM_PARAMS] + r.mem[PAR_MEM_GRADS] + r.mem[PAR_MEM_OPTIM] - 16 * r.params) <
            1e-6 * r.params);
}

Test(estimate, tensor_and_pipeline_shards) {
  /* 1d: matrices and their column biases split, layernorms and row biases
   * whole (12h^2 + 7h over t, 6h whole per block), vocab-parallel embedding. */
  par_gpt_config_t m = {.layers = 8, .hidden = 512, .heads = 8, .seq = 256, .vocab = 1024};
  par_cluster_t c;
  par_cluster_preset("dgx-h100", &c, NULL, 0);
  par_layout_t l = PAR_LAYOUT_DEFAULTS;
  l.tp = 4;
  l.pp = 2;
  l.global_batch = 8;
  l.precision = PAR_PREC_BF16;
  par_plan_t r;
  cr_assert_eq(par_plan_estimate(&m, &l, &c, NULL, &r), 0, "%s", r.why);
  double h = 512, first = 4 * ((12 * h * h + 7 * h) / 4 + 6 * h) + 1024 * h / 4 + 256 * h;
  cr_expect(fabs(r.params_device - first) < 1e-9 * first, "%g vs %g", r.params_device, first);
  /* Bubble (p-1)/m exactly, and 1/v of it interleaved. */
  cr_expect(fabs(r.bubble_fraction - 1.0 / 8) < 1e-12, "%g", r.bubble_fraction);
  l.schedule = PAR_SCHED_INTERLEAVED;
  l.interleave = 2;
  cr_assert_eq(par_plan_estimate(&m, &l, &c, NULL, &r), 0, "%s", r.why);
  cr_expect(fabs(r.bubble_fraction - 1.0 / 16) < 1e-12, "%g", r.bubble_fraction);
  /* Megatron's traffic: 8 b s h (t-1)/t elements per layer per microbatch. */
  l = (par_layout_t)PAR_LAYOUT_DEFAULTS;
  l.tp = 8;
  l.global_batch = 3;
  l.precision = PAR_PREC_BF16;
  cr_assert_eq(par_plan_estimate(&m, &l, &c, NULL, &r), 0, "%s", r.why);
  double want = 3 * 8 * 8.0 * 256 * 512 * 7 / 8 * 2;
  cr_expect(fabs(r.comm_bytes[PAR_T_TP] - want) < 1e-9 * want, "%g vs %g", r.comm_bytes[PAR_T_TP], want);
}

Test(estimate, activations_recompute_and_schedules) {
  par_gpt_config_t m = {.layers = 16, .hidden = 1024, .heads = 16, .seq = 1024, .vocab = 50304};
  par_cluster_t c;
  par_cluster_preset("dgx-a100-80gb", &c, NULL, 0);
  par_layout_t l = PAR_LAYOUT_DEFAULTS;
  l.pp = 4;
  l.dp = 2;
  l.global_batch = 32;
  l.precision = PAR_PREC_BF16;
  par_plan_t a, b, g;
  cr_assert_eq(par_plan_estimate(&m, &l, &c, NULL, &a), 0, "%s", a.why);
  m.recompute = 1;
  cr_assert_eq(par_plan_estimate(&m, &l, &c, NULL, &b), 0);
  cr_expect(b.mem[PAR_MEM_ACTIV] < a.mem[PAR_MEM_ACTIV] / 4);
  cr_expect(b.time[PAR_T_COMPUTE] > a.time[PAR_T_COMPUTE]); /* one more forward */
  /* Korthikanti eq. 1 (e = 2): 34 s b h + 5 a s^2 b per layer. 1F1B: the
   * first stage keeps p = 4 microbatches of its 4 layers and of the
   * embedding's dropout mask (s h bytes; its output is the first block's
   * input, one of the 34). GPipe: every stage keeps
   * all m = 16; the last stage, which also holds each one's logits (2 s V
   * bytes) and final layernorm input and output (2 x 2 s h, one of each
   * counted in the per-layer terms) until its backward, and one fp32 copy of the logits
   * for the cross-entropy (4 s V), is then the largest. Both add the
   * gradient buffers of the block in backward. */
  m.recompute = 0;
  double s = 1024, h = 1024, V = 50304, per_layer = 34 * s * h + 5 * 16 * s * s;
  double scratch = 14 * s * h * 2; /* one block's activation gradients in backward */
  double want_1f1b = 4 * 4 * per_layer + 4 * 1 * s * h + scratch;
  cr_expect(fabs(a.mem[PAR_MEM_ACTIV] - want_1f1b) < 1e-9 * want_1f1b, "%g vs %g",
            a.mem[PAR_MEM_ACTIV], want_1f1b);
  l.schedule = PAR_SCHED_GPIPE;
  cr_assert_eq(par_plan_estimate(&m, &l, &c, NULL, &g), 0);
  double want_gpipe = 16 * 4 * per_layer + (16 * 2 + 4) * s * V + 15 * 2 * 2 * s * h + scratch;
  cr_expect(fabs(g.mem[PAR_MEM_ACTIV] - want_gpipe) < 1e-9 * want_gpipe, "%g vs %g",
            g.mem[PAR_MEM_ACTIV], want_gpipe);
}

/* DeepSpeed's trillion-parameter 3D layout (8-way tensor x 64-way pipeline
 * x 8-way data on 4096 A100 40 GB, microbatch 1, recompute): the first
 * stage keeps 64 microbatches x 2 layers of block inputs, 2 s b h bytes
 * each; partitioned activation checkpoints split them over the 8 tensor
 * ranks, taking 7/8 of them off the device (Korthikanti Table 2's last
 * row), and held in host memory they leave the device altogether. With
 * sequence parallelism the inputs are split already: partitioning adds
 * nothing. */
Test(estimate, partitioned_activation_checkpoints) {
  par_gpt_config_t m = {.layers = 128, .hidden = 25600, .heads = 160, .seq = 2048, .vocab = 51200, .recompute = 1};
  par_cluster_t c;
  par_cluster_preset("dgx-a100-40gb", &c, NULL, 0);
  c.nodes = 512;
  par_layout_t l = PAR_LAYOUT_DEFAULTS;
  l.tp = 8, l.pp = 64, l.dp = 8, l.zero_stage = 1, l.microbatch = 1, l.global_batch = 2048, l.precision = PAR_PREC_FP16;
  par_plan_t whole, part, cpu, sp, sp_part;
  cr_assert_eq(par_plan_estimate(&m, &l, &c, NULL, &whole), 0, "%s", whole.why);
  l.partition_activations = 1;
  cr_assert_eq(par_plan_estimate(&m, &l, &c, NULL, &part), 0, "%s", part.why);
  double inputs = 64.0 * 2 * 2048 * 25600 * 2; /* 64 in flight x 2 layers x 2 s b h bytes */
  double got = whole.mem[PAR_MEM_ACTIV] - part.mem[PAR_MEM_ACTIV];
  cr_expect(fabs(got - inputs * 7 / 8) < 1e-9 * inputs, "partitioned: %g bytes less, want %g", got, inputs * 7 / 8);
  cr_expect(part.fits && part.mem_total < 32.5e9, "partitioned: %.1f GB per GPU", part.mem_total / 1e9);
  l.checkpoint_cpu = 1;
  cr_assert_eq(par_plan_estimate(&m, &l, &c, NULL, &cpu), 0, "%s", cpu.why);
  got = part.mem[PAR_MEM_ACTIV] - cpu.mem[PAR_MEM_ACTIV];
  cr_expect(fabs(got - inputs / 8) < 1e-9 * inputs && cpu.cpu_bytes_node >= 8 * inputs / 8,
            "in host memory: %g bytes less on the device (want %g), %g per node on the host", got, inputs / 8,
            cpu.cpu_bytes_node);
  l.checkpoint_cpu = 0, l.partition_activations = 0, l.seq_parallel = 1;
  cr_assert_eq(par_plan_estimate(&m, &l, &c, NULL, &sp), 0, "%s", sp.why);
  l.partition_activations = 1;
  cr_assert_eq(par_plan_estimate(&m, &l, &c, NULL, &sp_part), 0, "%s", sp_part.why);
  cr_expect_eq(sp.mem[PAR_MEM_ACTIV], sp_part.mem[PAR_MEM_ACTIV]);
}

Test(estimate, offload_moves_states_to_the_host) {
  /* ZeRO-Offload on one GPU: the device keeps fp16 parameters and
   * gradients, the host fp16 gradients + fp32 parameters and moments (14P);
   * 4P bytes cross PCIe per step. */
  par_gpt_config_t m = {.layers = 40, .hidden = 5120, .heads = 40, .seq = 1024, .vocab = 50304,
                        .recompute = 1};
  par_cluster_t c;
  par_cluster_preset("dgx2-v100", &c, NULL, 0);
  c.gpus_per_node = 1;
  par_layout_t l = PAR_LAYOUT_DEFAULTS;
  l.global_batch = 2;
  l.microbatch = 2;
  l.precision = PAR_PREC_FP16;
  par_plan_t r;
  cr_assert_eq(par_plan_estimate(&m, &l, &c, NULL, &r), 0);
  cr_expect(!r.fits, "12.6B in 32 GB without offload");
  cr_expect(strstr(r.why, "needs") && strstr(r.why, "optimizer states"), "%s", r.why);
  l.zero_stage = 2;
  l.offload_optimizer = l.offload_gradients = PAR_TIER_CPU;
  cr_assert_eq(par_plan_estimate(&m, &l, &c, NULL, &r), 0);
  cr_expect(r.fits, "%s", r.why);
  cr_expect_eq(r.mem[PAR_MEM_OPTIM], 0.0);
  cr_expect_eq(r.mem[PAR_MEM_GRADS], 0.0);
  cr_expect(fabs(r.cpu_bytes_node - 14 * r.params) < 1e-6 * r.params);
  cr_expect(fabs(r.comm_bytes[PAR_T_OFFLOAD] - 4 * r.params) < 1e-6 * r.params);
  cr_expect(r.time[PAR_T_OPTIM] > 0 && r.time[PAR_T_OFFLOAD] >= 0);
  /* Optimizer offload alone, as strata's engine runs it on a device: the
   * host holds the fp32 masters, m and v (12 bytes per parameter) and a copy
   * of the gradients in their dtype (2 bytes in fp16/bf16); in fp32 the
   * masters are the host's copy of the parameters, the gradients 4 bytes:
   * 16. (tests/train/gpu_offload.c compares the engine's host bytes.) */
  l.offload_gradients = PAR_TIER_DEVICE;
  cr_assert_eq(par_plan_estimate(&m, &l, &c, NULL, &r), 0);
  cr_expect(fabs(r.cpu_bytes_node - 14 * r.params) < 1e-6 * r.params, "%g per parameter", r.cpu_bytes_node / r.params);
  cr_expect(r.mem[PAR_MEM_GRADS] > 0 && r.mem[PAR_MEM_OPTIM] == 0.0);
  l.precision = PAR_PREC_FP32;
  cr_assert_eq(par_plan_estimate(&m, &l, &c, NULL, &r), 0);
  cr_expect(fabs(r.cpu_bytes_node - 16 * r.params) < 1e-6 * r.params, "%g per parameter", r.cpu_bytes_node / r.params);
  l.precision = PAR_PREC_FP16, l.offload_gradients = PAR_TIER_CPU;
  /* Host too small: the reason names host memory. */
  c.cpu_mem_bytes = 100e9;
  cr_assert_eq(par_plan_estimate(&m, &l, &c, NULL, &r), 0);
  cr_expect(!r.fits && strstr(r.why, "host memory"), "%s", r.why);
}

Test(estimate, invalid_inputs_are_reasons) {
  par_gpt_config_t m = {.layers = 8, .hidden = 512, .heads = 8, .seq = 256, .vocab = 1024};
  par_cluster_t c;
  par_cluster_preset("dgx1-v100-32gb", &c, NULL, 0);
  par_layout_t l = PAR_LAYOUT_DEFAULTS;
  l.dp = 8;
  l.global_batch = 8;
  l.precision = PAR_PREC_BF16;
  par_plan_t r;
  cr_expect_eq(par_plan_estimate(&m, &l, &c, NULL, &r), STRATA_EINVAL);
  cr_expect(!r.valid && strstr(r.why, "no bf16 peak"), "%s", r.why);
  l.precision = PAR_PREC_FP16;
  l.dp = 4;
  cr_expect_eq(par_plan_estimate(&m, &l, &c, NULL, &r), STRATA_EINVAL);
  cr_expect(strstr(r.why, "not the 8 devices"), "%s", r.why);
  cr_expect_eq(par_plan_estimate(NULL, &l, &c, NULL, &r), STRATA_EINVAL);
  cr_expect_eq(par_plan_estimate(&m, &l, &c, NULL, NULL), STRATA_EINVAL);
  c.gpu_mem_bw = 0;
  l.dp = 8;
  cr_expect_eq(par_plan_estimate(&m, &l, &c, NULL, &r), STRATA_EINVAL);
  cr_expect(strstr(r.why, "gpu_mem_bw"), "%s", r.why);
}

Test(estimate, print_report) {
  par_gpt_config_t m = {.layers = 24, .hidden = 2304, .heads = 24, .seq = 2048, .vocab = 51200,
                        .recompute = 1};
  par_cluster_t c;
  par_cluster_preset("dgx-a100-80gb", &c, NULL, 0);
  par_layout_t l = PAR_LAYOUT_DEFAULTS;
  l.dp = 8;
  l.global_batch = 64;
  l.precision = PAR_PREC_BF16;
  par_plan_t r;
  cr_assert_eq(par_plan_estimate(&m, &l, &c, NULL, &r), 0);
  char buf[8192] = {0};
  FILE *f = fmemopen(buf, sizeof buf - 1, "w");
  cr_assert(f);
  cr_expect_eq(par_plan_print(f, &m, &l, &c, &r), 0);
  fclose(f);
  cr_expect(strstr(buf, "optimizer states") && strstr(buf, "TFLOP/s per GPU") &&
                strstr(buf, "MFU") && strstr(buf, "tokens/s") && strstr(buf, "days"),
            "%s", buf);
}

/* The pipeline's effects on the step, each against its closed form
 * (docs/planner.md, Time per step): the fill and drain at the pace of the
 * stages without the head, the embedding group's gradient sum, messages
 * with and without Megatron's scatter-gather, and the data-parallel
 * reduction after the flush. */
Test(estimate, pipeline_effects) {
  par_gpt_config_t m = {.layers = 16, .hidden = 2048, .heads = 16, .seq = 2048, .vocab = 51200};
  par_cluster_t c;
  par_cluster_preset("dgx-a100-80gb", &c, NULL, 0);
  c.nodes = 8;
  par_layout_t l = PAR_LAYOUT_DEFAULTS;
  l.tp = 4, l.pp = 4, l.dp = 4, l.global_batch = 64, l.precision = PAR_PREC_BF16;
  par_plan_params_t p = PAR_PLAN_PARAMS_DEFAULTS;
  par_plan_t r;
  cr_assert_eq(par_plan_estimate(&m, &l, &c, &p, &r), 0, "%s", r.why);
  double b = 1, s = 2048, h = 2048, V = 51200, mb = 16, t = 4, wb = 2;
  /* bubble = (p - 1) (t_mb - head) with t_mb the last stage's microbatch */
  double t_mb = (r.time[PAR_T_COMPUTE] + r.time[PAR_T_MEMBOUND] + r.time[PAR_T_TP] + r.time[PAR_T_SP]) / mb;
  double head = 3 * 2 * b * s * h * V / t /
                (p.gemm_efficiency * c.gemm_efficiency[PAR_PREC_BF16] * c.peak_flops[PAR_PREC_BF16]);
  double want = 3 * (t_mb - head);
  cr_expect(fabs(r.time[PAR_T_BUBBLE] - want) < 1e-9 * want, "bubble %g vs %g", r.time[PAR_T_BUBBLE], want);
  cr_expect(fabs(r.bubble_fraction - 3.0 / 16) < 1e-12, "%g", r.bubble_fraction);
  /* data parallel: the stage's gradients allreduced, plus wte's V h / t summed by two stages */
  double grads = r.params_device * wb, dp = 2 * 3.0 / 4 * grads + V * h / t * wb;
  cr_expect(fabs(r.comm_bytes[PAR_T_DP] - dp) < 1e-9 * dp, "dp bytes %g vs %g", r.comm_bytes[PAR_T_DP], dp);
  /* pipeline messages: b s h / t each (scatter-gather), 2 m per stage */
  double msg = b * s * h * wb / t;
  cr_expect(fabs(r.comm_bytes[PAR_T_PP] - 2 * mb * msg) < 1e-6, "pp bytes %g", r.comm_bytes[PAR_T_PP]);
  p.pp_scatter_gather = 0; /* every tensor rank sends the whole b s h */
  par_plan_t w;
  cr_assert_eq(par_plan_estimate(&m, &l, &c, &p, &w), 0);
  cr_expect(fabs(w.comm_bytes[PAR_T_PP] - t * r.comm_bytes[PAR_T_PP]) < 1e-6, "whole messages %g", w.comm_bytes[PAR_T_PP]);
  cr_expect(w.time[PAR_T_PP] > r.time[PAR_T_PP]);
  /* after the flush the reduction is exposed; posted during the last microbatch it hides behind its backward */
  p = (par_plan_params_t)PAR_PLAN_PARAMS_DEFAULTS;
  p.pp_dp_overlap = 1;
  cr_assert_eq(par_plan_estimate(&m, &l, &c, &p, &w), 0);
  cr_expect(w.time[PAR_T_DP] < r.time[PAR_T_DP], "overlapped %g, after the flush %g", w.time[PAR_T_DP],
            r.time[PAR_T_DP]);
  /* without a pipeline the setting changes nothing */
  l.pp = 1, l.dp = 16;
  par_plan_t a, z;
  cr_assert_eq(par_plan_estimate(&m, &l, &c, &p, &a), 0, "%s", a.why);
  p.pp_dp_overlap = 0;
  cr_assert_eq(par_plan_estimate(&m, &l, &c, &p, &z), 0);
  cr_expect_eq(a.time[PAR_T_DP], z.time[PAR_T_DP]);
}
