/* The GPU benchmarks' table peak: a device's dense bf16 tensor-core FLOP/s
 * (f32 accumulation) from its vendor's spec sheet, for model FLOPs
 * utilisation (MFU); the table and its sources are libtensor's
 * (tensor_cuda_table_peak in strata/tensor.h), which the runner's progress
 * line uses too. A device without an entry (H100 NVL, H200 NVL, ...): 0,
 * and the benchmark reports MFU against the measured cuBLAS peak only. */
#ifndef STRATA_BENCH_GPU_PEAK_H
#define STRATA_BENCH_GPU_PEAK_H

#include <stdio.h>
#include <strata/tensor.h>

/* The table peak in FLOP/s of `device` (0: not in the table); its name into name[len]. */
static double gpu_table_peak(int device, char *name, size_t len) {
  if (tensor_cuda_device_name(device, name, len) != STRATA_OK) {
    snprintf(name, len, "unknown device");
    return 0;
  }
  return tensor_cuda_table_peak(name);
}

#endif
