# liboffload: memory tiers (device arena, host, NVMe file) and a PatrickStar
# chunk manager; depends on nothing of strata's but include/strata/status.h.
LIBS += offload
offload_DIR  := liboffload
offload_DEPS :=
offload_LIBS :=
$(eval $(call strata_library,offload))
