/* Cluster descriptions of the machines the papers used, and of this one.
 * recipes/clusters/NAME.lua holds the same tables for recipes; a change here
 * must be made there too (the keys are the field names of par_cluster_t).
 * Figures are the vendors' nominal ones (the planner applies the achievable
 * fractions of par_plan_params_t), except gemm_efficiency: the fraction of
 * each peak the device's own large matrix multiplies sustain, from a
 * published measurement named beside each preset (never from the runs the
 * reproductions check). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <strata/parallel.h>

#include "num.h"

static const par_cluster_t presets[] = {
    /* NVIDIA DGX-1 (V100 SXM2 32 GB): 8 GPUs in an NVLink hybrid cube mesh
     * (6 links x 25 GB/s per direction), 4 x 100 Gb/s EDR InfiniBand, two
     * 20-core Xeon E5-2698 v4 (AVX2, 2.2 GHz), 512 GB DDR4, 4 x 1.92 TB SSD.
     * GEMM: cuBLAS reaches 83 TFLOP/s mixed precision on a V100's tensor cores,
     * 7x its single precision (Markidis et al., "NVIDIA Tensor Core
     * Programmability, Performance & Precision", IPDPSW 2018, arXiv 1803.04014):
     * fp16 83/125 = 0.664, fp32 (83/7)/15.7 = 0.755; no bf16. */
    {.name = "dgx1-v100-32gb", .nodes = 1, .gpus_per_node = 8, .gpu_mem_bytes = 32e9,
     .gpu_mem_bw = 900e9, .peak_flops = {15.7e12, 0.0, 125e12},
     .gemm_efficiency = {0.755, 0.0, 0.664}, .intra_bw = 150e9,
     .intra_lat = 5e-6, .inter_bw = 50e9, .inter_lat = 10e-6, .host_bw = 16e9,
     .cpu_mem_bytes = 512e9, .cpu_mem_bw = 153.6e9, .cpu_flops = 2.8e12, .nvme_bytes = 7.68e12,
     .nvme_bw = 4e9},
    /* NVIDIA DGX-2 (V100 SXM3 32 GB): 16 GPUs on NVSwitch (150 GB/s per
     * direction each), 8 x 100 Gb/s EDR, two 24-core Xeon Platinum 8168
     * (AVX-512, 2.7 GHz), 1.5 TB DDR4, 30 TB NVMe (8 x 3.84 TB). GEMM as DGX-1's
     * V100 (Markidis et al. 2018). */
    {.name = "dgx2-v100", .nodes = 1, .gpus_per_node = 16, .gpu_mem_bytes = 32e9,
     .gpu_mem_bw = 900e9, .peak_flops = {15.7e12, 0.0, 125e12},
     .gemm_efficiency = {0.755, 0.0, 0.664}, .intra_bw = 150e9,
     .intra_lat = 5e-6, .inter_bw = 100e9, .inter_lat = 10e-6, .host_bw = 16e9,
     .cpu_mem_bytes = 1.5e12, .cpu_mem_bw = 256e9, .cpu_flops = 8.3e12, .nvme_bytes = 30.72e12,
     .nvme_bw = 25e9},
    /* NVIDIA DGX A100 40 GB: 8 A100 on NVSwitch (NVLink 3, 300 GB/s per
     * direction), 8 x 200 Gb/s HDR InfiniBand, two 64-core EPYC 7742 (AVX2,
     * 2.25 GHz), 1 TB DDR4 (2 x 204.8 GB/s), 15 TB NVMe, PCIe 4.
     * GEMM: the maximum achievable matmul rate of an A100 SXM, 267.9 of 312
     * TFLOP/s in bf16 (CUDA 12.1; S. Bekman, "Machine Learning Engineering",
     * compute/accelerator, MAMF table): 0.8587 for bf16 and fp16 (the same
     * tensor-core rate); no published fp32 (CUDA-core) figure found, the same
     * fraction assumed. */
    {.name = "dgx-a100-40gb", .nodes = 1, .gpus_per_node = 8, .gpu_mem_bytes = 40e9,
     .gpu_mem_bw = 1555e9, .peak_flops = {19.5e12, 312e12, 312e12},
     .gemm_efficiency = {0.8587, 0.8587, 0.8587}, .intra_bw = 300e9,
     .intra_lat = 5e-6, .inter_bw = 200e9, .inter_lat = 10e-6, .host_bw = 32e9,
     .cpu_mem_bytes = 1e12, .cpu_mem_bw = 409.6e9, .cpu_flops = 9.2e12, .nvme_bytes = 15.36e12,
     .nvme_bw = 25e9},
    /* NVIDIA DGX A100 80 GB (Selene's nodes): as above with 80 GB HBM2e at
     * 2.039 TB/s, 2 TB DDR4 and 30 TB NVMe; GEMM as above. */
    {.name = "dgx-a100-80gb", .nodes = 1, .gpus_per_node = 8, .gpu_mem_bytes = 80e9,
     .gpu_mem_bw = 2039e9, .peak_flops = {19.5e12, 312e12, 312e12},
     .gemm_efficiency = {0.8587, 0.8587, 0.8587}, .intra_bw = 300e9,
     .intra_lat = 5e-6, .inter_bw = 200e9, .inter_lat = 10e-6, .host_bw = 32e9,
     .cpu_mem_bytes = 2e12, .cpu_mem_bw = 409.6e9, .cpu_flops = 9.2e12, .nvme_bytes = 30.72e12,
     .nvme_bw = 25e9},
    /* NVIDIA DGX H100: 8 H100 SXM 80 GB (HBM3 3.35 TB/s, dense bf16 989
     * TFLOP/s, fp32 67), NVLink 4 (450 GB/s per direction), 8 x 400 Gb/s NDR,
     * two 56-core Xeon 8480C (AVX-512, 2.0 GHz), 2 TB DDR5, 30 TB NVMe, PCIe 5.
     * GEMM: the maximum achievable matmul rate of an H100 SXM, 792.1 of 989
     * TFLOP/s in bf16 (CUDA 12.1; Bekman's MAMF table): 0.8009 for bf16 and
     * fp16; fp32 assumed the same. */
    {.name = "dgx-h100", .nodes = 1, .gpus_per_node = 8, .gpu_mem_bytes = 80e9,
     .gpu_mem_bw = 3350e9, .peak_flops = {67e12, 989e12, 989e12},
     .gemm_efficiency = {0.8009, 0.8009, 0.8009}, .intra_bw = 450e9,
     .intra_lat = 3e-6, .inter_bw = 400e9, .inter_lat = 8e-6, .host_bw = 64e9,
     .cpu_mem_bytes = 2e12, .cpu_mem_bw = 614e9, .cpu_flops = 14.3e12, .nvme_bytes = 30.72e12,
     .nvme_bw = 50e9},
    /* This machine (strata's CI): 2 vCPU AMD EPYC (AVX2 + FMA), 24 GiB, no
     * GPU; the CPU backend is the one "device". Figures measured here
     * (shared/TOOLCHAIN.md): sgemm ~210 GFLOP/s on 2 threads (bf16/fp16 run
     * through fp32), triad ~43 GB/s, MPI allreduce busbw ~1.3 GB/s. The peak
     * is itself the measured sgemm rate: gemm_efficiency 1 (strata.plan_calibrate
     * measures it again on any machine). */
    {.name = "this-machine", .nodes = 1, .gpus_per_node = 1, .gpu_mem_bytes = 24.0 * 1073741824.0,
     .gpu_mem_bw = 43e9, .peak_flops = {210e9, 210e9, 210e9}, .gemm_efficiency = {1.0, 1.0, 1.0},
     .intra_bw = 1.3e9,
     .intra_lat = 2e-6, .inter_bw = 1.3e9, .inter_lat = 2e-6, .host_bw = 43e9,
     .cpu_mem_bytes = 24.0 * 1073741824.0, .cpu_mem_bw = 43e9, .cpu_flops = 210e9,
     .nvme_bytes = 85e9, .nvme_bw = 1e9},
};
#define NPRESETS ((int)(sizeof presets / sizeof presets[0]))

const char *par_cluster_preset_name(int i) {
  return i >= 0 && i < NPRESETS ? presets[i].name : NULL;
}

int par_cluster_preset(const char *name, par_cluster_t *out, char *why, size_t n) {
  if (why && n) why[0] = '\0';
  if (!name || !out) {
    if (why && n) snprintf(why, n, "cluster name or output is NULL");
    return STRATA_EINVAL;
  }
  for (int i = 0; i < NPRESETS; i++)
    if (!strcmp(presets[i].name, name)) {
      *out = presets[i];
      return STRATA_OK;
    }
  if (why && n) {
    size_t k = (size_t)snprintf(why, n, "unknown cluster '%s'; known:", name);
    for (int i = 0; i < NPRESETS && k < n; i++)
      k += (size_t)snprintf(why + k, n - k, " %s", presets[i].name);
  }
  return STRATA_ENOTFOUND;
}

int par_cluster_validate(const par_cluster_t *c, char *why, size_t n) {
  if (why && n) why[0] = '\0';
  if (!c) {
    if (why && n) snprintf(why, n, "cluster is NULL");
    return STRATA_EINVAL;
  }
  if (c->nodes < 1 || c->gpus_per_node < 1) {
    if (why && n)
      snprintf(why, n, "cluster '%s': nodes %d and gpus_per_node %d must be >= 1", c->name,
               c->nodes, c->gpus_per_node);
    return STRATA_EINVAL;
  }
  const struct {
    const char *key;
    double v;
    int zero_ok;
  } f[] = {{"gpu_mem_bytes", c->gpu_mem_bytes, 0}, {"gpu_mem_bw", c->gpu_mem_bw, 0},
           {"peak_flops.fp32", c->peak_flops[0], 0}, {"peak_flops.bf16", c->peak_flops[1], 1},
           {"peak_flops.fp16", c->peak_flops[2], 1}, {"intra_bw", c->intra_bw, 0},
           {"intra_lat", c->intra_lat, 1},          {"inter_bw", c->inter_bw, 0},
           {"inter_lat", c->inter_lat, 1},          {"host_bw", c->host_bw, 0},
           {"cpu_mem_bytes", c->cpu_mem_bytes, 0},  {"cpu_mem_bw", c->cpu_mem_bw, 0},
           {"cpu_flops", c->cpu_flops, 0},          {"nvme_bytes", c->nvme_bytes, 1},
           {"nvme_bw", c->nvme_bw, 1}};
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
    double v = f[i].v;
    if (!isfinite(v) || v < 0 || (!f[i].zero_ok && v == 0)) {
      if (why && n)
        snprintf(why, n, "cluster '%s': %s = %s must be %s and finite", c->name, f[i].key, par_num(v).s,
                 f[i].zero_ok ? ">= 0" : "> 0");
      return STRATA_EINVAL;
    }
  }
  static const char *const prec[3] = {"fp32", "bf16", "fp16"};
  for (int i = 0; i < 3; i++) {
    double e = c->gemm_efficiency[i];
    int need = c->peak_flops[i] > 0;
    if (!isfinite(e) || e < 0 || e > 1 || (need && e == 0)) {
      if (why && n)
        snprintf(why, n, "cluster '%s': gemm_efficiency.%s = %s must be in %s (the fraction of peak_flops.%s "
                 "its matrix multiplies sustain)", c->name, prec[i], par_num(e).s, need ? "(0, 1]" : "[0, 1]",
                 prec[i]);
      return STRATA_EINVAL;
    }
  }
  return STRATA_OK;
}

int par_cluster_calibrate(par_cluster_t *c, par_precision_t prec, double gemm_flops) {
  if (!c || (int)prec < 0 || (int)prec > 2 || !isfinite(gemm_flops) || !(gemm_flops > 0)) return STRATA_EINVAL;
  /* A rate above the stated peak means the peak was low (a CPU's, measured
   * once on another machine): the peak becomes the rate. */
  if (gemm_flops > c->peak_flops[prec]) c->peak_flops[prec] = gemm_flops;
  c->gemm_efficiency[prec] = gemm_flops / c->peak_flops[prec];
  return STRATA_OK;
}
