-- This machine (strata's CI): 2 vCPU AMD EPYC, AVX2 + FMA, 24 GiB, no GPU; the CPU backend
-- is the one device. Figures measured here (shared/TOOLCHAIN.md).
-- The same table as par_cluster_preset("this-machine") in libparallel/src/plan_cluster.c
-- (tests/plan checks they agree). Nominal vendor figures; the planner applies its
-- achievable fractions (docs/planner.md). Set nodes in the recipe.
return {
  name = "this-machine",
  nodes = 1, -- nodes in the cluster
  gpus_per_node = 1,
  gpu_mem_bytes = 25769803776, -- bytes per GPU
  gpu_mem_bw = 43000000000, -- bytes/s per GPU (HBM)
  peak_flops = { -- dense FLOP/s per GPU by precision (0: not supported)
    fp32 = 210000000000,
    bf16 = 210000000000,
    fp16 = 210000000000,
  },
  gemm_efficiency = { -- the fraction of each peak its own large matmuls sustain (source: plan_cluster.c)
    fp32 = 1,
    bf16 = 1,
    fp16 = 1,
  },
  intra_bw = 1300000000, -- bytes/s per GPU to GPUs of its node, one direction
  intra_lat = 2e-06, -- seconds per intra-node message
  inter_bw = 1300000000, -- bytes/s per node, all NICs together, one direction
  inter_lat = 2e-06, -- seconds per inter-node message
  host_bw = 43000000000, -- bytes/s per GPU between host and device (PCIe)
  cpu_mem_bytes = 25769803776, -- host memory per node, bytes
  cpu_mem_bw = 43000000000, -- host memory bandwidth per node, bytes/s
  cpu_flops = 210000000000, -- fp32 FLOP/s of a node's CPUs (CPU optimizer)
  nvme_bytes = 85000000000, -- NVMe capacity per node, bytes
  nvme_bw = 1000000000, -- NVMe bandwidth per node, bytes/s
}
