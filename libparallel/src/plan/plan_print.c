/* The `strata plan` report: one estimate as a table, or the top layouts of
 * a search with the reasons the others were rejected. */
#include <stdio.h>
#include <stdlib.h>
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
  if (l->precision == PAR_PREC_FP32)
    fprintf(f, "\nprecision fp32: parameters, gradients and Adam moments in fp32");
  else if ((int)l->precision > 0 && (int)l->precision < 3)
    fprintf(f, "\nprecision %s mixed: %s parameters and gradients, fp32 master weights and Adam moments",
            prec_name[l->precision], prec_name[l->precision]);
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
  char mode[16], sched[16];
  if (l->tp_mode == PAR_TP_2P5D) snprintf(mode, sizeof mode, "2.5d/%d", l->tp_depth);
  else snprintf(mode, sizeof mode, "%s", plan_mode_name(l->tp_mode));
  if (l->pp == 1) snprintf(sched, sizeof sched, "-");
  else if (l->schedule == PAR_SCHED_INTERLEAVED) snprintf(sched, sizeof sched, "int/%d", l->interleave);
  else if ((int)l->schedule >= 0 && (int)l->schedule < 3) snprintf(sched, sizeof sched, "%s", sched_name[l->schedule]);
  else snprintf(sched, sizeof sched, "?");
  fprintf(f, "%4zu %5d %5d %-6s %4d %3d %4d %4d %6s %-4s %-4s %-6s", i + 1, l->dp, l->tp, mode, l->pp, l->sp,
          l->zero_stage, l->microbatch, e->recompute ? "on" : "off", l->offload_optimizer ? "cpu" : "-",
          (int)l->precision >= 0 && (int)l->precision < 3 ? prec_name[l->precision] : "?", sched);
}

int par_plan_search_print(FILE *f, const par_plan_entry_t *e, size_t count, size_t top) {
  if (!f || (count && !e)) return STRATA_EINVAL;
  const char *head = "   #    dp    tp mode     pp  sp zero   mb recomp off  prec sched ";
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
  if (count == fitting) {
    fprintf(f, "\n");
    return STRATA_OK;
  }
  /* Every cause (too big before invalid, the most common first), with the
   * first layout it rejected and that layout's own reason. */
  size_t nc = 0;
  int rc = par_plan_search_causes(e, count, NULL, 0, &nc);
  par_plan_cause_t *c = rc ? NULL : malloc((nc ? nc : 1) * sizeof *c);
  if (!c) return rc ? rc : STRATA_ENOMEM;
  par_plan_search_causes(e, count, c, nc, &nc);
  fprintf(f, "; %zu rejected for %zu cause%s:\n  layouts  cause, as the first layout it rejected gives it\n",
          count - fitting, nc, nc == 1 ? "" : "s");
  for (size_t k = 0; k < nc; k++) {
    const par_plan_entry_t *x = &e[c[k].first];
    const par_layout_t *l = &x->layout;
    fprintf(f, "%9zu  %s\n           #%zu: dp %d x tp %d (%s", c[k].count, x->plan.why, c[k].first + 1, l->dp,
            l->tp, plan_mode_name(l->tp_mode));
    if (l->tp_mode == PAR_TP_2P5D) fprintf(f, ", depth %d", l->tp_depth);
    fprintf(f, ") x pp %d x sp %d, ZeRO %d, microbatch %d, recompute %s, %s", l->pp, l->sp, l->zero_stage,
            l->microbatch, x->recompute ? "on" : "off",
            (int)l->precision >= 0 && (int)l->precision < 3 ? prec_name[l->precision] : "?");
    if (l->pp > 1 && (int)l->schedule >= 0 && (int)l->schedule < 3)
      fprintf(f, ", %s", sched_name[l->schedule]);
    if (l->pp > 1 && l->schedule == PAR_SCHED_INTERLEAVED) fprintf(f, " x%d", l->interleave);
    if (l->offload_optimizer) fprintf(f, ", optimizer offloaded to the CPU");
    fprintf(f, "\n");
  }
  free(c);
  return STRATA_OK;
}
