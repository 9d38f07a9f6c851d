# shapetrace: one non-recursive build.
#   make              build/bin/shapetrace and build/lib/libshapetrace.so
#   make check        every test (no GPU needed), sanitizer runs and a short fuzz run included
#   make fuzz         the reader's libFuzzer harness for FUZZ_S seconds (clang)
#   make demo         the main job on a built-in example, on simulated ranks
#   make bench        overhead and speed figures
#   make check-gpu    the checks that need a real GPU (opt-in)
#   make install      PREFIX=/usr/local DESTDIR=
#   Every target first runs scripts/deps.sh: it checks the Debian packages the build needs and,
#   as root, installs the missing ones (otherwise it prints the apt-get line and stops).
#   make format / format-check
# Options: V=1 (show commands), DEBUG=1, SAN=address|undefined|thread, WERROR=1,
#          TOOLS_SAN=thread (sanitize the shapetrace command and its unit tests only),
#          CUDA_HOME (default /usr/local/cuda), NCCL_HOME (default CUDA_HOME).

CC ?= cc
PREFIX ?= /usr/local
DESTDIR ?=
CUDA_HOME ?= /usr/local/cuda
NCCL_HOME ?= $(CUDA_HOME)
B := build

ifeq ($(V),1)
Q :=
else
Q := @
endif

WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wvla -Wformat=2
ifeq ($(WERROR),1)
WARN += -Werror
endif
ifeq ($(DEBUG),1)
OPT := -O0 -g3
else
OPT := -O2 -g
endif
SANFLAGS :=
ifneq ($(SAN),)
SANFLAGS := -fsanitize=$(SAN) -fno-omit-frame-pointer
endif
TOOLS_SANFLAGS := $(SANFLAGS)
ifneq ($(TOOLS_SAN),)
TOOLS_SANFLAGS := -fsanitize=$(TOOLS_SAN) -fno-omit-frame-pointer
endif

CFLAGS_NOSAN := -std=gnu11 $(OPT) $(WARN) -fno-strict-aliasing -MMD -MP
CFLAGS_BASE := $(CFLAGS_NOSAN) $(SANFLAGS)
# Includes are path-qualified from the top of the tree ("tools/lib/reader.h").
CPPFLAGS_BASE := -I.
GPU_INC := -isystem $(NCCL_HOME)/include -isystem $(CUDA_HOME)/include

# ---- shared code, built once with -fPIC for the preload and the tools ----
COMMON_SRC := common/fs.c common/log.c common/ops.c common/pylayout.c common/rec.c
COMMON_OBJ := $(COMMON_SRC:%.c=$(B)/obj/%.o)

# ---- the preload ----
PRELOAD_SRC := preload/config.c preload/writer.c preload/resolve.c preload/stackid.c \
               preload/python.c preload/stacks.c preload/values.c preload/record.c preload/nccl.c \
               preload/cudart.c preload/cuda.c preload/dlsym.c preload/init.c
PRELOAD_OBJ := $(PRELOAD_SRC:%.c=$(B)/obj/%.o)
PRELOAD := $(B)/lib/libshapetrace.so
EXPORTS := $(B)/obj/preload/exports.map

# ---- the command ----
TOOLS_SRC := $(wildcard tools/lib/*.c tools/analyze/*.c tools/render/*.c tools/cmd/*.c)
TOOLS_OBJ := $(TOOLS_SRC:%.c=$(B)/obj/%.o)
TOOL := $(B)/bin/shapetrace
TOOLS_LIBS := -ldw -lelf -ljansson -lm -lstdc++ -lpthread

# ---- test equipment ----
DOUBLE_CUDART := $(B)/tests/libcudart.so.13
DOUBLE_NCCL := $(B)/tests/libnccl.so.2
DOUBLE_CUDA := $(B)/tests/libcuda.so.1
TEST_PROGS := $(patsubst tests/load/%.c,$(B)/tests/%,$(wildcard tests/load/*.c))
TEST_LIBS := $(DOUBLE_CUDA) $(B)/tests/mod_nccl.so $(B)/tests/libctor.so $(B)/tests/libnext_a.so \
             $(B)/tests/libnext_b.so
UNIT_PROGS := $(patsubst tests/unit/%.c,$(B)/tests/%,$(wildcard tests/unit/*.c))
EXAMPLE_PROGS := $(patsubst examples/%.c,$(B)/examples/%,$(wildcard examples/*.c))

MAN := $(B)/man/shapetrace.1

all: $(TOOL) $(PRELOAD) $(MAN)

# The dependency step. An included makefile is remade before anything else is built, so a
# missing package stops the build here, with the apt-get line to run, and never half-way
# through with a compiler error about a missing header.
ifeq ($(filter clean format format-check,$(MAKECMDGOALS)),)
include $(B)/deps.mk
endif
$(B)/deps.mk: scripts/deps.sh
	@mkdir -p $(@D)
	$(Q)CUDA_HOME=$(CUDA_HOME) NCCL_HOME=$(NCCL_HOME) scripts/deps.sh build
	@echo "# scripts/deps.sh build found every package" >$@

$(B)/obj/common/%.o: common/%.c
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CFLAGS_BASE) $(CPPFLAGS_BASE) -fPIC -fvisibility=hidden -c $< -o $@

$(B)/obj/preload/%.o: preload/%.c
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CFLAGS_BASE) $(CPPFLAGS_BASE) $(GPU_INC) -fPIC -fvisibility=hidden -c $< -o $@

$(EXPORTS): preload/exports.map.c include/shapetrace/calls.h
	@mkdir -p $(@D)
	$(Q)$(CC) -E -P $(CPPFLAGS_BASE) -x c preload/exports.map.c -o $@

# Compile-time checks of the call list against the libraries' headers: no code.
PRELOAD_CHECKS := $(B)/obj/preload/check_ptds.stamp $(B)/obj/preload/check_facts.stamp
$(B)/obj/preload/check_%.stamp: preload/check_%.c include/shapetrace/calls.h
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CHECK   $<")
	$(Q)$(CC) $(CFLAGS_BASE) $(CPPFLAGS_BASE) $(GPU_INC) -MF $(@:.stamp=.d) -MT $@ -fsyntax-only \
		$< && touch $@

$(PRELOAD): $(PRELOAD_OBJ) $(COMMON_OBJ) $(EXPORTS) $(PRELOAD_CHECKS)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(SANFLAGS) -shared -fPIC -Wl,--version-script=$(EXPORTS) -Wl,-z,defs \
		-Wl,-soname,libshapetrace.so -o $@ $(PRELOAD_OBJ) $(COMMON_OBJ) -ldl -lpthread

$(B)/obj/tools/%.o: tools/%.c
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CFLAGS_NOSAN) $(TOOLS_SANFLAGS) $(CPPFLAGS_BASE) -c $< -o $@

$(TOOL): $(TOOLS_OBJ) $(COMMON_OBJ)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(TOOLS_SANFLAGS) -o $@ $(TOOLS_OBJ) $(COMMON_OBJ) $(TOOLS_LIBS)

# The man page: the command's own --help texts, so that the two say the same, and the manual's
# tables of the environment (checked against env.h) and of the exit statuses.
$(MAN): $(TOOL) scripts/mkman.sh include/shapetrace/env.h docs/tracing.md docs/CONTRACTS.md
	@mkdir -p $(@D)
	@$(if $(Q),echo "  MAN     $@")
	$(Q)scripts/mkman.sh $(TOOL) >$@.tmp && mv $@.tmp $@

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

$(DOUBLE_NCCL): tests/doubles/nccl.c $(wildcard tests/doubles/*.h)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  DOUBLE  $@")
	$(Q)$(CC) $(CFLAGS_BASE) $(CPPFLAGS_BASE) $(GPU_INC) -fPIC -shared \
		-Wl,-soname,libnccl.so.2 -o $@ $< -lpthread -lm -lrt

# Loading-path programs and unit tests link against the doubles by soname.
TEST_LDFLAGS := -L$(B)/tests -Wl,-rpath,'$$ORIGIN'
$(B)/tests/%: tests/load/%.c $(DOUBLE_CUDART) $(DOUBLE_NCCL)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CFLAGS_BASE) $(CPPFLAGS_BASE) $(GPU_INC) -o $@ $< $(TEST_LDFLAGS) \
		-l:libnccl.so.2 -l:libcudart.so.13 -ldl -lpthread

# Gives crafted traces valid record checks (tests/test_hostile.py).
$(B)/tests/shp_craft: tests/craft/shp_craft.c $(COMMON_OBJ)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS_BASE) $(CPPFLAGS_BASE) -o $@ $< $(COMMON_OBJ)

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

$(B)/tests/test_multirank: tests/unit/test_multirank.c $(DOUBLE_CUDART) $(DOUBLE_NCCL) \
		$(B)/tests/shp_launch
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS_BASE) $(CPPFLAGS_BASE) $(GPU_INC) -o $@ $< $(TEST_LDFLAGS) \
		-l:libnccl.so.2 -l:libcudart.so.13 -lpthread

$(B)/tests/test_doubles: tests/unit/test_doubles.c $(DOUBLE_CUDART) $(DOUBLE_NCCL)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS_BASE) $(CPPFLAGS_BASE) $(GPU_INC) -o $@ $< $(TEST_LDFLAGS) \
		-l:libnccl.so.2 -l:libcudart.so.13 -lm

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

# Examples: linked by soname, so they run on the test doubles here and on the real libraries on a
# GPU host (build there with CUDA_HOME/NCCL_HOME set and the real libraries on the path).
$(B)/examples/%: examples/%.c examples/common.h $(DOUBLE_CUDART) $(DOUBLE_NCCL)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CFLAGS_BASE) $(CPPFLAGS_BASE) $(GPU_INC) -o $@ $< -L$(B)/tests \
		-Wl,-rpath,'$$ORIGIN/../tests' -l:libnccl.so.2 -l:libcudart.so.13 -lpthread

test-build: all $(DOUBLE_CUDART) $(DOUBLE_NCCL) $(TEST_LIBS) $(TEST_PROGS) $(B)/bench/gen_traces \
	$(B)/tests/shp_launch $(B)/tests/shp_craft $(EXAMPLE_PROGS) $(UNIT_PROGS) $(EXAMPLE_PROGS)

# What the ThreadSanitizer run needs: the command and its unit tests under TSan, and, plain, the
# programs the analyze suite traces.
TOOLS_UNIT := $(B)/tests/test_lib $(B)/tests/test_findings
tsan-build: $(TOOL) $(PRELOAD) $(DOUBLE_CUDART) $(DOUBLE_NCCL) $(DOUBLE_CUDA) $(B)/tests/scenario \
	$(B)/tests/shp_craft \
	$(B)/tests/hidden $(B)/tests/ranks $(B)/tests/static_rt $(B)/tests/stacks $(B)/tests/shp_launch \
	$(B)/tests/values \
	$(B)/tests/hostile \
	$(B)/bench/gen_traces \
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
$(B)/fuzz/seeds.stamp: $(B)/tests/scenario $(B)/bench/gen_traces $(TOOL) $(PRELOAD) $(DOUBLE_CUDA)
	$(Q)rm -rf $(B)/fuzz/seeds $(B)/fuzz/runs && mkdir -p $(B)/fuzz/seeds
	$(Q)$(TOOL) run --dir $(B)/fuzz/runs/basic -- $(B)/tests/scenario basic >/dev/null 2>&1
	$(Q)$(TOOL) run --dir $(B)/fuzz/runs/graph -- $(B)/tests/scenario graph >/dev/null 2>&1
	$(Q)SHP_DOUBLE_VIA_DRIVER=1 LD_LIBRARY_PATH=$(B)/tests $(TOOL) run --values \
		--dir $(B)/fuzz/runs/values -- $(B)/tests/scenario basic >/dev/null 2>&1
	$(Q)$(B)/bench/gen_traces $(B)/fuzz/runs/gen 2 40 >/dev/null
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

demo: all $(EXAMPLE_PROGS) $(B)/tests/shp_launch
	$(Q)examples/demo.sh $(B)

$(B)/bench/overhead: bench/overhead.c $(DOUBLE_CUDART) $(DOUBLE_NCCL)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS_BASE) $(CPPFLAGS_BASE) $(GPU_INC) -o $@ $< -L$(B)/tests \
		-Wl,-rpath,'$$ORIGIN/../tests' -l:libnccl.so.2 -l:libcudart.so.13

# Synthetic traces for the analyzer's scale figures and tests (test equipment).
$(B)/bench/gen_traces: bench/gen_traces.c $(COMMON_OBJ)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS_BASE) $(CPPFLAGS_BASE) -o $@ $^

bench: all $(B)/bench/overhead $(B)/bench/gen_traces $(B)/tests/shp_launch $(EXAMPLE_PROGS) \
	$(B)/tests/snap_ranks \
	$(DOUBLE_CUDART) $(B)/tests/hostile
	$(Q)bench/run.sh $(B)

# The fingerprint of files' bytes, for the GPU checks of --values (test equipment).
$(B)/tests/shp_fingerprint: tests/gpu/shp_fingerprint.c include/shapetrace/values.h
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS_BASE) $(CPPFLAGS_BASE) -o $@ $<

check-gpu: all $(B)/tests/shp_fingerprint
	$(Q)tests/gpu/run.sh $(B)

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 0755 $(TOOL) $(DESTDIR)$(PREFIX)/bin/shapetrace
	install -m 0755 $(PRELOAD) $(DESTDIR)$(PREFIX)/lib/libshapetrace.so
	install -m 0644 $(MAN) $(DESTDIR)$(PREFIX)/share/man/man1/shapetrace.1

FORMAT_SRC = $(wildcard common/*.[ch] preload/*.[ch] tools/*/*.[ch] tests/*/*.[ch] examples/*.c bench/*.c \
	include/shapetrace/*.h)
format:
	clang-format -i $(FORMAT_SRC)
format-check:
	clang-format --dry-run --Werror $(FORMAT_SRC)

clean:
	rm -rf build

.PHONY: all check fuzz test-build tsan-build demo bench check-gpu install format format-check clean
.SECONDARY:

-include $(shell find $(B)/obj $(B)/tests $(B)/fuzz/obj -name '*.d' 2>/dev/null)
