/* The GPU benchmarks' table peak: a device's dense bf16 tensor-core FLOP/s
 * (f32 accumulation) from its vendor's spec sheet, by the name
 * cudaGetDeviceProperties reports, for model FLOPs utilisation (MFU) as
 * PaLM (Chowdhery et al., arXiv 2204.02311, appendix B) defines it. The
 * sheets quote the sparse rate beside the dense one; these are the dense:
 * - H100 SXM5 989.4 and H100 PCIe 756.5 TFLOP/s: NVIDIA H100 Tensor Core GPU
 *   datasheet (BF16 Tensor Core 1,979 / 1,513 TFLOPS "with sparsity");
 * - H200 989 TFLOP/s: NVIDIA H200 Tensor Core GPU datasheet (SXM, 1,979
 *   with sparsity);
 * - A100 312 TFLOP/s (SXM4 and PCIe, 40 and 80 GB): NVIDIA A100 Tensor Core
 *   GPU datasheet (BF16 Tensor Core 312 | 624 with sparsity);
 * - L40S 362 TFLOP/s: NVIDIA L40S datasheet (BF16 Tensor Core 362.05 | 733);
 * - GeForce RTX 4090 165.2 TFLOP/s: NVIDIA Ada Lovelace architecture
 *   whitepaper, appendix A (FP16/BF16 tensor with FP32 accumulate).
 * Another device (H100 NVL, H200 NVL, ...) has no entry: 0, and the
 * benchmark reports MFU against the measured cuBLAS peak only. */
#ifndef STRATA_BENCH_GPU_PEAK_H
#define STRATA_BENCH_GPU_PEAK_H

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>

/* The table peak in FLOP/s of `device` (0: not in the table); its name into name[len]. */
static double gpu_table_peak(int device, char *name, size_t len) {
  struct cudaDeviceProp p;
  snprintf(name, len, "unknown device");
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess) return 0;
  snprintf(name, len, "%s", p.name);
  const char *n = p.name;
  if (strstr(n, "NVL")) return 0; /* H100 NVL, H200 NVL: other clocks and power */
  if (strstr(n, "H100")) return strstr(n, "PCIe") ? 756.5e12 : 989.4e12;
  if (strstr(n, "H200")) return 989.4e12;
  if (strstr(n, "A100")) return 312e12;
  if (strstr(n, "L40S")) return 362.05e12;
  if (strstr(n, "RTX 4090")) return 165.2e12;
  return 0;
}

#endif
