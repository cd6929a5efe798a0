-- NVIDIA DGX A100 40 GB: 8 GPUs on NVSwitch (NVLink 3), 8 x HDR InfiniBand,
-- two EPYC 7742, 1 TB DDR4, 15 TB NVMe.
-- The same table as par_cluster_preset("dgx-a100-40gb") in libparallel/src/plan_cluster.c
-- (tests/plan checks they agree). Nominal vendor figures; the planner applies its
-- achievable fractions (docs/planner.md). Set nodes in the recipe.
return {
  name = "dgx-a100-40gb",
  nodes = 1, -- nodes in the cluster
  gpus_per_node = 8,
  gpu_mem_bytes = 40000000000, -- bytes per GPU
  gpu_mem_bw = 1.555e+12, -- bytes/s per GPU (HBM)
  peak_flops = { -- dense FLOP/s per GPU by precision (0: not supported)
    fp32 = 1.95e+13,
    bf16 = 3.12e+14,
    fp16 = 3.12e+14,
  },
  gemm_efficiency = { -- the fraction of each peak its own large matmuls sustain (source: plan_cluster.c)
    fp32 = 0.8587,
    bf16 = 0.8587,
    fp16 = 0.8587,
  },
  intra_bw = 300000000000, -- bytes/s per GPU to GPUs of its node, one direction
  intra_lat = 5e-06, -- seconds per intra-node message
  inter_bw = 200000000000, -- bytes/s per node, all NICs together, one direction
  inter_lat = 1e-05, -- seconds per inter-node message
  host_bw = 32000000000, -- bytes/s per GPU between host and device (PCIe)
  cpu_mem_bytes = 1e+12, -- host memory per node, bytes
  cpu_mem_bw = 409600000000, -- host memory bandwidth per node, bytes/s
  cpu_flops = 9.2e+12, -- fp32 FLOP/s of a node's CPUs (CPU optimizer)
  nvme_bytes = 1.536e+13, -- NVMe capacity per node, bytes
  nvme_bw = 25000000000, -- NVMe bandwidth per node, bytes/s
}
