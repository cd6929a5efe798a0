/* Will the run fit? Before the engine allocates anything it asks the
 * planner for the bytes per rank of this model and layout (strata's own GPT
 * and engine: no attention scores kept, no dropout, the engine's padded
 * shards) and compares them with what a rank has: the host memory the
 * kernel reports available on this node (and the cgroup's limit, when
 * lower) shared by the ranks on the node. A run that cannot fit is refused
 * with the largest categories and a layout that would fit, instead of
 * reaching the allocator or the out-of-memory killer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"

/* Bytes the kernel could give without swapping (MemAvailable), capped by the
 * cgroup v2 limit of this process when one is set; 0 if unknown. */
static double host_available(void) {
  double avail = 0;
  FILE *f = fopen("/proc/meminfo", "r");
  if (f) {
    char line[256];
    unsigned long long kb;
    while (fgets(line, sizeof line, f))
      if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) avail = (double)kb * 1024.0;
    fclose(f);
  }
  unsigned long long max = 0, cur = 0;
  FILE *m = fopen("/sys/fs/cgroup/memory.max", "r"),
       *c = fopen("/sys/fs/cgroup/memory.current", "r");
  if (m && c && fscanf(m, "%llu", &max) == 1 && fscanf(c, "%llu", &cur) == 1 && max > cur) {
    double room = (double)(max - cur);
    if (avail == 0 || room < avail) avail = room;
  }
  if (m) fclose(m);
  if (c) fclose(c);
  return avail;
}

/* The planner's bytes per rank for strata's engine (0 if it cannot say). */
static double predict(const par_gpt_config_t *mc, const par_layout_t *lay, int ranks,
                      par_plan_t *pl) {
  par_cluster_t cl;
  if (par_cluster_preset("this-machine", &cl, NULL, 0) != STRATA_OK) return 0;
  cl.nodes = 1, cl.gpus_per_node = ranks;
  cl.gpu_mem_bytes = 1e18; /* the host's memory is compared here, not a GPU's */
  par_plan_params_t pp;
  par_plan_params_engine(&pp);
  if (par_plan_estimate(mc, lay, &cl, &pp, pl) != STRATA_OK) return 0;
  double t = 0;
  for (int i = 0; i < PAR_MEM_COUNT; i++)
    t += pl->mem[i];
  return t;
}

static const char *gb(char *buf, double bytes) {
  snprintf(buf, 24, bytes >= 1e9 ? "%.1f GB" : "%.0f MB", bytes >= 1e9 ? bytes / 1e9 : bytes / 1e6);
  return buf;
}

int engine_check_fit(par_engine_t *e, const par_gpt_config_t *mc, const par_layout_t *lay) {
  double have = e->opts.memory_bytes;
  if (have < 0) return STRATA_OK; /* the caller turned the check off */
  /* On a GPU the model states and activations are the device's, which the
   * host's memory says nothing about; its allocator refuses what does not
   * fit (STRATA_ENOMEM naming the bytes). A given memory_bytes is compared. */
  if (have == 0 && e->device >= 0) return STRATA_OK;
  int local = 1;
  if (have == 0) {
    MPI_Comm node;
    MPI_Comm_split_type(e->world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_size(node, &local);
    double avail = host_available();
    /* the lowest figure of the node's ranks, so that all decide alike */
    MPI_Allreduce(MPI_IN_PLACE, &avail, 1, MPI_DOUBLE, MPI_MIN, node);
    MPI_Comm_free(&node);
    if (avail <= 0) return STRATA_OK; /* unknown: nothing to compare with */
    have = avail / local;
  }
  par_gpt_config_t m = *mc;
  par_layout_t l = *lay;
  par_plan_t pl;
  double need = predict(&m, &l, e->wsize, &pl);
  MPI_Allreduce(MPI_IN_PLACE, &have, 1, MPI_DOUBLE, MPI_MIN, e->world);
  e->node_bytes = have * local;
  if (need <= have || need == 0) return STRATA_OK;
  /* The largest categories, largest first. */
  static const char *names[] = {"parameters",  "gradients", "optimizer state",
                                "activations", "buffers",   "reserved"};
  int order[PAR_MEM_COUNT];
  for (int i = 0; i < PAR_MEM_COUNT; i++)
    order[i] = i;
  for (int i = 0; i < PAR_MEM_COUNT; i++)
    for (int j = i + 1; j < PAR_MEM_COUNT; j++)
      if (pl.mem[order[j]] > pl.mem[order[i]]) {
        int t = order[i];
        order[i] = order[j], order[j] = t;
      }
  char parts[256] = "", b1[24], b2[24], b3[24];
  size_t k = 0;
  for (int i = 0; i < 3 && pl.mem[order[i]] > 0; i++)
    k += (size_t)snprintf(parts + k, sizeof parts - k, "%s%s %s", i ? ", " : "", names[order[i]],
                          gb(b1, pl.mem[order[i]]));
  /* A layout that fits: a higher ZeRO stage, then recomputation, then
   * smaller microbatches (the global batch kept by accumulation). */
  char fix[256] = "";
  for (int z = lay->zero_stage + 1; z <= 3 && !fix[0]; z++) {
    l = *lay, l.zero_stage = z;
    double n = predict(&m, &l, e->wsize, &pl);
    if (n > 0 && n <= have) snprintf(fix, sizeof fix, "ZeRO stage %d (%s per rank)", z, gb(b1, n));
  }
  if (!fix[0] && !mc->recompute) {
    l = *lay, l.zero_stage = 3, m.recompute = 1;
    double n = predict(&m, &l, e->wsize, &pl);
    if (n > 0 && n <= have)
      snprintf(fix, sizeof fix, "ZeRO stage 3 with recomputation (%s per rank)", gb(b1, n));
  }
  m.recompute = 1;
  for (int mb = lay->microbatch / 2; mb >= 1 && !fix[0]; mb /= 2) {
    if ((lay->global_batch / lay->dp) % mb) continue;
    l = *lay, l.zero_stage = 3, l.microbatch = mb;
    double n = predict(&m, &l, e->wsize, &pl);
    if (n > 0 && n <= have)
      snprintf(fix, sizeof fix,
               "ZeRO stage 3 with recomputation and microbatches of %d (%s per rank)", mb,
               gb(b1, n));
  }
  if (!fix[0]) {
    /* the model states alone shard over the ranks: how many would do */
    double states = 16.0 * (double)par_gpt_param_count(mc);
    int ranks = (int)(states / (have > 0 ? have : 1)) + 1;
    snprintf(fix, sizeof fix,
             "none on %d rank%s: its model states alone (%s) need about %d ranks like this one "
             "under ZeRO-3",
             e->wsize, e->wsize > 1 ? "s" : "", gb(b1, states), ranks);
  }
  char share[96] = "";
  if (local > 1)
    snprintf(share, sizeof share, " (the node's available memory shared by its %d ranks)", local);
  return engine_fail(e, 1, STRATA_ENOMEM,
                     "memory: this model and layout need %s per rank (%s) but a rank has %s%s; a "
                     "layout that fits: %s",
                     gb(b2, need), parts, gb(b3, have), share, fix);
}

int par_engine_plan_ranks(const par_engine_t *e, int ranks, double *need, double *node_bytes) {
  if (!e || !need) return STRATA_EINVAL;
  par_layout_t l = e->layout;
  int model_ranks = l.tp * l.pp * l.sp;
  if (ranks < 1 || ranks % model_ranks || l.global_batch % (ranks / model_ranks * l.microbatch))
    return STRATA_EINVAL;
  l.dp = ranks / model_ranks;
  par_plan_t pl;
  *need = predict(&e->mc, &l, ranks, &pl);
  if (node_bytes) *node_bytes = e->node_bytes;
  return *need > 0 ? STRATA_OK : STRATA_EUNSUPPORTED;
}
