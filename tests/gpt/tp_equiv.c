/* Megatron tensor parallelism (1D) in the GPT model against the serial
 * model (mpirun -np 1, 2, 4: the tensor group is every rank):
 *  - each rank's parameters are exactly its slice of the serial model's
 *    (initialised by global index);
 *  - one forward and backward give the serial loss, and each rank's
 *    gradients equal the slice of the serial gradients;
 *  - libcomm's counters equal Megatron's volume: per block one allreduce of
 *    the (B, T, h) activations after the attention and one after the MLP in
 *    forward, and one each for the inputs' gradients in backward, 4 L B T h
 *    floats; the vocabulary-parallel embedding's sum and the head's input
 *    gradient, 2 B T h; the cross-entropy's target logits (B T) allreduced
 *    and log-sum-exps (B T per rank) gathered, never the logits; each sent
 *    2 (t - 1) / t (allreduce) or (t - 1) / t (all-gather) times by the ring;
 *  - 5 steps of plain SGD on the slices follow the serial run;
 *  - all of it again with Megatron's sequence parallelism, whose volumes
 *    are all-gathers and reduce-scatters of the same bytes.
 * Tolerance: the row-parallel layers sum t partial products where the
 * serial GEMM sums one, and the f operator sums the inputs' gradients: fp32
 * reordering, 6e-8 relative per operation over sums of up to 4h terms. The
 * loss agrees to about 1e-7 (bound 1e-6 relative); a gradient view to about
 * 1e-6 of its largest element (bound 1e-5); after 5 SGD steps the loss to
 * 1e-5 relative. A missing or doubled allreduce, a wrong slice or a bias
 * added t times is off by the size of the values themselves. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <strata/comm.h>
#include <strata/par_gpt.h>

#include "gpt/tp_slice.h"

static int rank, ranks, fails;
#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "tp_equiv np=%d rank %d line %d: ", ranks, rank, __LINE__);                  \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
      fails++;                                                                                     \
    }                                                                                              \
  } while (0)

static void run(const par_gpt_config_t *c, comm_t *tp, int seqp) {
  const int B = 2, T = c->seq;
  par_gpt_options_t so = PAR_GPT_OPTIONS_DEFAULTS, to = PAR_GPT_OPTIONS_DEFAULTS;
  so.threads = to.threads = 1;
  to.tp = tp, to.seq_parallel = seqp;
  par_gpt_t *s = NULL, *m = NULL;
  if (par_gpt_create_ex(&s, c, &so, 11) || par_gpt_create_ex(&m, c, &to, 11)) {
    fprintf(stderr, "tp_equiv: %s\n", par_gpt_create_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  int32_t *tok = malloc(sizeof(int32_t) * B * T), *tg = malloc(sizeof(int32_t) * B * T);
  for (int i = 0; i < B * T; i++) tok[i] = (i * 37 + 5) % c->vocab, tg[i] = (i * 11 + 3) % c->vocab;
  float *sp = par_gpt_params(s, NULL), *mp = par_gpt_params(m, NULL), *buf = malloc(sizeof(float) * par_gpt_param_count(c));
  int nv = par_gpt_num_views(m);
  /* 1. the slices */
  int same = 1;
  for (int i = 0; i < nv; i++) {
    const par_gpt_view_t *tv = par_gpt_view(m, i), *sv = par_gpt_view(s, i);
    tp_slice_view(tv, sp + sv->offset, buf, rank);
    same &= !memcmp(buf, mp + tv->offset, tv->numel * sizeof(float));
  }
  CHECK(same, "L%d h%d: the tensor-parallel parameters are not the serial model's slices", c->layers, c->hidden);
  /* 2. one forward and backward; 3. the volume */
  float ls, lm;
  comm_counters_reset(tp);
  par_gpt_zero_grad(s), par_gpt_zero_grad(m);
  if (par_gpt_forward(s, tok, tg, B, T, &ls) || par_gpt_backward(s) || par_gpt_forward(m, tok, tg, B, T, &lm) ||
      par_gpt_backward(m)) {
    CHECK(0, "step: %s / %s", par_gpt_last_error(s), par_gpt_last_error(m));
    goto done;
  }
  CHECK(fabs(ls - lm) <= 1e-6 * fabs(ls), "loss %.9g, serial %.9g", lm, ls);
  float *sg = par_gpt_grads(s, NULL), *mg = par_gpt_grads(m, NULL);
  double worst = 0;
  const char *wname = "";
  for (int i = 0; i < nv; i++) {
    const par_gpt_view_t *tv = par_gpt_view(m, i), *sv = par_gpt_view(s, i);
    tp_slice_view(tv, sg + sv->offset, buf, rank);
    double big = 0, d = 0;
    for (size_t k = 0; k < tv->numel; k++) {
      big = fmax(big, fabs(buf[k]));
      d = fmax(d, fabs((double)buf[k] - mg[tv->offset + k]));
    }
    if (big > 0 && d / big > worst) worst = d / big, wname = tv->name;
  }
  CHECK(worst <= 1e-5, "gradients: %s %.3g of its largest element apart", wname, worst);
  comm_counter_t n, g, rs;
  comm_counters(tp, COMM_K_ALLREDUCE, &n);
  comm_counters(tp, COMM_K_ALLGATHER, &g);
  comm_counters(tp, COMM_K_REDUCE_SCATTER, &rs);
  /* (4 L + 2) B T h floats allreduced (the blocks; the embedding's sum and
   * the head's input gradient) and B T target logits; B T log-sum-exps
   * gathered: never the logits. Sequence parallel: each of those B T h
   * allreduces an all-gather and a reduce-scatter of the same bytes, plus
   * the layernorm outputs gathered again in backward (2 L), and the
   * layernorms' token-partial gradients ((4 L + 2) h) allreduced. */
  double R = (double)B * T, f = (double)(ranks - 1) / ranks, RC = R * c->hidden, L = c->layers;
  double want = ranks == 1 ? 0 : seqp ? (R + (4 * L + 2) * c->hidden) * 4 * 2 * f : ((4 * L + 2) * RC + R) * 4 * 2 * f;
  double want_g = ranks == 1 ? 0 : (R * ranks + (seqp ? (6 * L + 2) * RC : 0)) * 4 * f;
  double want_rs = ranks == 1 || !seqp ? 0 : (4 * L + 2) * RC * 4 * f;
  CHECK(fabs((double)n.bytes_sent - want) <= 8.0 * c->layers + 8 && fabs((double)g.bytes_sent - want_g) <= 8 * L + 8 &&
            fabs((double)rs.bytes_sent - want_rs) <= 8 * L + 8,
        "seq-parallel %d: sent allreduce %llu bytes (want %.0f), all-gather %llu (%.0f), reduce-scatter %llu (%.0f)", seqp,
        (unsigned long long)n.bytes_sent, want, (unsigned long long)g.bytes_sent, want_g,
        (unsigned long long)rs.bytes_sent, want_rs);
  /* 4. SGD on the slices */
  float lr = 0.05f, l5s = 0, l5m = 0;
  size_t ns, nm;
  par_gpt_params(s, &ns), par_gpt_params(m, &nm);
  for (int step = 0; step < 5; step++) {
    for (size_t k = 0; k < ns; k++) sp[k] -= lr * sg[k];
    for (size_t k = 0; k < nm; k++) mp[k] -= lr * mg[k];
    par_gpt_zero_grad(s), par_gpt_zero_grad(m);
    if (par_gpt_forward(s, tok, tg, B, T, &l5s) || par_gpt_backward(s) || par_gpt_forward(m, tok, tg, B, T, &l5m) ||
        par_gpt_backward(m))
      break;
  }
  CHECK(fabs(l5s - l5m) <= 1e-5 * fabs(l5s), "after 5 SGD steps: loss %.9g, serial %.9g", l5m, l5s);
  if (rank == 0)
    printf("tp=%d%s L%d h%d heads %d: slices equal; loss %.7f (serial %.7f), gradients within %.2g of their "
           "largest element; allreduce %llu bytes, all-gather %llu (Megatron's volumes); after 5 SGD steps %.7f (serial %.7f)\n",
           ranks, seqp ? " seq-parallel" : "", c->layers, c->hidden, c->heads, lm, ls, worst, (unsigned long long)n.bytes_sent,
           (unsigned long long)g.bytes_sent, l5m, l5s);
done:
  par_gpt_destroy(s), par_gpt_destroy(m);
  free(tok), free(tg), free(buf);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  comm_t *tp = NULL;
  if (comm_from_mpi(&tp, MPI_COMM_WORLD, NULL)) MPI_Abort(MPI_COMM_WORLD, 1);
  par_gpt_config_t a = {.layers = 2, .hidden = 32, .heads = 4, .seq = 16, .vocab = 96};
  par_gpt_config_t b = {.layers = 1, .hidden = 48, .heads = 8, .seq = 8, .vocab = 48, .recompute = 1};
  for (int sp = 0; sp <= 1; sp++) {
    run(&a, tp, sp);
    run(&b, tp, sp);
  }
  /* heads that do not divide */
  par_gpt_config_t bad = {.layers = 1, .hidden = 24, .heads = 3, .seq = 8, .vocab = 48};
  par_gpt_options_t o = PAR_GPT_OPTIONS_DEFAULTS;
  o.tp = tp;
  par_gpt_t *m = NULL;
  if (ranks > 1 && ranks != 3)
    CHECK(par_gpt_create_ex(&m, &bad, &o, 1) == STRATA_EINVAL && strstr(par_gpt_create_error(), "3 heads do not divide"),
          "%s", par_gpt_create_error());
  par_gpt_config_t badv = {.layers = 1, .hidden = 24, .heads = 4, .seq = 8, .vocab = 50};
  if (ranks == 4)
    CHECK(par_gpt_create_ex(&m, &badv, &o, 1) == STRATA_EINVAL &&
              strstr(par_gpt_create_error(), "a vocabulary of 50 does not divide over a tensor-parallel group of 4"),
          "%s", par_gpt_create_error());
  comm_destroy(tp);
  int all = 0;
  MPI_Allreduce(&fails, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("tp_equiv np=%d: %s\n", ranks, all ? "FAILED" : "ok");
  MPI_Finalize();
  return all ? 1 : 0;
}
