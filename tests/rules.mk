# shapetrace: the test rules, included by the Makefile after the product's rules, whose variables
# they use. The test doubles and the programs the suites run, the C tests (tests/unit/, and the
# doubles' own, tests/doubles/test_*.c), and the targets test-build, tsan-build, check, fuzz and
# check-gpu. What check runs is tests/run.sh's to find.

# ---- test equipment ----
DOUBLE_CUDART := $(B)/tests/libcudart.so.13
DOUBLE_NCCL := $(B)/tests/libnccl.so.2
DOUBLE_CUDA := $(B)/tests/libcuda.so.1
TEST_PROGS := $(patsubst tests/load/%.c,$(B)/tests/%,$(wildcard tests/load/*.c))
TEST_LIBS := $(DOUBLE_CUDA) $(B)/tests/mod_nccl.so $(B)/tests/libctor.so $(B)/tests/libnext_a.so \
             $(B)/tests/libnext_b.so $(B)/tests/libpaths.so
UNIT_PROGS := $(patsubst tests/unit/%.c,$(B)/tests/%,$(wildcard tests/unit/*.c))
# The doubles' own tests, apart from the product's: programs on the doubles alone
# (tests/doubles/test_*.c), and a compile-only check of a double's header.
DOUBLE_TESTS := $(patsubst tests/doubles/%.c,$(B)/tests/%,$(wildcard tests/doubles/test_*.c)) \
                $(B)/tests/check_ptds.stamp

# Test doubles of libcudart.so.13 and libnccl.so.2: built against the real headers, with the
# real sonames, so that programs linked against them load them the way they load the real ones.
$(DOUBLE_CUDART): tests/doubles/cudart.c $(wildcard tests/doubles/*.h)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  DOUBLE  $@")
	$(Q)$(CC) $(CFLAGS_BASE) $(CPPFLAGS_BASE) $(GPU_INC) -fPIC -shared \
		-Wl,-soname,libcudart.so.13 -o $@ $< -ldl -lpthread

# The driver double, libcuda.so.1 (cuGetProcAddress and the traced driver functions). Bound to
# its own functions, as the real driver is: the pointers its cuGetProcAddress hands out are its
# own, never an interposer's.
$(DOUBLE_CUDA): tests/doubles/cuda.c $(wildcard tests/doubles/*.h)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  DOUBLE  $@")
	$(Q)$(CC) $(CFLAGS_BASE) $(CPPFLAGS_BASE) $(GPU_INC) -fPIC -shared -Wl,-Bsymbolic-functions \
		-Wl,-soname,libcuda.so.1 -o $@ $< -lpthread

# A program with the static runtime double linked in: no libcudart, only libcuda at run time.
$(B)/tests/static_rt: tests/load/static_rt.c tests/doubles/static_cudart.c $(DOUBLE_CUDA)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS_BASE) $(CPPFLAGS_BASE) $(GPU_INC) -o $@ tests/load/static_rt.c \
		tests/doubles/static_cudart.c -Wl,-rpath,'$$ORIGIN' -ldl -lpthread

# Direct driver calls: dlopen libcuda.so.1 and look its functions up (cuda-python, CuPy, JAX).
$(B)/tests/driver_direct: tests/load/driver_direct.c $(DOUBLE_CUDA)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS_BASE) $(CPPFLAGS_BASE) $(GPU_INC) -o $@ $< -Wl,-rpath,'$$ORIGIN' -ldl

# The NCCL double is several files (nccl_double.h names them) whose shared functions stay
# hidden: the library exports NCCL's names only.
NCCL_DOUBLE_OBJ := $(patsubst %.c,$(B)/obj/%.o,$(wildcard tests/doubles/nccl*.c))
$(B)/obj/tests/doubles/%.o: tests/doubles/%.c
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CFLAGS_BASE) $(CPPFLAGS_BASE) $(GPU_INC) -fPIC -fvisibility=hidden -c $< -o $@

$(DOUBLE_NCCL): $(NCCL_DOUBLE_OBJ)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  DOUBLE  $@")
	$(Q)$(CC) $(SANFLAGS) -shared -Wl,-soname,libnccl.so.2 -o $@ $(NCCL_DOUBLE_OBJ) -lpthread -lm \
		-lrt

# Loading-path programs and unit tests link against the doubles by soname.
TEST_LDFLAGS := -L$(B)/tests -Wl,-rpath,'$$ORIGIN'
$(B)/tests/%: tests/load/%.c $(DOUBLE_CUDART) $(DOUBLE_NCCL)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CFLAGS_BASE) $(CPPFLAGS_BASE) $(GPU_INC) -o $@ $< $(TEST_LDFLAGS) \
		-l:libnccl.so.2 -l:libcudart.so.13 -ldl -lpthread

# Gives crafted traces valid record checks (tests/test_hostile.py, test_preload.py, and
# check-gpu's format part).
$(B)/tests/shp_craft: tests/craft/shp_craft.c $(COMMON_OBJ)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS_BASE) $(CPPFLAGS_BASE) -o $@ $< $(COMMON_OBJ)

# Synthetic traces for the analyzer's tests and scale figures (test equipment; make bench uses
# them too).
$(B)/tests/gen_traces: tests/gen/gen_traces.c $(COMMON_OBJ)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS_BASE) $(CPPFLAGS_BASE) -o $@ $^

# The module test's main program must not link NCCL: only the module brings it in.
$(B)/tests/local_module: tests/load/local_module.c
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS_BASE) -o $@ $< -ldl

# Multi-rank scenarios share the examples' launcher-facing helpers.
$(B)/tests/ranks: tests/load/ranks.c examples/common.h $(DOUBLE_CUDART) $(DOUBLE_NCCL)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS_BASE) $(CPPFLAGS_BASE) $(GPU_INC) -o $@ $< \
		$(TEST_LDFLAGS) -l:libnccl.so.2 -l:libcudart.so.13

$(B)/tests/stacks: tests/load/stacks.c examples/common.h $(DOUBLE_CUDART) $(DOUBLE_NCCL)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS_BASE) $(CPPFLAGS_BASE) $(GPU_INC) -o $@ $< \
		$(TEST_LDFLAGS) -l:libnccl.so.2 -l:libcudart.so.13

# -rdynamic: the fingerprints' site glob (SHAPETRACE_VALUES_SITE) names its functions, and the
# preload sees native names through dladdr, which knows exported symbols only.
$(B)/tests/values: tests/load/values.c examples/common.h $(DOUBLE_CUDART) $(DOUBLE_NCCL)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS_BASE) $(CPPFLAGS_BASE) $(GPU_INC) -rdynamic -o $@ $< \
		$(TEST_LDFLAGS) -l:libnccl.so.2 -l:libcudart.so.13

$(B)/tests/missing: tests/load/missing.c
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS_BASE) -o $@ $< -ldl

$(B)/tests/ctor_main: tests/load/ctor_main.c $(B)/tests/libctor.so
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS_BASE) -o $@ $< $(TEST_LDFLAGS) -l:libctor.so

$(B)/tests/mod_nccl.so: tests/load/lib/mod_nccl.c $(DOUBLE_CUDART) $(DOUBLE_NCCL)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS_BASE) $(CPPFLAGS_BASE) $(GPU_INC) -fPIC -shared -o $@ $< $(TEST_LDFLAGS) \
		-l:libnccl.so.2 -l:libcudart.so.13

$(B)/tests/libctor.so: tests/load/lib/ctor.c $(DOUBLE_CUDART) $(DOUBLE_NCCL)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS_BASE) $(CPPFLAGS_BASE) $(GPU_INC) -fPIC -shared -o $@ $< $(TEST_LDFLAGS) \
		-l:libnccl.so.2 -l:libcudart.so.13

$(B)/tests/libpaths.so: tests/load/lib/paths.c $(DOUBLE_CUDART)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS_BASE) $(CPPFLAGS_BASE) $(GPU_INC) -fPIC -shared -o $@ $< $(TEST_LDFLAGS) \
		-l:libcudart.so.13

$(B)/tests/libnext_b.so: tests/load/lib/next_b.c
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS_BASE) -fPIC -shared -o $@ $<

$(B)/tests/libnext_a.so: tests/load/lib/next_a.c $(B)/tests/libnext_b.so
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS_BASE) -fPIC -shared -o $@ $< $(TEST_LDFLAGS) -Wl,--no-as-needed \
		-l:libnext_b.so

# The launcher that runs N simulated ranks like torchrun (test equipment).
$(B)/tests/shp_launch: tests/doubles/launch.c
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS_BASE) $(CPPFLAGS_BASE) -o $@ $<

$(B)/tests/test_multirank: tests/doubles/test_multirank.c tests/unit/harness.h $(DOUBLE_CUDART) \
		$(DOUBLE_NCCL) $(B)/tests/shp_launch
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS_BASE) $(CPPFLAGS_BASE) $(GPU_INC) -o $@ $< $(TEST_LDFLAGS) \
		-l:libnccl.so.2 -l:libcudart.so.13 -lpthread

$(B)/tests/test_doubles: tests/doubles/test_doubles.c tests/unit/harness.h $(DOUBLE_CUDART) \
		$(DOUBLE_NCCL)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS_BASE) $(CPPFLAGS_BASE) $(GPU_INC) -o $@ $< $(TEST_LDFLAGS) \
		-l:libnccl.so.2 -l:libcudart.so.13 -lm

# Compile-only: cudart_ptds.h agrees with cuda_runtime_api.h in per-thread default-stream mode.
$(B)/tests/check_ptds.stamp: tests/doubles/check_ptds.c tests/doubles/cudart_ptds.h
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS_BASE) $(CPPFLAGS_BASE) $(GPU_INC) -MF $(@:.stamp=.d) -MT $@ -fsyntax-only \
		$< && touch $@

$(B)/tests/test_symbolize: tests/unit/test_symbolize.c tools/lib/symbolize.c tools/lib/symfile.c \
		tools/lib/out.c
	@mkdir -p $(@D)
	$(Q)$(CC) -std=gnu11 -g -O0 $(WARN) $(SANFLAGS) -I. -o $@ $^ -ldw -lelf

# The contract's numbers: common/ and include/ only.
$(B)/tests/test_ops: tests/unit/test_ops.c $(COMMON_OBJ)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS_BASE) -I. -o $@ $^

# Unit tests of tools/lib and the analyzer: linked with everything of tools/ but its main.
$(B)/tests/test_%: tests/unit/test_%.c tests/unit/harness.h \
		$(filter-out $(B)/obj/tools/cmd/main.o,$(TOOLS_OBJ)) $(COMMON_OBJ)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS_NOSAN) $(TOOLS_SANFLAGS) $(CPPFLAGS_BASE) -o $@ $(filter %.c %.o,$^) \
		$(TOOLS_LIBS)

# Test sources that moved: a dependency file of an older build may still name them.
tests/unit/test_doubles.c tests/unit/test_multirank.c bench/gen_traces.c:

test-build: all $(DOUBLE_CUDART) $(DOUBLE_NCCL) $(TEST_LIBS) $(TEST_PROGS) $(B)/tests/gen_traces \
	$(B)/tests/shp_launch $(B)/tests/shp_craft $(EXAMPLE_PROGS) $(UNIT_PROGS) $(DOUBLE_TESTS)

# What the ThreadSanitizer run needs: the command and its unit tests under TSan, and, plain, the
# programs the analyze suite traces.
TOOLS_UNIT := $(B)/tests/test_lib $(B)/tests/test_findings $(B)/tests/test_render
tsan-build: $(TOOL) $(PRELOAD) $(DOUBLE_CUDART) $(DOUBLE_NCCL) $(DOUBLE_CUDA) $(B)/tests/scenario \
	$(B)/tests/shp_craft \
	$(B)/tests/hidden $(B)/tests/ranks $(B)/tests/static_rt $(B)/tests/stacks $(B)/tests/shp_launch \
	$(B)/tests/values \
	$(B)/tests/hostile \
	$(B)/tests/gen_traces \
	$(EXAMPLE_PROGS) $(TOOLS_UNIT)

# make check: the layout rule, the whole suite here, then the sanitizer builds in their own
# trees (ThreadSanitizer only for the command: the analyzer is what has threads).
check: test-build
	$(Q)CUDA_HOME=$(CUDA_HOME) NCCL_HOME=$(NCCL_HOME) scripts/deps.sh check
	$(Q)python3 tests/check_layout.py $(B)
	$(Q)CUDA_HOME=$(CUDA_HOME) NCCL_HOME=$(NCCL_HOME) tests/run.sh $(B)
ifeq ($(SAN),)
	$(Q)$(MAKE) --no-print-directory B=build/asan SAN=address,undefined test-build
	$(Q)SHAPETRACE_SANITIZED=1 CUDA_HOME=$(CUDA_HOME) NCCL_HOME=$(NCCL_HOME) tests/run.sh build/asan
	$(Q)$(MAKE) --no-print-directory B=build/tsan TOOLS_SAN=thread tsan-build
	$(Q)SHAPETRACE_TSAN=1 tests/run.sh build/tsan
	@echo "== fuzz_reader ($(FUZZ_CHECK_S) s; make fuzz for a long run)"
	$(Q)mkdir -p $(B)/fuzz; $(MAKE) --no-print-directory fuzz FUZZ_S=$(FUZZ_CHECK_S) \
		>$(B)/fuzz/check.log 2>&1; rc=$$?; \
		grep -E '^(Done|==[0-9]+==ERROR|SUMMARY)|runtime error' $(B)/fuzz/check.log; \
		if [ $$rc -eq 0 ]; then echo "fuzz: 1 passed, 0 failed"; else echo "fuzz: 0 passed, 1 failed"; fi; \
		exit $$rc
endif

# ---- fuzzing: tests/fuzz/fuzz_reader.c under libFuzzer, ASan and UBSan (clang) ----
#   make fuzz            FUZZ_S seconds (default 600); make check runs it for FUZZ_CHECK_S
FUZZ_CC ?= clang
FUZZ_S ?= 600
FUZZ_CHECK_S ?= 45
FUZZ_FLAGS := -std=gnu11 -O1 -g -fno-strict-aliasing -fno-omit-frame-pointer \
              -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_SRC := $(wildcard tools/lib/*.c tools/analyze/*.c) $(COMMON_SRC)
FUZZ_OBJ := $(FUZZ_SRC:%.c=$(B)/fuzz/obj/%.o)
FUZZ_BIN := $(B)/fuzz/fuzz_reader
$(B)/fuzz/obj/%.o: %.c
	@mkdir -p $(@D)
	$(Q)$(FUZZ_CC) $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link $(CPPFLAGS_BASE) -MMD -MP -c $< -o $@
$(FUZZ_BIN): tests/fuzz/fuzz_reader.c $(FUZZ_OBJ)
	@mkdir -p $(@D)
	$(Q)$(FUZZ_CC) $(FUZZ_FLAGS) -fsanitize=fuzzer $(CPPFLAGS_BASE) -o $@ $^ $(TOOLS_LIBS)
# Seeds: traces of the scenario and of the generator, made here (traces are not committed).
$(B)/fuzz/seeds.stamp: $(B)/tests/scenario $(B)/tests/gen_traces $(TOOL) $(PRELOAD) $(DOUBLE_CUDA)
	$(Q)rm -rf $(B)/fuzz/seeds $(B)/fuzz/runs && mkdir -p $(B)/fuzz/seeds
	$(Q)$(TOOL) run --dir $(B)/fuzz/runs/basic -- $(B)/tests/scenario basic >/dev/null 2>&1
	$(Q)$(TOOL) run --dir $(B)/fuzz/runs/graph -- $(B)/tests/scenario graph >/dev/null 2>&1
	$(Q)SHP_DOUBLE_VIA_DRIVER=1 LD_LIBRARY_PATH=$(B)/tests $(TOOL) run --values \
		--dir $(B)/fuzz/runs/values -- $(B)/tests/scenario basic >/dev/null 2>&1
	$(Q)$(B)/tests/gen_traces $(B)/fuzz/runs/gen 2 40 >/dev/null
	$(Q)for f in $(B)/fuzz/runs/*/*.shptrace; do \
		python3 -c 'import sys,struct; d=open(sys.argv[1],"rb").read(); \
open(sys.argv[2],"wb").write(d[:struct.unpack_from("<Q",d,72)[0]])' \
		"$$f" $(B)/fuzz/seeds/$$(basename $$f); done
	$(Q)touch $@
fuzz: $(FUZZ_BIN) $(B)/fuzz/seeds.stamp
	$(Q)mkdir -p $(B)/fuzz/corpus
	$(Q)SHP_FUZZ_PEER=$$(ls $(B)/fuzz/runs/gen/*.shptrace | tail -n 1) \
		$(FUZZ_BIN) -max_total_time=$(FUZZ_S) -max_len=65536 -rss_limit_mb=2048 -timeout=10 \
		-print_final_stats=1 $(B)/fuzz/corpus $(B)/fuzz/seeds

# The fingerprint of files' bytes, for the GPU checks of --values (test equipment).
$(B)/tests/shp_fingerprint: tests/gpu/shp_fingerprint.c include/shapetrace/values.h
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS_BASE) $(CPPFLAGS_BASE) -o $@ $<

check-gpu: all $(B)/tests/shp_fingerprint $(B)/tests/gen_traces $(B)/tests/shp_craft
	$(Q)tests/gpu/run.sh $(B)

.PHONY: check fuzz test-build tsan-build check-gpu
