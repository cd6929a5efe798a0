-- NVIDIA DGX H100: 8 H100 SXM 80 GB, NVLink 4, 8 x NDR InfiniBand, two Xeon 8480C, 2 TB DDR5.
-- The same table as par_cluster_preset("dgx-h100") in libparallel/src/plan_cluster.c
-- (tests/plan checks they agree). Nominal vendor figures; the planner applies its
-- achievable fractions (docs/planner.md). Set nodes in the recipe.
return {
  name = "dgx-h100",
  nodes = 1, -- nodes in the cluster
  gpus_per_node = 8,
  gpu_mem_bytes = 80000000000, -- bytes per GPU
  gpu_mem_bw = 3.35e+12, -- bytes/s per GPU (HBM)
  peak_flops = { -- dense FLOP/s per GPU by precision (0: not supported)
    fp32 = 6.7e+13,
    bf16 = 9.89e+14,
    fp16 = 9.89e+14,
  },
  gemm_efficiency = { -- the fraction of each peak its own large matmuls sustain (source: plan_cluster.c)
    fp32 = 0.8009,
    bf16 = 0.8009,
    fp16 = 0.8009,
  },
  intra_bw = 450000000000, -- bytes/s per GPU to GPUs of its node, one direction
  intra_lat = 3e-06, -- seconds per intra-node message
  inter_bw = 400000000000, -- bytes/s per node, all NICs together, one direction
  inter_lat = 8e-06, -- seconds per inter-node message
  host_bw = 64000000000, -- bytes/s per GPU between host and device (PCIe)
  cpu_mem_bytes = 2e+12, -- host memory per node, bytes
  cpu_mem_bw = 614000000000, -- host memory bandwidth per node, bytes/s
  cpu_flops = 1.43e+13, -- fp32 FLOP/s of a node's CPUs (CPU optimizer)
  nvme_bytes = 3.072e+13, -- NVMe capacity per node, bytes
  nvme_bw = 50000000000, -- NVMe bandwidth per node, bytes/s
}
