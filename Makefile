# shapetrace: one non-recursive build.
#   make              build/bin/shapetrace and build/lib/libshapetrace.so
#   make check        every test (no GPU needed), sanitizer runs and a short fuzz run included
#   make fuzz         the reader's libFuzzer harness for FUZZ_S seconds (clang)
#   make demo         the main job on a built-in example, on simulated ranks
#   make bench        overhead and speed figures
#   make check-gpu    the checks that need a real GPU (opt-in)
#   make install      PREFIX=/usr/local DESTDIR=
#   make deps         install, as root, the Debian packages that DEPS needs (build, check, format)
#   make format / format-check   clang-format 14 (CLANG_FORMAT, default clang-format-14)
# The test rules (the doubles, the test programs, test-build, tsan-build, check, fuzz, check-gpu)
# are in tests/rules.mk, included below.
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

# ---- the examples ----
EXAMPLE_PROGS := $(patsubst examples/%.c,$(B)/examples/%,$(wildcard examples/*.c))

MAN := $(B)/man/shapetrace.1

all: $(TOOL) $(PRELOAD) $(MAN)

# The dependency step (scripts/deps.sh). `make deps` installs, as root, the Debian packages of
# the sets in DEPS (build, check, format; default build), and says so; as another user it prints
# the apt-get line to run and fails. make demo and make check, the README's two commands, take it
# first (make check with DEPS="build check"); every other target only checks the build's
# packages, and a missing one stops it with one line naming it and how to get it, changing
# nothing. The step is an included makefile, which make remakes before it builds anything, so it
# comes before the first compiler error about a missing header; one stamp per kind of step, so
# that make check after make still installs what the tests need.
DEPS ?= build
DEPS_ENV := CUDA_HOME=$(CUDA_HOME) NCCL_HOME=$(NCCL_HOME)
ifneq ($(filter check,$(MAKECMDGOALS)),)
DEPS_STEP := check
DEPS_CMD := $(MAKE) --no-print-directory deps DEPS="build check"
else ifneq ($(filter demo,$(MAKECMDGOALS)),)
DEPS_STEP := demo
DEPS_CMD := $(MAKE) --no-print-directory deps DEPS=build
else
DEPS_STEP := build
DEPS_CMD := $(DEPS_ENV) scripts/deps.sh build
endif
ifneq ($(filter-out clean deps format format-check,$(or $(MAKECMDGOALS),all)),)
include $(B)/deps-$(DEPS_STEP).mk
endif
$(B)/deps-%.mk: scripts/deps.sh
	@mkdir -p $(@D)
	$(Q)$(DEPS_CMD)
	@echo "# the dependency step passed: $(DEPS_CMD)" >$@
deps:
	$(Q)$(DEPS_ENV) scripts/deps.sh --install $(DEPS)

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

# The test rules: the doubles, the test programs, test-build, tsan-build, check, fuzz, check-gpu.
include tests/rules.mk

# Examples: linked by soname, so they run on the test doubles here and on the real libraries on a
# GPU host (build there with CUDA_HOME/NCCL_HOME set and the real libraries on the path).
$(B)/examples/%: examples/%.c examples/common.h $(DOUBLE_CUDART) $(DOUBLE_NCCL)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CFLAGS_BASE) $(CPPFLAGS_BASE) $(GPU_INC) -o $@ $< -L$(B)/tests \
		-Wl,-rpath,'$$ORIGIN/../tests' -l:libnccl.so.2 -l:libcudart.so.13 -lpthread

demo: all $(EXAMPLE_PROGS) $(B)/tests/shp_launch
	$(Q)examples/demo.sh $(B)

$(B)/bench/overhead: bench/overhead.c $(DOUBLE_CUDART) $(DOUBLE_NCCL)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS_BASE) $(CPPFLAGS_BASE) $(GPU_INC) -o $@ $< -L$(B)/tests \
		-Wl,-rpath,'$$ORIGIN/../tests' -l:libnccl.so.2 -l:libcudart.so.13

bench: all $(B)/bench/overhead $(B)/tests/gen_traces $(B)/tests/shp_launch $(EXAMPLE_PROGS) \
	$(B)/tests/snap_ranks \
	$(DOUBLE_CUDART) $(DOUBLE_CUDA) $(B)/tests/hostile
	$(Q)bench/run.sh $(B)

# Writes only under $(DESTDIR)$(PREFIX), and says so first.
install: all
	@echo "shapetrace: installing shapetrace, libshapetrace.so and its man page under $(DESTDIR)$(PREFIX)"
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 0755 $(TOOL) $(DESTDIR)$(PREFIX)/bin/shapetrace
	install -m 0755 $(PRELOAD) $(DESTDIR)$(PREFIX)/lib/libshapetrace.so
	install -m 0644 $(MAN) $(DESTDIR)$(PREFIX)/share/man/man1/shapetrace.1

# The house style is .clang-format as clang-format 14 reads it (other versions break some lines
# differently): make format-check fails, with one line, under any other version.
CLANG_FORMAT ?= clang-format-14
FORMAT_SRC = $(wildcard common/*.[ch] preload/*.[ch] tools/*/*.[ch] tests/*/*.[ch] tests/*/*/*.[ch] \
	examples/*.[ch] bench/*.[ch] include/shapetrace/*.h)
FORMAT_TOOL = $(Q)v=$$($(CLANG_FORMAT) --version 2>/dev/null) || { echo "shapetrace: make $@ needs \
$(CLANG_FORMAT) (.clang-format is written for version 14): apt-get install -y clang-format-14 as \
root, or make deps DEPS=format" >&2; exit 1; }; case "$$v" in *" version 14."*) ;; *) echo \
"shapetrace: make $@ needs clang-format 14, and $(CLANG_FORMAT) is $$v" >&2; exit 1;; esac
format:
	$(FORMAT_TOOL)
	$(Q)$(CLANG_FORMAT) -i $(FORMAT_SRC)
format-check:
	$(FORMAT_TOOL)
	$(Q)$(CLANG_FORMAT) --dry-run --Werror $(FORMAT_SRC) && echo "format-check: $(words $(FORMAT_SRC)) files as .clang-format has them"

clean:
	rm -rf build

.PHONY: all deps demo bench install format format-check clean
.SECONDARY:

-include $(shell find $(B)/obj $(B)/tests $(B)/fuzz/obj -name '*.d' 2>/dev/null)
