/* The estimate's effects (docs/planner.md derives each), each against a
 * closed form: CPU-offloaded activation checkpoints, the embedding output
 * counted once, ZeRO-3 layer by layer on the links it crosses and its
 * gathered-parameter buffer as DeepSpeed and strata's engine size it,
 * tensor parallelism across nodes, the GEMM rate as a property of the
 * device, uneven pipeline splits, and the largest model that fits. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <strata/parallel.h>

#define CLOSE(a, b) (fabs((a) - (b)) <= 1e-9 * fabs(b))

static par_cluster_t preset(const char *name, int nodes) {
  par_cluster_t c;
  cr_assert_eq(par_cluster_preset(name, &c, NULL, 0), 0);
  c.nodes = nodes;
  return c;
}

/* DeepSpeed's cpu_checkpointing: each block's kept input (here partitioned
 * over tp 2: tok h e / 2 bytes) leaves the device for the host, and goes
 * down in forward and up in backward over PCIe, on the compute stream.
 * Partitioned, each input is all-gathered over tp before its recomputation. */
Test(effects, cpu_checkpoints) {
  par_gpt_config_t m = {.layers = 8, .hidden = 1024, .heads = 16, .seq = 1024, .vocab = 51200, .recompute = 1};
  par_cluster_t c = preset("dgx-a100-80gb", 1);
  par_layout_t l = PAR_LAYOUT_DEFAULTS;
  l.tp = 2, l.dp = 4, l.microbatch = 1, l.global_batch = 8, l.precision = PAR_PREC_BF16;
  l.partition_activations = 1;
  par_plan_params_t p = PAR_PLAN_PARAMS_DEFAULTS;
  par_plan_t dev, cpu, hidden;
  cr_assert_eq(par_plan_estimate(&m, &l, &c, &p, &dev), 0, "%s", dev.why);
  l.checkpoint_cpu = 1;
  cr_assert_eq(par_plan_estimate(&m, &l, &c, &p, &cpu), 0, "%s", cpu.why);
  double kept = 1024.0 * 1024 * 2 / 2, blocks = 8, mb = 2; /* tok h e / tp per block; 8 / (dp 4 x 1) */
  cr_expect(CLOSE(dev.mem[PAR_MEM_ACTIV] - cpu.mem[PAR_MEM_ACTIV], blocks * kept), "device: %g less",
            dev.mem[PAR_MEM_ACTIV] - cpu.mem[PAR_MEM_ACTIV]);
  cr_expect(CLOSE(cpu.cpu_bytes_node - dev.cpu_bytes_node, 8 * blocks * kept), "host per node: %g more",
            cpu.cpu_bytes_node - dev.cpu_bytes_node);
  double bytes = mb * 2 * blocks * kept, t = bytes / (c.host_bw * p.host_efficiency);
  cr_expect(CLOSE(cpu.comm_bytes[PAR_T_OFFLOAD], bytes), "PCIe bytes %g, want %g", cpu.comm_bytes[PAR_T_OFFLOAD],
            bytes);
  cr_expect(CLOSE(cpu.time[PAR_T_OFFLOAD], t), "PCIe time %g, want %g", cpu.time[PAR_T_OFFLOAD], t);
  cr_expect_eq(dev.time[PAR_T_OFFLOAD], 0.0);
  /* partitioned, each block's input is all-gathered over tp before its recomputation */
  par_plan_t whole;
  l.checkpoint_cpu = 0, l.partition_activations = 0;
  cr_assert_eq(par_plan_estimate(&m, &l, &c, &p, &whole), 0);
  double gathered = mb * blocks * 1024.0 * 1024 * 2 / 2; /* (t - 1)/t of tok h e */
  cr_expect(CLOSE(dev.comm_bytes[PAR_T_TP] - whole.comm_bytes[PAR_T_TP], gathered), "%g vs %g",
            dev.comm_bytes[PAR_T_TP] - whole.comm_bytes[PAR_T_TP], gathered);
  double g1 = 1 * 5e-6 + 0.5 * 1024.0 * 1024 * 2 / (300e9 * 0.8);
  cr_expect(CLOSE(dev.time[PAR_T_TP] - whole.time[PAR_T_TP], mb * blocks * g1), "%g",
            dev.time[PAR_T_TP] - whole.time[PAR_T_TP]);
  l.checkpoint_cpu = 1, l.partition_activations = 1;
  p.ckpt_cpu_overlap = 1; /* an implementation that hid the copies entirely */
  cr_assert_eq(par_plan_estimate(&m, &l, &c, &p, &hidden), 0);
  cr_expect_eq(hidden.time[PAR_T_OFFLOAD], 0.0);
  cr_expect_eq(hidden.mem[PAR_MEM_ACTIV], cpu.mem[PAR_MEM_ACTIV]);
}

/* The embedding output is the first block's input (Korthikanti's 34 s b h
 * count it as the first layernorm's input): the first stage adds only the
 * embedding's dropout mask; an implementation that keeps it apart (strata's
 * engine: embed_output_kept) adds tok h e more. */
Test(effects, embedding_output_counted_once) {
  par_gpt_config_t m = {.layers = 4, .hidden = 1024, .heads = 16, .seq = 1024, .vocab = 50304, .recompute = 1};
  par_cluster_t c = preset("dgx-a100-80gb", 1);
  par_layout_t l = PAR_LAYOUT_DEFAULTS;
  l.dp = 8, l.global_batch = 8, l.precision = PAR_PREC_BF16;
  par_plan_params_t p = PAR_PLAN_PARAMS_DEFAULTS;
  par_plan_t once, twice;
  cr_assert_eq(par_plan_estimate(&m, &l, &c, &p, &once), 0, "%s", once.why);
  p.embed_output_kept = 1;
  cr_assert_eq(par_plan_estimate(&m, &l, &c, &p, &twice), 0);
  double s = 1024, h = 1024, a = 16, V = 50304, tok = s;
  cr_expect(CLOSE(twice.mem[PAR_MEM_ACTIV] - once.mem[PAR_MEM_ACTIV], tok * h * 2), "%g vs %g",
            twice.mem[PAR_MEM_ACTIV] - once.mem[PAR_MEM_ACTIV], tok * h * 2);
  /* with recompute: the 4 blocks' inputs (the first is the embedding output),
   * one block rebuilt in backward, its gradient scratch, the embedding's
   * dropout mask, the logits and the cross-entropy's fp32 copy */
  double full = tok * h * (16 * 2 + 2) + a * tok * s * (2 * 2 + 1), scratch = 14 * tok * h * 2;
  double act = 4 * tok * h * 2 + full + scratch + tok * h * 1 + tok * V * (2 + 4);
  cr_expect(CLOSE(once.mem[PAR_MEM_ACTIV], act), "%g vs %g", once.mem[PAR_MEM_ACTIV], act);
}

/* strata's engine on a CUDA device (par_plan_params_engine_device): with
 * bf16 or f16 activations (par_gpt_options_t.act_dtype) every activation
 * element is 2 bytes, so all but the head's term is exactly half the f32
 * one (each term is tok h e times a count, e the element's bytes); the
 * fused head (gpt.c fuses it on every device) holds one chunk of f32 logits
 * (256 MiB / (4 V) rows, at most the microbatch's tokens), plus with 16-bit
 * activations the chunk's 16-bit gradient and the tied weight rounded once,
 * instead of the CPU engine's whole logits and their f32 gradient (tok V
 * (e + 4)). Checked with and without recompute. */
Test(effects, engine_device_activations) {
  par_gpt_config_t m = {.layers = 4, .hidden = 256, .heads = 4, .seq = 1024, .vocab = 50304};
  par_cluster_t c = preset("dgx-a100-80gb", 1);
  c.gpus_per_node = 1;
  par_layout_t l = PAR_LAYOUT_DEFAULTS;
  l.microbatch = 8, l.global_batch = 8, l.precision = PAR_PREC_BF16;
  double tok = 8 * 1024, V = 50304, h = 256;
  double rows = floor(256.0 * 1024 * 1024 / (4 * V)); /* 1334 < tok */
  for (int rc = 0; rc < 2; rc++) {
    m.recompute = rc;
    par_plan_params_t cpu, f32, b16;
    par_plan_params_engine(&cpu);
    par_plan_params_engine_device(&f32, 4);
    par_plan_params_engine_device(&b16, 2);
    cr_expect_eq(f32.act_elem_bytes, 4.0);
    cr_expect_eq(b16.act_elem_bytes, 2.0);
    cr_expect_eq(b16.head_chunk_bytes, 256.0 * 1024 * 1024);
    par_plan_t a, b, whole;
    cr_assert_eq(par_plan_estimate(&m, &l, &c, &cpu, &whole), 0, "%s", whole.why);
    cr_assert_eq(par_plan_estimate(&m, &l, &c, &f32, &a), 0, "%s", a.why);
    cr_assert_eq(par_plan_estimate(&m, &l, &c, &b16, &b), 0, "%s", b.why);
    double head32 = rows * V * 4, head16 = rows * V * 4 + rows * V * 2 + V * h * 2;
    double body32 = a.mem[PAR_MEM_ACTIV] - head32, body16 = b.mem[PAR_MEM_ACTIV] - head16;
    cr_expect(CLOSE(body16, body32 / 2), "recompute %d: bf16 activations %.6g bytes besides the head, want half "
              "of f32's %.6g", rc, body16, body32);
    cr_expect(CLOSE(whole.mem[PAR_MEM_ACTIV] - tok * V * (4 + 4), body32),
              "recompute %d: the CPU engine's whole logits %.6g", rc, whole.mem[PAR_MEM_ACTIV] - body32);
    /* a chunk larger than the microbatch's logits holds just those */
    b16.head_chunk_bytes = 1e12;
    cr_assert_eq(par_plan_estimate(&m, &l, &c, &b16, &b), 0, "%s", b.why);
    cr_expect(CLOSE(b.mem[PAR_MEM_ACTIV] - body16, tok * V * (4 + 2) + V * h * 2), "recompute %d: %.6g", rc,
              b.mem[PAR_MEM_ACTIV] - body16);
  }
}

/* Pipeline stages on a device with bf16 or f16 activations send them as
 * they are (libparallel/src/dist/pipeline.c): the planner's pipeline bytes
 * per step are m x 2 (forward and back) x b s h x e, e = 2, half the f32
 * engine's (e = 4), as tests/train/gpu_pp_engine.c counts them per stage. */
Test(effects, engine_device_pipeline_bytes) {
  par_gpt_config_t m = {.layers = 4, .hidden = 256, .heads = 4, .seq = 1024, .vocab = 50304};
  par_cluster_t c = preset("dgx-a100-80gb", 1);
  c.gpus_per_node = 2;
  par_layout_t l = PAR_LAYOUT_DEFAULTS;
  l.pp = 2, l.microbatch = 2, l.global_batch = 8, l.schedule = PAR_SCHED_1F1B;
  double mb = 4, bsh = 2.0 * 1024 * 256;
  for (int e = 2; e <= 4; e += 2) {
    par_plan_params_t p;
    par_plan_params_engine_device(&p, e);
    par_plan_t pl;
    cr_assert_eq(par_plan_estimate(&m, &l, &c, &p, &pl), 0, "%s", pl.why);
    cr_expect(CLOSE(pl.comm_bytes[PAR_T_PP], mb * 2 * bsh * e), "%d-byte activations: %.6g pipeline bytes, want %.6g",
              e, pl.comm_bytes[PAR_T_PP], mb * 2 * bsh * e);
  }
}

/* ZeRO-3's collectives per region on the data-parallel group's link, a
 * ring's (N - 1) alpha + (N - 1)/N n / B each. */
static double ring(double n, double N, double bw, double lat) { return (N - 1) * lat + (N - 1) / N * n / bw; }

/* With no overlap every pass is exposed: 3 passes of (embeddings + L
 * blocks + final layernorm); with the whole compute to hide behind, only
 * each pass's first gathers and the backward's last reduce-scatters are. The
 * group of 32 ranks spans 4 nodes: its share of the NICs (all 8 of a node:
 * 200 GB/s) at link_efficiency, 10 us a hop. DeepSpeed gathers block
 * parameters in prefetch batches of 5e7 elements, so a block's gathers cost
 * (12 h^2 + 13 h) / 5e7 ring latencies. */
Test(effects, zero3_layer_by_layer) {
  par_gpt_config_t m = {.layers = 4, .hidden = 1024, .heads = 16, .seq = 512, .vocab = 50304};
  par_cluster_t c = preset("dgx-a100-80gb", 4);
  par_layout_t l = PAR_LAYOUT_DEFAULTS;
  l.dp = 32, l.zero_stage = 3, l.microbatch = 1, l.global_batch = 32, l.precision = PAR_PREC_BF16;
  par_plan_params_t p = PAR_PLAN_PARAMS_DEFAULTS;
  p.zero3_overlap = 0;
  par_plan_t r;
  cr_assert_eq(par_plan_estimate(&m, &l, &c, &p, &r), 0, "%s", r.why);
  double h = 1024, V = 50304, s = 512, N = 32, bw = 200e9 * 0.8, lat = 10e-6, L = 4;
  double blk = (12 * h * h + 13 * h) * 2, emb = (V * h + s * h) * 2, fin = 2 * h * 2;
  double gB = ring(blk, N, bw, lat), gE = ring(emb, N, bw, lat), gF = ring(fin, N, bw, lat);
  double gB_ds = gB + ((12 * h * h + 13 * h) / 5e7 - 1) * (N - 1) * lat;
  double gathers = 2 * (gE + L * gB_ds + gF), rs = gE + L * gB + gF;
  cr_expect(CLOSE(r.time[PAR_T_ZERO3], gathers), "no overlap: gathers %g, want %g", r.time[PAR_T_ZERO3], gathers);
  cr_expect(CLOSE(r.time[PAR_T_DP], rs), "no overlap: reduce-scatters %g, want %g", r.time[PAR_T_DP], rs);
  /* microbatch 16: each block's compute outlasts its neighbours' collectives */
  p.zero3_overlap = 1;
  l.microbatch = 16, l.global_batch = 512;
  cr_assert_eq(par_plan_estimate(&m, &l, &c, &p, &r), 0, "%s", r.why);
  double first = gE + gB_ds + gF + gE, last = gB + gE;
  cr_expect(CLOSE(r.time[PAR_T_ZERO3], first), "overlapped: gathers %g, want %g", r.time[PAR_T_ZERO3], first);
  cr_expect(CLOSE(r.time[PAR_T_DP], last), "overlapped: reduce-scatters %g, want %g", r.time[PAR_T_DP], last);
  /* strata's engine gathers a region in one call */
  par_plan_params_engine(&p);
  p.act_elem_bytes = 0;
  cr_assert_eq(par_plan_estimate(&m, &l, &c, &p, &r), 0, "%s", r.why);
  cr_expect(CLOSE(r.time[PAR_T_ZERO3], gE + gB + gF + gE), "engine: %g", r.time[PAR_T_ZERO3]);
  /* inside one node the same group runs on NVLink */
  c = preset("dgx-a100-80gb", 1);
  l.dp = 8, l.global_batch = 128;
  p = (par_plan_params_t)PAR_PLAN_PARAMS_DEFAULTS;
  p.zero3_overlap = 0;
  cr_assert_eq(par_plan_estimate(&m, &l, &c, &p, &r), 0, "%s", r.why);
  bw = 300e9 * 0.8, lat = 5e-6, N = 8;
  gB = ring(blk, N, bw, lat), gE = ring(emb, N, bw, lat), gF = ring(fin, N, bw, lat);
  gB_ds = gB + ((12 * h * h + 13 * h) / 5e7 - 1) * (N - 1) * lat;
  cr_expect(CLOSE(r.time[PAR_T_ZERO3], 2 * (gE + L * gB_ds + gF)), "NVLink: %g", r.time[PAR_T_ZERO3]);
}

/* The gathered parameters a device holds under ZeRO-3. DeepSpeed (defaults
 * prefetch 5e7, max live 1e9, reuse distance 1e9, persistence 1e5): for
 * GPT-3 175B over 1536 ranks, every layernorm and bias (13 h a block, the
 * final layernorm's 2h) stays whole; at the turn to backward the last 1e9 / 3
 * elements of the forward stay gathered (recompute), less than the largest
 * tensor (the embedding, V h), which is gathered, plus the prefetch bucket
 * and one tensor past it. A model under reuse / 2 stays gathered whole.
 * strata's engine: the tied embedding all pass and two blocks, padded to its
 * shards (the 84160 bytes tests/train/zero_equiv measures on one rank). */
Test(effects, zero3_gathered_buffer) {
  par_gpt_config_t m = {.layers = 96, .hidden = 12288, .heads = 96, .seq = 2048, .vocab = 51200, .recompute = 1};
  par_cluster_t c = preset("dgx-a100-80gb", 192);
  par_layout_t l = PAR_LAYOUT_DEFAULTS;
  l.dp = 1536, l.zero_stage = 3, l.global_batch = 1536, l.precision = PAR_PREC_BF16;
  par_plan_t r;
  cr_assert_eq(par_plan_estimate(&m, &l, &c, NULL, &r), 0, "%s", r.why);
  double h = 12288, V = 51200;
  double persist = 96 * 13 * h + 2 * h, live = V * h + 5e7 + V * h;
  double want = 100e6 + (live + persist) * 2;
  cr_expect(CLOSE(r.mem[PAR_MEM_BUFFERS], want), "GPT-3: %.6g bytes, want %.6g", r.mem[PAR_MEM_BUFFERS], want);
  /* without recompute the reuse window is 1e9 / 2, still below the embedding */
  m.recompute = 0;
  cr_assert_eq(par_plan_estimate(&m, &l, &c, NULL, &r), 0, "%s", r.why);
  cr_expect(CLOSE(r.mem[PAR_MEM_BUFFERS], want), "%.6g", r.mem[PAR_MEM_BUFFERS]);
  /* GPT-2 124M: all of it within the reuse window */
  par_gpt_config_t g2 = {.layers = 12, .hidden = 768, .heads = 12, .seq = 1024, .vocab = 50304};
  c = preset("dgx-a100-80gb", 1);
  l.dp = 8, l.global_batch = 8;
  cr_assert_eq(par_plan_estimate(&g2, &l, &c, NULL, &r), 0, "%s", r.why);
  want = 100e6 + r.params * 2;
  cr_expect(CLOSE(r.mem[PAR_MEM_BUFFERS], want), "GPT-2: %.6g, want %.6g", r.mem[PAR_MEM_BUFFERS], want);
  /* strata's engine, one rank, fp32: regions padded to 16 elements */
  par_gpt_config_t tiny = {.layers = 2, .hidden = 24, .heads = 3, .seq = 18, .vocab = 256};
  par_cluster_t one = preset("this-machine", 1);
  par_layout_t e = PAR_LAYOUT_DEFAULTS;
  e.zero_stage = 3, e.microbatch = 2, e.global_batch = 2;
  par_plan_params_t p;
  par_plan_params_engine(&p);
  cr_assert_eq(par_plan_estimate(&tiny, &e, &one, &p, &r), 0, "%s", r.why);
  double r0 = 256 * 24 + 18 * 24, blk = 12 * 24 * 24 + 13 * 24 + 8; /* 7224 padded to 7232 */
  cr_expect_eq(r.mem[PAR_MEM_BUFFERS], (r0 + 2 * blk) * 4);
  cr_expect_eq(r.mem[PAR_MEM_BUFFERS], 84160.0);
}

/* Megatron's 1d tensor parallelism: per block 8 (t - 1)/t b s h e bytes and
 * 8 (t - 1) ring steps (two allreduces forward, two backward). Inside a
 * node it runs on NVLink; a group of 16 spans two DGX A100 and its rings run
 * at the node's NICs, all 8 of them (NCCL's one ring per NIC: 200 GB/s),
 * every step paying the inter-node latency; on DGX-1 (4 EDR NICs, 50 GB/s
 * a node) a third of NVLink's bandwidth. */
Test(effects, tensor_parallel_across_nodes) {
  par_gpt_config_t m = {.layers = 4, .hidden = 4096, .heads = 32, .seq = 2048, .vocab = 51200};
  par_plan_params_t p = PAR_PLAN_PARAMS_DEFAULTS;
  struct {
    const char *cluster;
    int nodes, tp;
    double bw, lat;
  } k[] = {{"dgx-a100-80gb", 1, 8, 300e9, 5e-6},
           {"dgx-a100-80gb", 2, 16, 200e9, 10e-6},
           {"dgx1-v100-32gb", 1, 8, 150e9, 5e-6},
           {"dgx1-v100-32gb", 2, 16, 50e9, 10e-6}};
  double t_tp[4];
  for (int i = 0; i < 4; i++) {
    par_cluster_t c = preset(k[i].cluster, k[i].nodes);
    par_layout_t l = PAR_LAYOUT_DEFAULTS;
    l.tp = k[i].tp, l.precision = PAR_PREC_FP16;
    par_plan_t r;
    cr_assert_eq(par_plan_estimate(&m, &l, &c, &p, &r), 0, "%s", r.why);
    double t = k[i].tp, bytes = 8 * (t - 1) / t * 2048 * 4096 * 2, steps = 8 * (t - 1);
    double want = 4 * (bytes / (k[i].bw * p.link_efficiency) + steps * k[i].lat);
    cr_expect(CLOSE(r.time[PAR_T_TP], want), "%s tp %d: %g s, want %g", k[i].cluster, k[i].tp, r.time[PAR_T_TP], want);
    t_tp[i] = r.time[PAR_T_TP];
  }
  cr_expect(t_tp[3] / t_tp[2] > 3.0, "DGX-1 across nodes %g vs %g inside", t_tp[3], t_tp[2]);
  /* 4 GPUs a node (DeepSpeed's 3D run): tp 8 spans two nodes, 4 of a node's
   * NICs for the group, the whole node's share */
  par_cluster_t c = preset("dgx1-v100-32gb", 2);
  c.gpus_per_node = 4;
  par_layout_t l = PAR_LAYOUT_DEFAULTS;
  l.tp = 8, l.precision = PAR_PREC_FP16;
  par_plan_t r;
  cr_assert_eq(par_plan_estimate(&m, &l, &c, &p, &r), 0, "%s", r.why);
  double bytes = 8 * 7.0 / 8 * 2048 * 4096 * 2, want = 4 * (bytes / (50e9 * 0.8) + 56 * 10e-6);
  cr_expect(CLOSE(r.time[PAR_T_TP], want), "4-GPU nodes: %g, want %g", r.time[PAR_T_TP], want);
}

/* The matmuls run at params.gemm_efficiency x the device's sustained GEMM
 * fraction x its peak: a V100 sustains 0.664 of 125 TFLOP/s in fp16, an
 * A100 0.8587 of 312 (docs/planner.md gives the sources), 3.23x apart. */
Test(effects, gemm_rate_of_the_device) {
  par_gpt_config_t m = {.layers = 4, .hidden = 2048, .heads = 16, .seq = 1024, .vocab = 50304};
  par_plan_params_t p = PAR_PLAN_PARAMS_DEFAULTS;
  double b = 1, s = 1024, h = 2048, V = 50304;
  double flops = 3 * 4 * (24 * b * s * h * h + 4 * b * s * s * h) + 3 * 2 * b * s * h * V;
  const char *names[2] = {"dgx1-v100-32gb", "dgx-a100-80gb"};
  double eff[2] = {0.664, 0.8587}, peak[2] = {125e12, 312e12}, t[2];
  for (int i = 0; i < 2; i++) {
    par_cluster_t c = preset(names[i], 1);
    c.gpus_per_node = 1;
    cr_expect_eq(c.gemm_efficiency[PAR_PREC_FP16], eff[i]);
    par_layout_t l = PAR_LAYOUT_DEFAULTS;
    l.precision = PAR_PREC_FP16;
    par_plan_t r;
    cr_assert_eq(par_plan_estimate(&m, &l, &c, &p, &r), 0, "%s", r.why);
    double want = flops / (p.gemm_efficiency * eff[i] * peak[i]);
    cr_expect(CLOSE(r.time[PAR_T_COMPUTE], want), "%s: %g s, want %g", names[i], r.time[PAR_T_COMPUTE], want);
    t[i] = r.time[PAR_T_COMPUTE];
  }
  cr_expect(CLOSE(t[0] / t[1], 0.8587 * 312 / (0.664 * 125)), "V100 / A100 %g", t[0] / t[1]);
  /* a measured rate: 250 TFLOP/s in bf16 on an A100 */
  par_cluster_t c = preset("dgx-a100-80gb", 1);
  cr_assert_eq(par_cluster_calibrate(&c, PAR_PREC_BF16, 250e12), 0);
  cr_expect(CLOSE(c.gemm_efficiency[PAR_PREC_BF16], 250.0 / 312));
  cr_expect_eq(c.gemm_efficiency[PAR_PREC_FP16], 0.8587);
  /* a CPU faster than its preset's peak: the peak rises to the rate */
  c = preset("this-machine", 1);
  cr_assert_eq(par_cluster_calibrate(&c, PAR_PREC_FP32, 300e9), 0);
  cr_expect(c.peak_flops[PAR_PREC_FP32] == 300e9 && c.gemm_efficiency[PAR_PREC_FP32] == 1.0);
  cr_expect_eq(par_cluster_calibrate(&c, PAR_PREC_FP32, 0), STRATA_EINVAL);
  cr_expect_eq(par_cluster_calibrate(&c, PAR_PREC_FP32, NAN), STRATA_EINVAL);
  cr_expect_eq(par_cluster_calibrate(NULL, PAR_PREC_FP32, 1e12), STRATA_EINVAL);
  /* an efficiency outside (0, 1] where the device has that peak is invalid */
  char why[256];
  c = preset("dgx-a100-80gb", 1);
  c.gemm_efficiency[PAR_PREC_BF16] = 1.5;
  cr_expect_eq(par_cluster_validate(&c, why, sizeof why), STRATA_EINVAL);
  cr_expect(strstr(why, "gemm_efficiency.bf16 = 1.5 must be in (0, 1]"), "%s", why);
  c.gemm_efficiency[PAR_PREC_BF16] = 0;
  cr_expect_eq(par_cluster_validate(&c, why, sizeof why), STRATA_EINVAL);
  c = preset("dgx1-v100-32gb", 1); /* no bf16: 0 is right */
  cr_expect_eq(par_cluster_validate(&c, why, sizeof why), 0, "%s", why);
}

/* 298 layers over 64 stages: the heaviest stage holds ceil(298 / 64) = 5
 * blocks, as with 320 layers; its memory and its per-microbatch time are
 * those of 320 layers', the fill and drain pass the other 293 blocks
 * instead of 315. */
Test(effects, uneven_pipeline_split) {
  par_gpt_config_t m = {.layers = 298, .hidden = 2048, .heads = 16, .seq = 2048, .vocab = 51200, .recompute = 1};
  par_cluster_t c = preset("dgx-a100-80gb", 8);
  par_layout_t l = PAR_LAYOUT_DEFAULTS;
  l.pp = 64, l.global_batch = 128, l.precision = PAR_PREC_BF16;
  par_plan_t u, e;
  cr_assert_eq(par_plan_estimate(&m, &l, &c, NULL, &u), 0, "%s", u.why);
  par_gpt_config_t m320 = m;
  m320.layers = 320;
  cr_assert_eq(par_plan_estimate(&m320, &l, &c, NULL, &e), 0, "%s", e.why);
  cr_expect_eq(u.mem_total, e.mem_total);
  cr_expect_eq(u.params_device, e.params_device);
  cr_expect(CLOSE(u.time[PAR_T_COMPUTE], e.time[PAR_T_COMPUTE]));
  cr_expect(CLOSE(u.time[PAR_T_BUBBLE] / e.time[PAR_T_BUBBLE], 293.0 / 315), "bubble %g vs %g",
            u.time[PAR_T_BUBBLE], e.time[PAR_T_BUBBLE]);
  cr_expect(CLOSE(u.bubble_fraction, 63.0 / 128));
  cr_expect(u.flops_step < e.flops_step, "the model's FLOPs are 298 layers'");
  /* an even split is unchanged: 256 layers, 4 a stage */
  m.layers = 256;
  cr_assert_eq(par_plan_estimate(&m, &l, &c, NULL, &u), 0, "%s", u.why);
  double t_mb = (u.time[PAR_T_COMPUTE] + u.time[PAR_T_MEMBOUND] + u.time[PAR_T_TP] + u.time[PAR_T_SP]) / 128;
  double head = 3 * 2 * 2048.0 * 2048 * 51200 / (0.8670 * 0.8587 * 312e12);
  cr_expect(CLOSE(u.time[PAR_T_BUBBLE], 63 * (t_mb - head)), "even bubble %g, want %g", u.time[PAR_T_BUBBLE],
            63 * (t_mb - head));
}

/* The largest model of a family that fits: its size fits, one step more
 * does not; growing the hidden size keeps it a multiple of lcm(heads, 128). */
Test(effects, largest_model_that_fits) {
  par_gpt_config_t m = {.layers = 1, .hidden = 4096, .heads = 32, .seq = 2048, .vocab = 51200, .recompute = 1};
  par_cluster_t c = preset("dgx-a100-80gb", 1);
  par_layout_t l = PAR_LAYOUT_DEFAULTS;
  l.tp = 8, l.global_batch = 1, l.precision = PAR_PREC_BF16;
  par_gpt_config_t best;
  par_plan_t r, next;
  cr_assert_eq(par_plan_largest(&m, &l, &c, NULL, PAR_GROW_LAYERS, 0, 0, &best, &r), 0, "%s", r.why);
  cr_expect(r.fits && best.hidden == 4096 && best.layers > 1);
  par_gpt_config_t more = best;
  more.layers++;
  cr_assert_eq(par_plan_estimate(&more, &l, &c, NULL, &next), 0);
  cr_expect(!next.fits, "%d layers fit too", more.layers);
  /* model states dominate: 16 bytes a parameter over tp 8, ~12 h^2 L / 8 each */
  double per_layer = 16.0 * 12 * 4096.0 * 4096 / 8;
  cr_expect(best.layers * per_layer < 80e9 && (best.layers + 4) * per_layer > 70e9, "%d layers", best.layers);
  m.layers = 24;
  cr_assert_eq(par_plan_largest(&m, &l, &c, NULL, PAR_GROW_HIDDEN, 0, 0, &best, &r), 0, "%s", r.why);
  cr_expect(r.fits && best.hidden % 128 == 0 && best.layers == 24, "hidden %d", best.hidden);
  more = best;
  more.hidden += 128;
  cr_assert_eq(par_plan_estimate(&more, &l, &c, NULL, &next), 0);
  cr_expect(!next.fits, "hidden %d fits too", more.hidden);
  /* with max, the answer stops there */
  cr_assert_eq(par_plan_largest(&m, &l, &c, NULL, PAR_GROW_LAYERS, 2, 10, &best, &r), 0);
  cr_expect_eq(best.layers, 10);
  /* nothing fits: the smallest's reason */
  c.gpu_mem_bytes = 1e9;
  cr_expect_eq(par_plan_largest(&m, &l, &c, NULL, PAR_GROW_LAYERS, 0, 0, &best, &r), STRATA_ENOTFOUND);
  cr_expect(strstr(r.why, "needs"), "%s", r.why);
  cr_expect_eq(par_plan_largest(NULL, &l, &c, NULL, PAR_GROW_LAYERS, 0, 0, &best, &r), STRATA_EINVAL);
  cr_expect_eq(par_plan_largest(&m, &l, &c, NULL, (par_grow_t)7, 0, 0, &best, &r), STRATA_EINVAL);
}
