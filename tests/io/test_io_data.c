/* Data: the Markov source against closed forms and its own sample, the file
 * readers against files written here, and the batch order. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <strata/parallel.h>

static char dir[64];
static void mkdir_tmp(void) {
  strcpy(dir, "/tmp/strata-io-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
}
static void rm_tmp(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  cr_assert_eq(system(cmd), 0);
}
static const char *tmp(const char *name) {
  static char buf[4][160];
  static int k;
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
  return buf[k];
}
static void write_file(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  cr_assert_not_null(f);
  if (n) cr_assert_eq(fwrite(p, 1, n, f), n);
  fclose(f);
}

TestSuite(markov);

/* Uniform rows (skew 0): every row has entropy ln(fanout), so the rate is
 * ln(fanout) whatever pi is; only rounding separates them (1e-12). */
Test(markov, uniform_rows_have_entropy_ln_fanout) {
  for (int k = 1; k <= 32; k *= 2) {
    par_markov_t *m = NULL;
    par_markov_options_t o = {.seed = 7, .fanout = k, .skew = 0};
    cr_assert_eq(par_markov_create(&o, &m, NULL, 0), STRATA_OK);
    cr_assert_float_eq(par_markov_entropy_rate(m), log((double)k), 1e-12, "fanout %d", k);
    par_markov_destroy(m);
  }
}

/* pi is a probability vector and a fixed point of P (checked with P read
 * back through par_markov_prob, not the power iteration). */
Test(markov, stationary_is_fixed_point) {
  par_markov_t *m = NULL;
  cr_assert_eq(par_markov_create(NULL, &m, NULL, 0), STRATA_OK);
  double sum = 0, worst = 0;
  for (int j = 0; j < 256; j++) {
    double row = 0, pj = 0;
    for (int i = 0; i < 256; i++) {
      pj += par_markov_stationary(m, i) * par_markov_prob(m, i, j);
      row += par_markov_prob(m, j, i);
    }
    cr_assert_float_eq(row, 1.0, 1e-12);
    worst = fmax(worst, fabs(pj - par_markov_stationary(m, j)));
    sum += par_markov_stationary(m, j);
  }
  cr_assert_float_eq(sum, 1.0, 1e-12);
  cr_assert_lt(worst, 1e-13, "max |pi P - pi| = %g", worst);
  par_markov_destroy(m);
}

/* The entropy rate is the limit of -1/n log p(x_1..x_n) (Shannon-McMillan-
 * Breiman). Over 8 sample paths of n = 4M bytes from this chain the mean
 * log-loss differed from H by 4e-4 nats (standard deviation), so 0.002 nats
 * is five standard deviations. Weighting the rows uniformly instead of by pi
 * moves H by 0.008 for this chain, which the test catches. */
Test(markov, sample_cross_entropy_approaches_rate) {
  par_markov_t *m = NULL;
  par_markov_options_t o = {.seed = 99, .fanout = 12, .skew = 1.5};
  cr_assert_eq(par_markov_create(&o, &m, NULL, 0), STRATA_OK);
  size_t n = (size_t)1 << 22;
  uint8_t *x = malloc(n);
  par_markov_generate(m, 5, n, x);
  double ce = 0;
  static double freq[256];
  for (size_t i = 1; i < n; i++) {
    double p = par_markov_prob(m, x[i - 1], x[i]);
    cr_assert_gt(p, 0, "transition %d -> %d has probability 0", x[i - 1], x[i]);
    ce -= log(p);
    freq[x[i]] += 1.0 / (double)(n - 1);
  }
  ce /= (double)(n - 1);
  double h = par_markov_entropy_rate(m);
  cr_assert_gt(h, 0.5);
  cr_assert_float_eq(ce, h, 0.002, "empirical %g vs rate %g", ce, h);
  /* Occupation frequencies approach pi (ergodic theorem); 0.003 is several
   * standard errors of a frequency near 1/256 over 4M correlated steps. */
  for (int s = 0; s < 256; s++)
    cr_assert_float_eq(freq[s], par_markov_stationary(m, s), 0.003, "state %d", s);
  free(x);
  par_markov_destroy(m);
}

Test(markov, seeded_and_checked) {
  par_markov_t *a = NULL, *b = NULL;
  cr_assert_eq(par_markov_create(NULL, &a, NULL, 0), STRATA_OK);
  cr_assert_eq(par_markov_create(NULL, &b, NULL, 0), STRATA_OK);
  uint8_t x[1000], y[1000], z[1000];
  par_markov_generate(a, 1, sizeof x, x);
  par_markov_generate(b, 1, sizeof y, y);
  par_markov_generate(b, 2, sizeof z, z);
  cr_assert_eq(memcmp(x, y, sizeof x), 0);
  cr_assert_neq(memcmp(x, z, sizeof x), 0);
  par_markov_destroy(a);
  par_markov_destroy(b);
  char err[200];
  par_markov_t *m = NULL;
  par_markov_options_t o = {.seed = 1, .fanout = 0, .skew = 1};
  cr_assert_eq(par_markov_create(&o, &m, err, sizeof err), STRATA_EINVAL);
  cr_assert_null(m);
  cr_assert_not_null(strstr(err, "fanout 0"), "%s", err);
}

TestSuite(data, .init = mkdir_tmp, .fini = rm_tmp);

/* A uint32 file whose token i is i identifies each sample by its first
 * input; an epoch must visit every window once, targets are inputs + 1. */
Test(data, epoch_is_a_permutation_of_windows) {
  const int T = 8, N = 1000;
  uint32_t *tok = malloc((size_t)(N * T + 1) * 4);
  for (int i = 0; i <= N * T; i++) tok[i] = (uint32_t)i;
  write_file(tmp("a.u32"), tok, (size_t)(N * T + 1) * 4);
  par_data_options_t o = PAR_DATA_DEFAULTS;
  o.format = PAR_DATA_AUTO, o.path = tmp("a.u32"), o.val_fraction = 0, o.seq = T, o.seed = 3;
  par_data_t *d = NULL;
  char err[256] = "";
  cr_assert_eq(par_data_open(&o, &d, err, sizeof err), STRATA_OK, "%s", err);
  cr_assert_eq(par_data_samples(d, PAR_SPLIT_TRAIN), (uint64_t)N);
  cr_assert_eq(par_data_vocab(d), N * T + 1);
  int32_t in[2][8 * 1000], tg[8 * 1000];
  char *seen = calloc(N, 1);
  cr_assert_eq(par_data_fill(d, PAR_SPLIT_TRAIN, 0, N, in[0], tg), STRATA_OK);
  int in_order = 0;
  for (int b = 0; b < N; b++) {
    int32_t s = in[0][b * T];
    cr_assert_eq(s % T, 0);
    cr_assert_eq(seen[s / T], 0, "window %d twice", s / T);
    seen[s / T] = 1;
    in_order += s / T == b;
    for (int t = 0; t < T; t++) {
      cr_assert_eq(in[0][b * T + t], s + t);
      cr_assert_eq(tg[b * T + t], s + t + 1);
    }
  }
  cr_assert_lt(in_order, 20, "%d of %d samples in file order: not shuffled", in_order, N);
  /* The next epoch is another order. */
  cr_assert_eq(par_data_fill(d, PAR_SPLIT_TRAIN, N, N, in[1], tg), STRATA_OK);
  cr_assert_neq(memcmp(in[0], in[1], sizeof in[0]), 0);
  par_data_destroy(d);
  free(seen);
  free(tok);
}

/* Ranks r = 0..R-1 at the same position together read exactly the samples
 * one rank reads with an R times larger batch, and positions advance by the
 * global batch: the data order does not depend on the data-parallel degree. */
Test(data, ranks_partition_the_global_batch) {
  par_data_options_t o = PAR_DATA_DEFAULTS;
  o.seq = 16, o.markov_tokens = 1 << 16;
  par_data_t *one = NULL, *r[3] = {0};
  cr_assert_eq(par_data_open(&o, &one, NULL, 0), STRATA_OK);
  for (int i = 0; i < 3; i++) cr_assert_eq(par_data_open(&o, &r[i], NULL, 0), STRATA_OK);
  int32_t big[6 * 16], bt[6 * 16], part[6 * 16], pt[6 * 16];
  for (int step = 0; step < 5; step++) {
    cr_assert_eq(par_data_next(one, 0, 1, 6, big, bt), STRATA_OK);
    for (int i = 0; i < 3; i++)
      cr_assert_eq(par_data_next(r[i], i, 3, 2, part + i * 32, pt + i * 32), STRATA_OK);
    cr_assert_eq(memcmp(big, part, sizeof big), 0, "step %d", step);
    cr_assert_eq(memcmp(bt, pt, sizeof bt), 0);
  }
  cr_assert_eq(par_data_position(one), 30);
  cr_assert_eq(par_data_position(r[2]), 30);
  /* Resuming from a saved position gives the same batch. */
  par_data_set_position(r[0], 24);
  cr_assert_eq(par_data_next(r[0], 0, 1, 6, part, pt), STRATA_OK);
  cr_assert_eq(memcmp(big, part, sizeof big), 0);
  cr_assert_eq(par_data_entropy_rate(one) > 0, 1);
  par_data_destroy(one);
  for (int i = 0; i < 3; i++) par_data_destroy(r[i]);
}

Test(data, seed_changes_order_not_content) {
  par_data_options_t o = PAR_DATA_DEFAULTS;
  o.seq = 16, o.markov_tokens = 1 << 16;
  par_data_t *a = NULL, *b = NULL;
  cr_assert_eq(par_data_open(&o, &a, NULL, 0), STRATA_OK);
  o.seed = 2;
  cr_assert_eq(par_data_open(&o, &b, NULL, 0), STRATA_OK);
  int32_t x[16], y[16], t[16];
  cr_assert_eq(par_data_fill(a, PAR_SPLIT_TRAIN, 0, 1, x, t), STRATA_OK);
  cr_assert_eq(par_data_fill(b, PAR_SPLIT_TRAIN, 0, 1, y, t), STRATA_OK);
  cr_assert_neq(memcmp(x, y, sizeof x), 0);
  par_data_destroy(a);
  par_data_destroy(b);
}

/* Text: bytes; the last 10% of the file is validation, read in order. */
Test(data, text_split) {
  char text[1000];
  for (int i = 0; i < 1000; i++) text[i] = (char)('a' + i % 26);
  write_file(tmp("t.txt"), text, sizeof text);
  par_data_options_t o = PAR_DATA_DEFAULTS;
  o.format = PAR_DATA_TEXT, o.path = tmp("t.txt"), o.seq = 9, o.val_fraction = 0.1;
  par_data_t *d = NULL;
  char err[256] = "";
  cr_assert_eq(par_data_open(&o, &d, err, sizeof err), STRATA_OK, "%s", err);
  cr_assert_eq(par_data_tokens(d, PAR_SPLIT_TRAIN), 900);
  cr_assert_eq(par_data_tokens(d, PAR_SPLIT_VAL), 100);
  cr_assert_eq(par_data_samples(d, PAR_SPLIT_TRAIN), 899 / 9);
  cr_assert_eq(par_data_samples(d, PAR_SPLIT_VAL), 99 / 9);
  cr_assert_eq(par_data_vocab(d), 256);
  cr_assert_lt(par_data_entropy_rate(d), 0);
  int32_t in[2 * 9], tg[2 * 9];
  cr_assert_eq(par_data_fill(d, PAR_SPLIT_VAL, 1, 2, in, tg), STRATA_OK);
  for (int t = 0; t < 18; t++) cr_assert_eq(in[t], 'a' + (900 + 9 + t) % 26);
  par_data_destroy(d);
}

static void write_llmc(const char *path, int32_t magic, int32_t version, int32_t count,
                       int actual) {
  int32_t h[256] = {magic, version, count};
  FILE *f = fopen(path, "wb");
  fwrite(h, 4, 256, f);
  for (int i = 0; i < actual; i++) {
    uint16_t v = (uint16_t)(i * 7 % 50257);
    fwrite(&v, 2, 1, f);
  }
  fclose(f);
}

/* llm.c shards: glob over two shards, separate validation shard. */
Test(data, llmc_shards) {
  write_llmc(tmp("tr_000.bin"), 20240520, 1, 5000, 5000);
  write_llmc(tmp("tr_001.bin"), 20240520, 1, 3000, 3000);
  write_llmc(tmp("val_000.bin"), 20240520, 1, 1000, 1000);
  par_data_options_t o = PAR_DATA_DEFAULTS;
  o.format = PAR_DATA_AUTO, o.path = tmp("tr_*.bin"), o.val_path = tmp("val_*.bin");
  o.seq = 64;
  par_data_t *d = NULL;
  char err[256] = "";
  cr_assert_eq(par_data_open(&o, &d, err, sizeof err), STRATA_OK, "%s", err);
  cr_assert_eq(par_data_tokens(d, PAR_SPLIT_TRAIN), 8000);
  cr_assert_eq(par_data_samples(d, PAR_SPLIT_TRAIN), 4999 / 64 + 2999 / 64);
  cr_assert_eq(par_data_samples(d, PAR_SPLIT_VAL), 999 / 64);
  int max = 0;
  for (int i = 0; i < 5000; i++) max = i * 7 % 50257 > max ? i * 7 % 50257 : max;
  cr_assert_eq(par_data_vocab(d), max + 1);
  int32_t in[64], tg[64];
  cr_assert_eq(par_data_fill(d, PAR_SPLIT_VAL, 2, 1, in, tg), STRATA_OK);
  for (int t = 0; t < 64; t++) cr_assert_eq(in[t], (128 + t) * 7 % 50257);
  par_data_destroy(d);
}

static void expect_open_error(par_data_options_t *o, int code, const char *a, const char *b) {
  par_data_t *d = NULL;
  char err[512] = "";
  int rc = par_data_open(o, &d, err, sizeof err);
  cr_assert_eq(rc, code, "status %d, message: %s", rc, err);
  cr_assert_null(d);
  cr_assert_not_null(strstr(err, a), "'%s' not in: %s", a, err);
  if (b) cr_assert_not_null(strstr(err, b), "'%s' not in: %s", b, err);
}

Test(data, bad_files_are_refused_by_name) {
  par_data_options_t o = PAR_DATA_DEFAULTS;
  o.format = PAR_DATA_AUTO;
  o.path = tmp("missing.txt");
  expect_open_error(&o, STRATA_EIO, tmp("missing.txt"), "No such file");
  o.path = tmp("nothing_*.bin");
  expect_open_error(&o, STRATA_EIO, "no file matches", "nothing_*");
  write_file(tmp("empty.txt"), "", 0);
  o.path = tmp("empty.txt");
  expect_open_error(&o, STRATA_ECORRUPT, tmp("empty.txt"), "empty");
  write_file(tmp("odd.u16"), "abc", 3);
  o.path = tmp("odd.u16");
  expect_open_error(&o, STRATA_ECORRUPT, "size 3 bytes is not a multiple of 2", tmp("odd.u16"));
  write_llmc(tmp("magic.bin"), 12345, 1, 10, 10);
  o.path = tmp("magic.bin"); /* auto: a .bin file is an llm.c shard by its magic, or refused */
  expect_open_error(&o, STRATA_ECORRUPT, "takes an llm.c shard by its magic number 20240520, and this .bin file starts with 12345", tmp("magic.bin"));
  o.format = PAR_DATA_LLMC;
  expect_open_error(&o, STRATA_ECORRUPT, "bad llm.c magic 12345", tmp("magic.bin"));
  o.format = PAR_DATA_AUTO;
  write_llmc(tmp("none.bin"), 20240520, 1, 0, 0);
  o.path = tmp("none.bin");
  expect_open_error(&o, STRATA_ECORRUPT, "an llm.c shard with no tokens", tmp("none.bin"));
  write_llmc(tmp("ver.bin"), 20240520, 7, 10, 10);
  o.path = tmp("ver.bin");
  expect_open_error(&o, STRATA_ECORRUPT, "llm.c version 7", NULL);
  write_llmc(tmp("short.bin"), 20240520, 1, 1000, 600);
  o.path = tmp("short.bin");
  expect_open_error(&o, STRATA_ECORRUPT, "header says 1000 tokens", "1200 bytes of tokens");
  write_file(tmp("hdr.bin"), "abcdefgh", 8);
  o.format = PAR_DATA_LLMC, o.path = tmp("hdr.bin");
  expect_open_error(&o, STRATA_ECORRUPT, "shorter than the llm.c header", NULL);
  write_file(tmp("tiny.txt"), "hello world", 11);
  o.format = PAR_DATA_TEXT, o.path = tmp("tiny.txt"), o.seq = 64;
  expect_open_error(&o, STRATA_ECORRUPT, "training split", "seq+1 = 65");
  o.seq = 0;
  expect_open_error(&o, STRATA_EINVAL, "seq 0", NULL);
  o.seq = 4, o.val_fraction = 1.5;
  expect_open_error(&o, STRATA_EINVAL, "val_fraction 1.5", NULL);
  o.format = PAR_DATA_MARKOV, o.val_fraction = 0.1, o.markov.fanout = 300;
  expect_open_error(&o, STRATA_EINVAL, "fanout 300", NULL);
}
