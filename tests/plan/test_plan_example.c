/* The usage example of docs/planner.md, kept compiling and running here. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

#include <strata/parallel.h>

/* --- example begins (docs/planner.md) --- */
static int plan_example(FILE *out) {
  /* Megatron's 18.4B row: 40 x 6144, 48 heads, on 32 DGX A100 80 GB nodes. */
  par_gpt_config_t model = {.layers = 40, .hidden = 6144, .heads = 48, .seq = 2048,
                            .vocab = 51200, .recompute = 1};
  par_cluster_t cluster;
  char why[256];
  int rc = par_cluster_preset("dgx-a100-80gb", &cluster, why, sizeof why);
  if (rc) return rc;
  cluster.nodes = 32;

  par_layout_t layout = PAR_LAYOUT_DEFAULTS;
  layout.dp = 32;
  layout.tp = 8;
  layout.global_batch = 1024;
  layout.precision = PAR_PREC_FP16;
  par_plan_t plan;
  rc = par_plan_estimate(&model, &layout, &cluster, NULL, &plan); /* NULL: default parameters */
  if (rc) {
    fprintf(out, "invalid layout: %s\n", plan.why);
    return rc;
  }
  par_plan_print(out, &model, &layout, &cluster, &plan);

  /* Or let the planner search every layout of the 256 GPUs. */
  par_search_opts_t opts = PAR_SEARCH_OPTS_DEFAULTS;
  opts.global_batch = 1024;
  opts.precisions = 1 << PAR_PREC_FP16; /* fixed; 0: the cluster's default, bf16 on A100 */
  size_t total = 0;
  rc = par_plan_search(&model, &cluster, NULL, &opts, NULL, 0, &total);
  if (rc) return rc;
  par_plan_entry_t *all = malloc(total * sizeof *all);
  if (!all) return STRATA_ENOMEM;
  rc = par_plan_search(&model, &cluster, NULL, &opts, all, total, &total);
  if (!rc) par_plan_search_print(out, all, total, 5);
  free(all);
  return rc;
}
/* --- example ends --- */

Test(example, docs_example_runs) {
  FILE *f = tmpfile();
  cr_assert(f);
  cr_expect_eq(plan_example(f), 0);
  fclose(f);
}
