/* The `strata plan` report: one estimate as a table, or the top layouts of
 * a search with the reasons the others were rejected. */
#include <stdio.h>
#include <string.h>

#include "plan_internal.h"

static const char *prec_name[] = {"fp32", "bf16", "fp16"};
static const char *tier_name[] = {"device", "cpu", "nvme"};
static const char *sched_name[] = {"gpipe", "1f1b", "interleaved"};

const char *plan_mode_name(par_tp_mode_t m) {
  static const char *n[] = {"1d", "2d", "2.5d", "3d"};
  return (int)m >= 0 && (int)m < 4 ? n[m] : "?";
}

static void print_layout(FILE *f, const par_layout_t *l) {
  fprintf(f, "dp %d x tp %d (%s", l->dp, l->tp, plan_mode_name(l->tp_mode));
  if (l->tp_mode == PAR_TP_2P5D) fprintf(f, ", depth %d", l->tp_depth);
  fprintf(f, ") x pp %d x sp %d, ZeRO %d, microbatch %d, global batch %d, %s", l->pp, l->sp,
          l->zero_stage, l->microbatch, l->global_batch, sched_name[l->schedule]);
  if (l->schedule == PAR_SCHED_INTERLEAVED) fprintf(f, " x%d", l->interleave);
  fprintf(f, ", %s", prec_name[l->precision]);
  if (l->offload_optimizer || l->offload_gradients || l->offload_params)
    fprintf(f, ", offload optimizer:%s gradients:%s params:%s", tier_name[l->offload_optimizer],
            tier_name[l->offload_gradients], tier_name[l->offload_params]);
}

int par_plan_print(FILE *f, const par_gpt_config_t *m, const par_layout_t *l,
                   const par_cluster_t *c, const par_plan_t *r) {
  if (!f || !m || !l || !c || !r) return STRATA_EINVAL;
  fprintf(f, "model    GPT %d layers, hidden %d, %d heads, sequence %d, vocabulary %d, recompute %s\n",
          m->layers, m->hidden, m->heads, m->seq, m->vocab, m->recompute ? "on" : "off");
  fprintf(f, "         %.4g parameters (tied embeddings; Megatron's formula: %.4g)\n",
          par_plan_param_count(m), par_megatron_param_count(m));
  fprintf(f, "layout   ");
  print_layout(f, l);
  /* (this machine's preset stands for its CPU: devices, and a peak below 1 TFLOP/s printed as such) */
  int cpu = !strcmp(c->name, "this-machine");
  fprintf(f, "\ncluster  %s: %d node%s x %d %s, %.0f GB each, %.3g TFLOP/s %s peak\n", c->name, c->nodes,
          c->nodes == 1 ? "" : "s", c->gpus_per_node,
          cpu ? (c->gpus_per_node == 1 ? "CPU device" : "CPU devices") : c->gpus_per_node == 1 ? "GPU" : "GPUs",
          c->gpu_mem_bytes / 1e9,
          (int)l->precision >= 0 && (int)l->precision < 3 ? c->peak_flops[l->precision] / 1e12 : 0.0,
          (int)l->precision >= 0 && (int)l->precision < 3 ? prec_name[l->precision] : "?");
  if (!r->valid) {
    fprintf(f, "invalid  %s\n", r->why);
    return STRATA_OK;
  }
  static const char *mem[] = {"parameters", "gradients", "optimizer states", "activations",
                              "buffers", "reserved"};
  fprintf(f, "\nmemory per device (largest stage)    GB\n");
  for (int i = 0; i < PAR_MEM_COUNT; i++) fprintf(f, "  %-28s %10.2f\n", mem[i], r->mem[i] / 1e9);
  fprintf(f, "  %-28s %10.2f of %.2f: %s\n", "total", r->mem_total / 1e9, c->gpu_mem_bytes / 1e9,
          r->fits ? "fits" : "does not fit");
  if (r->cpu_bytes_node > 0) fprintf(f, "  %-28s %10.2f\n", "host per node", r->cpu_bytes_node / 1e9);
  if (r->nvme_bytes_node > 0) fprintf(f, "  %-28s %10.2f\n", "NVMe per node", r->nvme_bytes_node / 1e9);
  if (!r->fits) fprintf(f, "  why: %s\n", r->why);
  static const char *tn[] = {"compute (matmuls)", "memory-bound kernels", "pipeline bubble",
                             "tensor parallel", "sequence parallel", "pipeline send/recv",
                             "data parallel (exposed)", "ZeRO-3 gathers (exposed)",
                             "offload (exposed)", "optimizer step"};
  fprintf(f, "\ntime per step                          s        %%   GB sent\n");
  for (int i = 0; i < PAR_T_COUNT; i++) {
    if (r->time[i] == 0 && r->comm_bytes[i] == 0) continue;
    fprintf(f, "  %-28s %10.4f %6.1f %9.2f\n", tn[i], r->time[i], 100 * r->time[i] / r->step_time,
            r->comm_bytes[i] / 1e9);
  }
  fprintf(f, "  %-28s %10.4f  (%d microbatches, bubble %.1f%%)\n", "step", r->step_time,
          r->microbatches, 100 * r->bubble_fraction);
  fprintf(f, "\nthroughput  %.3g TFLOP/s per %s, MFU %.1f%%, %.4g tokens/s, %.1f days for the token budget\n",
          r->tflops_per_gpu, cpu ? "device" : "GPU", 100 * r->mfu, r->tokens_per_s, r->days);
  return STRATA_OK;
}

static void entry_line(FILE *f, size_t i, const par_plan_entry_t *e) {
  const par_layout_t *l = &e->layout;
  char mode[16];
  if (l->tp_mode == PAR_TP_2P5D) snprintf(mode, sizeof mode, "2.5d/%d", l->tp_depth);
  else snprintf(mode, sizeof mode, "%s", plan_mode_name(l->tp_mode));
  fprintf(f, "%4zu %5d %5d %-6s %4d %3d %4d %4d %6s %-4s", i + 1, l->dp, l->tp, mode, l->pp, l->sp,
          l->zero_stage, l->microbatch, e->recompute ? "on" : "off",
          l->offload_optimizer ? "cpu" : "-");
}

int par_plan_search_print(FILE *f, const par_plan_entry_t *e, size_t count, size_t top) {
  if (!f || (count && !e)) return STRATA_EINVAL;
  const char *head = "   #    dp    tp mode     pp  sp zero   mb recomp off ";
  fprintf(f, "%s   mem GB   step s  TFLOP/s   MFU  tokens/s\n", head);
  size_t shown = 0, fitting = 0;
  for (size_t i = 0; i < count; i++)
    if (e[i].plan.fits) fitting++;
  for (size_t i = 0; i < count && shown < top; i++) {
    if (!e[i].plan.fits) continue;
    entry_line(f, i, &e[i]);
    fprintf(f, " %8.2f %8.4f %8.1f %5.1f%% %9.4g\n", e[i].plan.mem_total / 1e9, e[i].plan.step_time,
            e[i].plan.tflops_per_gpu, 100 * e[i].plan.mfu, e[i].plan.tokens_per_s);
    shown++;
  }
  fprintf(f, "%zu of %zu layouts fit", fitting, count);
  if (count > fitting) fprintf(f, "; rejected:\n");
  else fprintf(f, "\n");
  /* One line per distinct reason (the first layout that gave it), in rank
   * order: too big before invalid. */
  enum { MAXR = 64 };
  const char *printed[MAXR];
  shown = 0;
  for (size_t i = 0; i < count && shown < top && shown < MAXR; i++) {
    if (e[i].plan.fits) continue;
    int seen = 0;
    for (size_t j = 0; j < shown && !seen; j++) seen = !strcmp(printed[j], e[i].plan.why);
    if (seen) continue;
    printed[shown] = e[i].plan.why;
    size_t same = 0;
    for (size_t j = i; j < count; j++)
      if (!e[j].plan.fits && !strcmp(e[j].plan.why, e[i].plan.why)) same++;
    entry_line(f, i, &e[i]);
    fprintf(f, "  %s", e[i].plan.why);
    if (same > 1) fprintf(f, " (%zu layouts)", same);
    fprintf(f, "\n");
    shown++;
  }
  return STRATA_OK;
}
