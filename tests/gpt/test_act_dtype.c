/* par_gpt_options_t.act_dtype on a machine without a GPU: 16-bit
 * activations are refused on the CPU (which computes in f32) with one
 * message naming the dtype, the device and why; an unknown dtype is
 * refused naming its value; f32 (the default) builds the model as before,
 * par_gpt_act_dtype says f32, and a pipeline stage's boundary buffers hold
 * B T h f32 elements (16-bit stages are refused on the CPU for the CPU's
 * reason only: pipeline stages take 16-bit activations on a device).
 * libtensor's ops likewise refuse 16-bit activations on the CPU
 * (STRATA_EUNSUPPORTED, the message naming the operand). The 16-bit
 * kernels themselves are checked against the CPU on a GPU
 * (tests/tensor/gpu_equiv.c, tests/train/gpu_engine.c). */
#include <criterion/criterion.h>
#include <string.h>
#include <strata/parallel.h>
#include <strata/tensor.h>

static const par_gpt_config_t cfg = {.layers = 2, .hidden = 16, .heads = 2, .seq = 8, .vocab = 37};

Test(act_dtype, cpu_refuses_16_bits) {
  const int dts[] = {TENSOR_BF16, TENSOR_F16};
  const char *names[] = {"bf16", "f16"};
  for (int i = 0; i < 2; i++) {
    par_gpt_options_t o = PAR_GPT_OPTIONS_DEFAULTS;
    o.threads = 1, o.act_dtype = dts[i];
    par_gpt_t *m = (par_gpt_t *)1;
    cr_expect_eq(par_gpt_create_ex(&m, &cfg, &o, 5), STRATA_EUNSUPPORTED);
    cr_expect_null(m);
    char want[128];
    snprintf(want, sizeof want, "par_gpt_create: %s activations on the CPU: the CPU computes in f32", names[i]);
    cr_expect(strstr(par_gpt_create_error(), want), "%s", par_gpt_create_error());
  }
}

Test(act_dtype, unknown_dtype) {
  par_gpt_options_t o = PAR_GPT_OPTIONS_DEFAULTS;
  o.threads = 1, o.act_dtype = TENSOR_I32;
  par_gpt_t *m = NULL;
  cr_expect_eq(par_gpt_create_ex(&m, &cfg, &o, 5), STRATA_EINVAL);
  cr_expect(strstr(par_gpt_create_error(), "act_dtype 3 is not f32 (0), bf16 (1) or f16 (2)"), "%s",
            par_gpt_create_error());
}

Test(act_dtype, f32_default) {
  par_gpt_options_t o = PAR_GPT_OPTIONS_DEFAULTS;
  cr_expect_eq(o.act_dtype, TENSOR_F32);
  o.threads = 1;
  par_gpt_t *m = NULL;
  cr_assert_eq(par_gpt_create_ex(&m, &cfg, &o, 5), 0, "%s", par_gpt_create_error());
  int32_t tok[16] = {0}, tgt[16] = {1};
  float loss = 0;
  cr_expect_eq(par_gpt_forward(m, tok, tgt, 2, 8, &loss), 0, "%s", par_gpt_last_error(m));
  cr_expect(loss > 0);
  par_gpt_destroy(m);
}

Test(act_dtype, pipeline_stage) {
  for (int dt = TENSOR_F32; dt <= TENSOR_BF16; dt++) {
    par_gpt_options_t o = PAR_GPT_OPTIONS_DEFAULTS;
    o.threads = 1, o.stages = 2, o.stage = 1, o.act_dtype = dt;
    par_gpt_t *m = NULL;
    int rc = par_gpt_create_ex(&m, &cfg, &o, 5);
    if (dt == TENSOR_BF16) { /* refused for the CPU, not for the stages */
      cr_expect_eq(rc, STRATA_EUNSUPPORTED);
      cr_expect(strstr(par_gpt_create_error(), "bf16 activations on the CPU: the CPU computes in f32"), "%s",
                par_gpt_create_error());
      continue;
    }
    cr_assert_eq(rc, 0, "%s", par_gpt_create_error());
    cr_expect_eq(par_gpt_act_dtype(m), TENSOR_F32);
    size_t n = 0;
    cr_expect_not_null(par_gpt_stage_buffer(m, 0, 0, PAR_GPT_IN, 2, 8, &n), "%s", par_gpt_last_error(m));
    cr_expect_eq(n, (size_t)2 * 8 * cfg.hidden);
    cr_expect_null(par_gpt_stage_buffer(m, 0, 0, PAR_GPT_OUT, 2, 8, &n)); /* the last stage */
    par_gpt_destroy(m);
  }
}

/* The ops: bf16 activations on the CPU are STRATA_EUNSUPPORTED, naming the
 * operand and "16-bit activations need a CUDA device". */
Test(act_dtype, ops_refuse_16_bits_on_cpu) {
  tensor_ctx_t *ctx = NULL;
  cr_assert_eq(tensor_ctx_create(&ctx, NULL), 0);
  uint16_t x16[2 * 8] = {0}, y16[2 * 8] = {0};
  float w[8] = {1, 1, 1, 1, 1, 1, 1, 1}, mean[2], rstd[2];
  tensor_t x = tensor_view2(x16, TENSOR_BF16, TENSOR_CPU, 2, 8), y = tensor_view2(y16, TENSOR_BF16, TENSOR_CPU, 2, 8);
  tensor_t wt = tensor_view1(w, TENSOR_F32, TENSOR_CPU, 8), mu = tensor_view1(mean, TENSOR_F32, TENSOR_CPU, 2),
           rs = tensor_view1(rstd, TENSOR_F32, TENSOR_CPU, 2);
  cr_expect_eq(tensor_layernorm_forward(ctx, &y, &mu, &rs, &x, &wt, NULL, 1e-5f), STRATA_EUNSUPPORTED);
  cr_expect(strstr(tensor_last_error(ctx), "tensor_layernorm_forward: in is bf16[2,8]@cpu: 16-bit activations need a "
                                           "CUDA device"),
            "%s", tensor_last_error(ctx));
  cr_expect_eq(tensor_gelu_forward(ctx, &y, &x), STRATA_EUNSUPPORTED);
  cr_expect_eq(tensor_add_forward(ctx, &y, &x, &x), STRATA_EUNSUPPORTED);
  /* mixed dtypes are a shape error naming the expected dtype */
  float f[16] = {0};
  tensor_t xf = tensor_view2(f, TENSOR_F32, TENSOR_CPU, 2, 8);
  cr_expect_eq(tensor_add_forward(ctx, &xf, &xf, &x), STRATA_ESHAPE);
  cr_expect(strstr(tensor_last_error(ctx), "expected dtype f32"), "%s", tensor_last_error(ctx));
  tensor_ctx_destroy(ctx);
}
