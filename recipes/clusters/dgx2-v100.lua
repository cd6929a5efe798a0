-- NVIDIA DGX-2 (V100 SXM3 32 GB): 16 GPUs on NVSwitch, 8 x EDR InfiniBand,
-- two Xeon Platinum 8168, 1.5 TB DDR4, 30 TB NVMe. ZeRO and ZeRO-Offload's machine.
-- The same table as par_cluster_preset("dgx2-v100") in libparallel/src/plan_cluster.c
-- (tests/plan checks they agree). Nominal vendor figures; the planner applies its
-- achievable fractions (docs/planner.md). Set nodes in the recipe.
return {
  name = "dgx2-v100",
  nodes = 1, -- nodes in the cluster
  gpus_per_node = 16,
  gpu_mem_bytes = 32000000000, -- bytes per GPU
  gpu_mem_bw = 900000000000, -- bytes/s per GPU (HBM)
  peak_flops = { -- dense FLOP/s per GPU by precision (0: not supported)
    fp32 = 1.57e+13,
    bf16 = 0,
    fp16 = 1.25e+14,
  },
  gemm_efficiency = { -- the fraction of each peak its own large matmuls sustain (source: plan_cluster.c)
    fp32 = 0.755,
    bf16 = 0,
    fp16 = 0.664,
  },
  intra_bw = 150000000000, -- bytes/s per GPU to GPUs of its node, one direction
  intra_lat = 5e-06, -- seconds per intra-node message
  inter_bw = 100000000000, -- bytes/s per node, all NICs together, one direction
  inter_lat = 1e-05, -- seconds per inter-node message
  host_bw = 16000000000, -- bytes/s per GPU between host and device (PCIe)
  cpu_mem_bytes = 1.5e+12, -- host memory per node, bytes
  cpu_mem_bw = 256000000000, -- host memory bandwidth per node, bytes/s
  cpu_flops = 8.3e+12, -- fp32 FLOP/s of a node's CPUs (CPU optimizer)
  nvme_bytes = 3.072e+13, -- NVMe capacity per node, bytes
  nvme_bw = 25000000000, -- NVMe bandwidth per node, bytes/s
}
