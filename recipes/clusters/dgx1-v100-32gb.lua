-- NVIDIA DGX-1 (V100 SXM2 32 GB): 8 GPUs, NVLink hybrid cube mesh, 4 x EDR InfiniBand,
-- two Xeon E5-2698 v4, 512 GB DDR4. The ZeRO-Offload and PatrickStar experiments.
-- The same table as par_cluster_preset("dgx1-v100-32gb") in libparallel/src/plan_cluster.c
-- (tests/plan checks they agree). Nominal vendor figures; the planner applies its
-- achievable fractions (docs/planner.md). Set nodes in the recipe.
return {
  name = "dgx1-v100-32gb",
  nodes = 1, -- nodes in the cluster
  gpus_per_node = 8,
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
  inter_bw = 50000000000, -- bytes/s per node, all NICs together, one direction
  inter_lat = 1e-05, -- seconds per inter-node message
  host_bw = 16000000000, -- bytes/s per GPU between host and device (PCIe)
  cpu_mem_bytes = 512000000000, -- host memory per node, bytes
  cpu_mem_bw = 153600000000, -- host memory bandwidth per node, bytes/s
  cpu_flops = 2.8e+12, -- fp32 FLOP/s of a node's CPUs (CPU optimizer)
  nvme_bytes = 7.68e+12, -- NVMe capacity per node, bytes
  nvme_bw = 4000000000, -- NVMe bandwidth per node, bytes/s
}
