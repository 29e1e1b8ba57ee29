# strata build. `make` builds build/strata and build/libstrata.a; `make test`
# builds and runs every Criterion suite; `make bench` runs the benchmarks.
# The build says what it found: OpenMP, oneDNN, cJSON, Criterion, nvcc.

CC      ?= gcc
NVCC    ?= nvcc
BUILD   ?= build
OPT     ?= -O3 -march=native
WARN    := -Wall -Wextra -Wshadow -Wno-unused-parameter -Wstrict-prototypes -Wvla
CFLAGS  += -std=gnu11 $(OPT) $(WARN) -g -fno-fast-math -fno-math-errno -Isrc -I/usr/include/cjson -MMD -MP
# OpenBLAS: the OpenMP build where installed (scripts/setup installs it), so
# that LAPACK/BLAS calls (the GaLore projector) share OpenMP's threads with
# oneDNN and strata's kernels. The default pthreads build keeps its own
# spinning threads, which doubled the 2-core machine's thread count and made
# steps with projectors up to 2x slower than the same work timed alone.
MULTIARCH := $(shell $(CC) -print-multiarch 2>/dev/null)
OPENBLAS_OMP := /usr/lib/$(MULTIARCH)/openblas-openmp
ifneq ($(wildcard $(OPENBLAS_OMP)/libopenblas.so.0),)
BLAS_LIB := -L$(OPENBLAS_OMP) -Wl,-rpath,$(OPENBLAS_OMP) -l:libopenblas.so.0
else
BLAS_LIB := -lopenblas
endif
LDLIBS  += -ldnnl -lcjson $(BLAS_LIB) -luring -lxxhash -lpcre2-8 -lm -lpthread
BENCH_LIBS :=

# --- OpenMP -----------------------------------------------------------------
HAVE_OPENMP := $(shell echo 'int main(void){return 0;}' | $(CC) -fopenmp -x c - -o /dev/null 2>/dev/null && echo 1)
ifeq ($(HAVE_OPENMP),1)
CFLAGS  += -fopenmp
LDFLAGS += -fopenmp
endif

# --- CUDA (compiled whenever nvcc exists; runs only where a GPU exists) -------
HAVE_NVCC := $(shell command -v $(NVCC) >/dev/null 2>&1 && echo 1)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(shell command -v $(NVCC) 2>/dev/null))
CU_SRC  := $(wildcard src/ops/cuda/*.cu)
ifeq ($(HAVE_NVCC),1)
CFLAGS  += -DST_HAVE_CUDA=1 -I$(CUDA_HOME)/include
# machine code for Ampere (sm_80) and Hopper (sm_90), and compute_80 PTX that
# the driver compiles for the GPUs between and after (sm_86, sm_89, ...): the
# kernels use nothing Hopper's own. -MMD -MP: a changed header (ops.h's args
# structs, passed to the kernels by value) rebuilds the .cu objects.
NVFLAGS := -O3 -std=c++17 -Isrc -Xcompiler -fPIC -DST_HAVE_CUDA=1 -MMD -MP \
	   -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
	   -gencode arch=compute_80,code=compute_80
LDLIBS  += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lstdc++
CU_OBJ  := $(CU_SRC:%.cu=$(BUILD)/%.o)
endif

SRC     := $(filter-out src/cli/%,$(wildcard src/*/*.c src/*/*/*.c))
CLI_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(wildcard src/cli/*.c))
OBJ     := $(SRC:%.c=$(BUILD)/%.o) $(CU_OBJ)
LIB     := $(BUILD)/libstrata.a
BIN     := $(BUILD)/strata

TEST_SRC  := $(wildcard tests/test_*.c)
TEST_BIN  := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
BENCH_SRC := $(wildcard bench/*.c)
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)

.PHONY: all test bench clean info refdata install
all: info $(BIN)

info:
	@echo "strata build: cc=$(CC) openmp=$(if $(HAVE_OPENMP),yes,NO) matmul=oneDNN blas=$(if $(findstring openmp,$(BLAS_LIB)),OpenBLAS-OpenMP,OpenBLAS (pthreads build: run scripts/setup for the OpenMP one)) cjson=yes cuda=$(if $(HAVE_NVCC),yes ($(CUDA_HOME)),no (nvcc not found: CPU backend only))"

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -c $< -o $@

$(LIB): $(OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BIN): $(CLI_OBJ) $(LIB)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(LIB) tests/testutil.h tests/cliutil.h tests/jsonutil.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests $< $(LIB) -o $@ $(LDFLAGS) $(LDLIBS) -lcriterion

# The benchmarks parse their options with the CLI's parser (src/cli/args.c).
BENCH_OBJ := $(BUILD)/src/cli/args.o
$(BUILD)/bench/%: bench/%.c $(BENCH_OBJ) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(BENCH_OBJ) $(LIB) -o $@ $(LDFLAGS) $(LDLIBS) $(BENCH_LIBS)

# Each suite runs in its own process, one at a time (they use both cores).
test: $(BIN) $(TEST_BIN) $(BENCH_BIN)
	@STRATA_BIN=$(abspath $(BIN)) sh tests/run-all.sh $(TEST_BIN)

# `make bench` runs all of them; `make bench BENCH=optim` (or train) one.
bench: $(BIN) $(BENCH_BIN)
	sh bench/run.sh $(BENCH)

# Regenerate the whole-model gradient reference data (needs PyTorch).
refdata:
	python3 scripts/gradref.py --out tests/data/gradref
	python3 scripts/gradref.py --out tests/data/gradref --bf16

# The binary alone (`make install PREFIX=~/.local`); it is built for this
# machine's CPU (-march=native) and finds OpenBLAS and CUDA where it was built.
PREFIX ?= /usr/local
install: $(BIN)
	install -D -m 755 $(BIN) $(DESTDIR)$(PREFIX)/bin/strata

clean:
	rm -rf $(BUILD)

-include $(OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(BENCH_BIN:=.d) $(TEST_BIN:=.d)
