# memra: one strict Makefile (GNU Make).
#
#   make                 library + programs into bin/ (CUDA when the toolkit is found)
#   make test            everything, then the unit and integration tests
#   make aarch64-tests   the CPU fast path's test for aarch64 (cross-built; run by qemu-user)
#   make check-layers    fails on an #include that climbs a layer
#   make debug           ASan + UBSan build of library and programs into build/san/
#   make fuzz            libFuzzer targets for the parsers, FUZZ_SECONDS each
#   make install PREFIX=/usr/local
#
# CUDA=auto|0|1 (auto: on when nvcc is found), MEMRA_CUDA_ARCH=90a (or 120a, 89 ...).
# Missing Debian packages are installed by scripts/deps.sh on first build.

MAKEFLAGS += -j$(shell nproc) --no-print-directory
.SUFFIXES:
.DELETE_ON_ERROR:
.SECONDARY:
SHELL := /bin/bash

PREFIX ?= /usr/local
CUDA ?= auto
MEMRA_CUDA_ARCH ?= 90a
CUDA_HOME ?= /usr/local/cuda
FUZZ_SECONDS ?= 30
VARIANT ?= release

ifeq ($(CUDA),auto)
  ifneq ($(wildcard $(CUDA_HOME)/bin/nvcc),)
    override CUDA := 1
  else
    override CUDA := 0
  endif
endif
# The sanitizer variant tests the host code; CUDA objects stay out of it.
ifeq ($(VARIANT),san)
  override CUDA := 0
endif

CC := gcc
NVCC := $(CUDA_HOME)/bin/nvcc
B := build/$(VARIANT)

WARN := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wvla
CPPFLAGS := -Ilib -I. -D_GNU_SOURCE -DMEMRA_CUDA=$(CUDA)
CFLAGS := -std=c11 -g $(WARN) -MMD -MP -pthread
LDFLAGS := -pthread -Wl,--as-needed
ifeq ($(VARIANT),san)
  CFLAGS += -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
  LDFLAGS += -fsanitize=address,undefined
  BIN := $(B)/bin
else
  CFLAGS += -O2
  BIN := bin
endif

# Libraries the GPU machine lacks, or may carry in another version, are
# linked statically so a binary built here runs there unchanged.
STATIC_LIBS := -Wl,-Bstatic -ljansson -lutf8proc -lpcre2-8 -lmicrohttpd -Wl,-Bdynamic -lgnutls
LDLIBS := $(STATIC_LIBS) -lcurl -lcrypto -lz -lm -ldl

# The layers, bottom to top (docs/ARCHITECTURE.md; scripts/check-layers.sh
# enforces the order). libmemra.a holds what every program needs; the bench
# rows, bandwidth probe and load client (lib/bench) and the kernel check
# (lib/check) are archives of their own, linked only by the program that
# uses them (memra-bench, memra-parity) and by the tests.
LIB_DIRS := lib/core lib/numerics lib/format lib/quant lib/hub lib/jinja lib/tok lib/grammar lib/backend \
            lib/backend/cpu lib/model lib/engine lib/serve
LIB_SRC := $(foreach d,$(LIB_DIRS),$(wildcard $(d)/*.c))
BENCH_SRC := $(wildcard lib/bench/*.c)
CHECK_SRC :=
CU_SRC :=
ifeq ($(CUDA),1)
  LIB_SRC += $(wildcard lib/backend/cuda/*.c)
  CHECK_SRC := $(wildcard lib/check/*.c)
  CU_SRC := $(wildcard kernels/*.cu)
  CPPFLAGS += -I$(CUDA_HOME)/include
  LDLIBS += -L$(CUDA_HOME)/lib64 -lcudart_static -lrt -lstdc++
  # An arch-specific target (90a, 120a) embeds its machine code alone: its PTX
  # would run on no other card and doubled the binaries. A plain one (89)
  # keeps the PTX, which newer cards' drivers can compile.
  comma := ,
  NV_ARCH := $(if $(filter %a,$(MEMRA_CUDA_ARCH)),-gencode arch=compute_$(MEMRA_CUDA_ARCH)$(comma)code=sm_$(MEMRA_CUDA_ARCH),-arch=sm_$(MEMRA_CUDA_ARCH))
  NVCCFLAGS := -std=c++17 -O3 -g -lineinfo -Ilib -I. $(NV_ARCH) \
               -DMEMRA_SM90A=$(if $(filter 90a,$(MEMRA_CUDA_ARCH)),1,0) \
               -Xcompiler -Wall,-Wextra,-Werror -Werror all-warnings -MMD -MP
endif
LIB_OBJ := $(LIB_SRC:%.c=$(B)/%.o) $(CU_SRC:%.cu=$(B)/%.cu.o)
BENCH_OBJ := $(BENCH_SRC:%.c=$(B)/%.o)
CHECK_OBJ := $(CHECK_SRC:%.c=$(B)/%.o)
LIBA := $(if $(filter san,$(VARIANT)),$(B)/libmemra.a,lib/libmemra.a)
BENCHA := $(B)/libmemra-bench.a
CHECKA := $(B)/libmemra-check.a
# The extra archives a program links, before libmemra.a.
PROG_LIBS_memra-bench := $(BENCHA)
PROG_LIBS_memra-parity := $(CHECKA)
TEST_LIBS := $(BENCHA) $(CHECKA)

PROGRAMS := $(patsubst bin-src/%.c,$(BIN)/%,$(wildcard bin-src/memra-*.c))
UNIT_SRC := $(wildcard tests/unit/test_*.c)
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(B)/tests/%)
TEST_TOOL_SRC := $(wildcard tests/tools/*.c)
TEST_TOOLS := $(TEST_TOOL_SRC:tests/tools/%.c=$(B)/tests/tools/%)
DEPS_STAMP := build/.deps-ok
# Rebuild everything when CUDA, the target arch or what it embeds changes.
BUILD_KEY := $(B)/build-key
BUILD_KEY_TEXT := cuda=$(CUDA) arch=$(MEMRA_CUDA_ARCH) code=$(if $(filter %a,$(MEMRA_CUDA_ARCH)),sass,sass+ptx)
$(shell mkdir -p $(B); [ "$$(cat $(BUILD_KEY) 2>/dev/null)" = "$(BUILD_KEY_TEXT)" ] || \
        echo "$(BUILD_KEY_TEXT)" > $(BUILD_KEY))

.PHONY: all check-layers test test-gpu test-cuda-host debug fuzz install clean unit-bins deps aarch64-tests
all: $(LIBA) $(PROGRAMS)

deps: $(DEPS_STAMP)
$(DEPS_STAMP): scripts/deps.sh
	@bash scripts/deps.sh
	@mkdir -p $(@D) && touch $@

# V=1 shows the full commands.
Q := $(if $(V),,@)

$(B)/%.o: %.c $(BUILD_KEY) | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(if $(Q),@echo "  CC    $<")
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(B)/%.cu.o: %.cu $(BUILD_KEY) | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(if $(Q),@echo "  NVCC  $<")
	$(Q)$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(LIBA): $(LIB_OBJ)
	@mkdir -p $(@D)
	$(if $(Q),@echo "  AR    $@")
	$(Q)rm -f $@ && ar rcs $@ $^

$(BENCHA): $(BENCH_OBJ)
	@mkdir -p $(@D)
	$(if $(Q),@echo "  AR    $@")
	$(Q)rm -f $@ && ar rcs $@ $^

# Empty without CUDA (ar makes a valid empty archive).
$(CHECKA): $(CHECK_OBJ)
	@mkdir -p $(@D)
	$(if $(Q),@echo "  AR    $@")
	$(Q)rm -f $@ && ar rcs $@ $^

# A program is bin-src/NAME.c plus, when it has one, the files of its own
# folder bin-src/NAME/ (a program too large for one file).
prog_objs = $(patsubst %.c,$(B)/%.o,$(wildcard bin-src/$(1)/*.c))
.SECONDEXPANSION:
$(BIN)/%: $(B)/bin-src/%.o $$(call prog_objs,$$*) $$(PROG_LIBS_$$*) $(LIBA)
	@mkdir -p $(@D)
	$(if $(Q),@echo "  LD    $@")
	$(Q)$(CC) $(LDFLAGS) $(filter %.o,$^) $(PROG_LIBS_$*) $(LIBA) $(LDLIBS) -o $@

$(B)/tests/%: $(B)/tests/unit/%.o $(TEST_LIBS) $(LIBA)
	@mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) $< $(TEST_LIBS) $(LIBA) $(LDLIBS) -o $@

$(B)/tests/tools/%: $(B)/tests/tools/%.o $(LIBA)
	@mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) $< $(LIBA) $(LDLIBS) -o $@

unit-bins: $(UNIT_BIN) $(TEST_TOOLS)

# The CPU fast path's aarch64 kernels (lib/backend/cpu/cpu_fast_arm.h),
# built by Debian's cross compiler and run under qemu-user by tests/run.sh:
# test_cpu_fast with the library layers it links, static, without CUDA.
# (gcc 12's aarch64 vectorizer crashes on one of the test's loops, so the
# test itself is built without it.)
A64_CC := aarch64-linux-gnu-gcc
A64 := build/aarch64
A64_DIRS := lib/core lib/numerics lib/format lib/backend lib/backend/cpu
A64_OBJ := $(patsubst %.c,$(A64)/%.o,$(foreach d,$(A64_DIRS),$(wildcard $(d)/*.c)))
A64_TEST := $(A64)/tests/test_cpu_fast
$(A64)/%.o: %.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(if $(Q),@echo "  CC64  $<")
	$(Q)$(A64_CC) -Ilib -I. -D_GNU_SOURCE -DMEMRA_CUDA=0 -std=c11 -O2 $(WARN) -MMD -MP -pthread \
	  $(if $(filter tests/%,$<),-fno-tree-vectorize) -c $< -o $@
$(A64)/libmemra-cpu.a: $(A64_OBJ)
	$(Q)rm -f $@ && $(A64_CC:gcc=ar) rcs $@ $^
$(A64_TEST): $(A64)/tests/unit/test_cpu_fast.o $(A64)/libmemra-cpu.a
	$(Q)$(A64_CC) -static -pthread $^ -lm -o $@
aarch64-tests: $(A64_TEST)

debug:
	$(MAKE) VARIANT=san all unit-bins

# The tests run the release programs and the sanitizer build of the unit
# tests and programs, so malformed inputs are checked under ASan + UBSan.
# With CUDA in the build, the kernels also run on the CPU emulation of the
# CUDA model first (the kernel check and device sampling; about 3 minutes
# on 2 cores), so CI, which has no GPU, runs the CUDA code and not only
# compiles it.
# No include climbs a layer (docs/ARCHITECTURE.md).
check-layers:
	@bash scripts/check-layers.sh

test: check-layers all unit-bins
	$(MAKE) VARIANT=san all unit-bins
	@if command -v $(A64_CC) >/dev/null; then $(MAKE) aarch64-tests; fi
	@bash scripts/fetch-test-data.sh >/dev/null
ifeq ($(CUDA),1)
	@bash tests/gpu/emulate.sh --quick
endif
	@bash tests/run.sh

# The CUDA backend's checks, on a machine with a GPU (CI has none):
# kernels against the CPU, golden ids, batch invariance, HF parity on CUDA.
test-gpu: all unit-bins
	@bash tests/gpu/run.sh

# The CUDA code without a GPU: the weight decoders bit for bit against the
# CPU's, and the kernels on a CPU emulation of the CUDA model (docs/GPU.md).
test-cuda-host: all
	@bash tests/gpu/host-decode-check.sh
	@bash tests/gpu/emulate.sh --quick

FUZZ_TARGETS := $(patsubst tests/fuzz/%.c,build/fuzz/%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_LIB_SRC := lib/core/err.c lib/core/check.c lib/core/arena.c lib/core/mapfile.c \
                lib/core/strbuf.c lib/core/json.c lib/core/utf8.c lib/format/dtype.c lib/format/gguf.c \
                lib/format/safetensors.c
build/fuzz/%: tests/fuzz/%.c $(FUZZ_LIB_SRC) | $(DEPS_STAMP)
	@mkdir -p $(@D)
	clang -std=c11 -g -O1 $(CPPFLAGS) -Wall -Wextra -Werror -fsanitize=fuzzer,address,undefined \
	  $< $(FUZZ_LIB_SRC) -Wl,-Bstatic -ljansson -Wl,-Bdynamic -o $@
fuzz: $(FUZZ_TARGETS)
	@for t in $(FUZZ_TARGETS); do \
	  name=$$(basename $$t); mkdir -p build/fuzz/corpus-$$name; \
	  echo "fuzz: $$name for $(FUZZ_SECONDS)s"; \
	  $$t -max_total_time=$(FUZZ_SECONDS) -max_len=65536 build/fuzz/corpus-$$name \
	      tests/fixtures/fuzz-seeds/$$name 2>build/fuzz/$$name.log || \
	      { tail -40 build/fuzz/$$name.log; exit 1; }; \
	  tail -1 build/fuzz/$$name.log; \
	done

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 755 $(PROGRAMS) $(DESTDIR)$(PREFIX)/bin
	install -m 644 $(wildcard man/man1/*.1) $(DESTDIR)$(PREFIX)/share/man/man1
	install -d $(DESTDIR)$(PREFIX)/share/memra/models
	install -m 644 $(wildcard models/*.gguf) models/README.md $(DESTDIR)$(PREFIX)/share/memra/models

clean:
	rm -rf build bin lib/libmemra.a

-include $(shell find build -name '*.d' 2>/dev/null)
