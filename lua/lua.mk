# lua/: the `strata` executable embedding Lua 5.4 with the module `strata`.
# It links every strata library present (libparallel and its dependencies).
STRATA_LUA_CHUNKS := lua/schema.lua lua/experiment.lua
STRATA_LUA_SRCS   := $(wildcard lua/*.c) $(BUILD)/gen/lua_chunks.c
STRATA_LUA_DEPS   := parallel

$(BUILD)/gen/lua_chunks.c: $(STRATA_LUA_CHUNKS) lua/embed.sh
	@mkdir -p $(@D)
	lua/embed.sh $(STRATA_LUA_CHUNKS) >$@

$(eval $(call strata_program,strata,$(STRATA_LUA_SRCS),$(STRATA_LUA_DEPS),$(LUA_CFLAGS) $(BLAS_CFLAGS) -Ilua -DSTRATA_VERSION='"$(VERSION)"',$(LUA_LIBS) $(BLAS_LIBS)))

# make run: the quickstart recipe on 2 data-parallel ranks.
RUN_COMMAND := $(BUILD)/bin/strata run -n 2 recipes/quickstart.lua
