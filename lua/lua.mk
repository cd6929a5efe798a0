# lua/: the `strata` executable embedding Lua 5.4 with the module `strata`.
# It links every strata library present (libparallel and its dependencies).
STRATA_LUA_CHUNKS := lua/schema.lua lua/experiment.lua
STRATA_LUA_SRCS   := $(wildcard lua/*.c) $(BUILD)/gen/lua_chunks.c
STRATA_LUA_DEPS   := parallel

$(BUILD)/gen/lua_chunks.c: $(STRATA_LUA_CHUNKS) lua/embed.sh
	@mkdir -p $(@D)
	lua/embed.sh $(STRATA_LUA_CHUNKS) >$@

$(eval $(call strata_program,strata,$(STRATA_LUA_SRCS),$(STRATA_LUA_DEPS),$(LUA_CFLAGS) $(BLAS_CFLAGS) -Ilua -DSTRATA_VERSION='"$(VERSION)"',$(LUA_LIBS) $(BLAS_LIBS)))

# make install: the executable too (strata's libraries are linked into it).
INSTALL_TARGETS += install-strata
install-strata: $(BUILD)/bin/strata
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 755 $(BUILD)/bin/strata $(DESTDIR)$(PREFIX)/bin/
.PHONY: install-strata

# make run: the quickstart recipe on 2 data-parallel ranks, from scratch each
# time (overwrite=true: runs/quickstart of the last `make run` is replaced).
RUN_COMMAND := $(BUILD)/bin/strata run -n 2 recipes/quickstart.lua overwrite=true
