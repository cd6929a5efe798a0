# liboptim: fused optimizer updates; depends on nothing of strata's but the
# header-only include/strata/status.h and half.h. CUDA libraries are added by
# the rules when CUDA is on.
LIBS += optim
optim_DIR  := liboptim
optim_DEPS :=
optim_LIBS :=
optim_OPENMP := 1
# sqrtf without errno lets the compiler vectorise the Adam/LAMB denominators;
# no -ffast-math: inf/nan must propagate for the loss scaler.
optim_CFLAGS := -fno-math-errno
$(eval $(call strata_library,optim))
