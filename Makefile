# attention: PGXS build of the PostgreSQL extension, the engine test runner and
# (where nvcc exists) the CUDA backend.

EXTENSION = attention
EXTVERSION = 0.4.0

MODULE_big = attention
# The engine (src/*.c, src/*.cc) is plain C11/C++ with no PostgreSQL headers;
# the SQL glue lives in src/pg/.
ENGINE_C = src/bleu.c src/safetensors.c
ENGINE_NN = src/rng.c src/config.c src/batch.c src/model.c src/optim.c src/tensors.c src/score.c \
	src/decode.c src/backend.c src/backend_cpu.c src/blas.c src/cpu_bf16.c src/cpu_precision.c src/cpu_matmul.c src/quantize.c src/parallel.c src/marian.c src/pool.c \
	src/signals.c
ENGINE_CXX = src/spm.cc
# src/pg/common/: the leaves of the SQL glue (settings, catalogue, the model
# cache, translation, the services' registry, training options, the dataset
# feed, tensor files, starting workers, SVG pictures, queries on another server), which include nothing of src/pg/ or
# bgworker/; then the SQL-callable functions (src/pg/) and the background
# workers (bgworker/), which build on the leaves and the engine only
# (scripts/check-structure).
GLUE_LEAVES = src/pg/common/settings.c src/pg/common/cpu_budget.c src/pg/common/catalog.c src/pg/common/model_cache.c \
	src/pg/common/translation.c src/pg/common/service_registry.c src/pg/common/train_options.c \
	src/pg/common/dataset.c src/pg/common/tensor_file.c src/pg/common/workers.c src/pg/common/svg.c \
	src/pg/common/remote.c src/pg/common/rights.c src/pg/common/wait_events.c src/pg/common/progress.c \
	src/pg/common/statistics.c src/pg/common/addin_shmem.c
GLUE_C = $(GLUE_LEAVES) src/pg/attention.c src/pg/bleu_functions.c src/pg/corpus.c src/pg/vocabulary.c \
	src/pg/models.c src/pg/checkpoint.c src/pg/translate.c src/pg/inspect.c src/pg/translate_column.c \
	src/pg/batch_translate.c src/pg/service.c src/pg/checkpoint_file.c src/pg/huggingface.c src/pg/huggingface_m2m100.c src/pg/evaluate.c \
	src/pg/jobs.c src/pg/training_plot.c src/pg/operations.c
WORKER_C = bgworker/worker.c bgworker/history.c bgworker/launcher.c bgworker/ranks.c bgworker/service_worker.c
OBJS = $(ENGINE_C:.c=.o) $(ENGINE_NN:.c=.o) $(ENGINE_CXX:.cc=.o) $(GLUE_C:.c=.o) $(WORKER_C:.c=.o)

# sql/attention.sql is the current version's install script (copied to
# attention--$(EXTVERSION).sql); released versions keep theirs, and upgrade
# scripts attention--A--B.sql lead from each to the next.
DATA = $(filter-out sql/$(EXTENSION)--$(EXTVERSION).sql,$(wildcard sql/$(EXTENSION)--*.sql))
DATA_built = sql/$(EXTENSION)--$(EXTVERSION).sql
REGRESS = builtin_translate corpus vocabulary bleu translate batch_translate service checkpoints quantize training
REGRESS_OPTS = --inputdir=. --load-extension=$(EXTENSION)
ISOLATION = batch_translate_epq
ISOLATION_OPTS = --inputdir=. --load-extension=$(EXTENSION)

WARNINGS = -Wall -Wextra -Werror -Wno-unused-parameter -Wno-missing-field-initializers
PG_CFLAGS = $(WARNINGS) -Isrc -Isrc/pg/common -Isrc/pg -Ibgworker
# libpq (remote.c: a node's session with the coordinator's server), as contrib/dblink builds with it
PG_CPPFLAGS = -I$(libpq_srcdir)
PG_CXXFLAGS = $(WARNINGS) -std=c++17 -Isrc
# A portable library by default: x86-64's baseline instruction set, so a binary
# built on one machine (a package, a cluster of mixed machines) runs on any other;
# OpenBLAS and oneDNN choose their kernels at run time from the CPU they find.
# The engine's own loops compiled for the baseline run within noise of
# -march=native (bench/portable, bench/results/portable-*); OPTFLAGS=-march=native
# opts in where the library never leaves the machine that built it.
OPTFLAGS ?=

# OpenBLAS's OpenMP build: its threads are OpenMP's, which the engine starts
# with every signal blocked. The engine loads it itself (src/blas.h: with a kernel
# family for the CPU, which OpenBLAS's own table may not know), so nothing links it
# but the programs that call it directly (OPENBLAS_LIBS).
OPENBLAS_DIR = /usr/lib/$(shell gcc -print-multiarch)/openblas-openmp
OPENBLAS_INC = /usr/include/$(shell gcc -print-multiarch)/openblas-openmp
OPENBLAS_LIBS = -L$(OPENBLAS_DIR) -Wl,-rpath,$(OPENBLAS_DIR) -lopenblas
ifeq ($(filter clean distclean,$(MAKECMDGOALS)),)
ifeq ($(wildcard $(OPENBLAS_DIR)/libopenblas.so.0),)
$(error OpenBLAS's OpenMP build is not at $(OPENBLAS_DIR): apt-get install libopenblas-openmp-dev)
endif
endif
ENGINE_LIBS = -ldnnl -fopenmp -lm -ldl
# Only the entry points PostgreSQL calls are exported (scripts/check-structure
# checks the result): the magic block, _PG_init, every SQL function with its
# pg_finfo_ record, and the background workers' entry points. Everything else,
# SentencePiece's template instantiations included, stays local to the library;
# PostgreSQL 15 builds without -fvisibility=hidden, so a version script does it
# on every major.
EXPORTS_MAP = src/pg/exports.map
SHLIB_LINK = $(libpq) -lsentencepiece_train -lsentencepiece -lstdc++ $(ENGINE_LIBS) -ldl -Wl,--version-script=$(EXPORTS_MAP)
EXTRA_CLEAN += $(EXPORTS_MAP)

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)

# PGXS would emit LLVM bitcode for every object (JIT inlining) and has no rule
# for C++ or CUDA sources; the extension gains nothing from inlining, so skip it.
override with_llvm = no

include $(PGXS)

# the pg_regress tests this build runs (scripts/test-major)
regress-list:
	@echo $(REGRESS)
.PHONY: regress-list

$(EXPORTS_MAP): $(GLUE_C) $(WORKER_C) bgworker/entry_points.h
	{ echo '{ global: Pg_magic_func; _PG_init;'; \
	  sed -n 's/^PG_FUNCTION_INFO_V1(\(attention_[a-z0-9_]*\));$$/\1; pg_finfo_\1;/p' $(GLUE_C) $(WORKER_C); \
	  sed -n 's/^PGDLLEXPORT void \(attention_[a-z0-9_]*\)(Datum arg);$$/\1;/p' bgworker/entry_points.h; \
	  echo 'local: *; };'; } > $@
$(shlib): $(EXPORTS_MAP)

sql/$(EXTENSION)--$(EXTVERSION).sql: sql/$(EXTENSION).sql
	cp $< $@

# The engine's objects inside attention.so: C11, OPTFLAGS (above), OpenMP, and
# OpenBLAS's headers.
$(ENGINE_NN:.c=.o): override CFLAGS += -std=c11 -O3 $(OPTFLAGS) -fopenmp -isystem $(OPENBLAS_INC) \
	-DTF_OPENBLAS_LIBRARY='"$(OPENBLAS_DIR)/libopenblas.so.0"'

# PGXS tracks no header dependencies: every object depends on the headers it may include.
$(OBJS): $(wildcard src/*.h src/pg/*.h bgworker/*.h)

# PostgreSQL's own headers are not -Wextra clean; treat them as system headers
# so our code is held to -Wall -Wextra -Werror and theirs is not.
override CPPFLAGS := -isystem $(includedir_server) $(CPPFLAGS)

# C++ shim (SentencePiece) compiled as position-independent code like the C objects.
%.o: %.cc
	$(CXX) $(CXXFLAGS) $(CFLAGS_SL) $(CPPFLAGS) -c -o $@ $<

# ---------------------------------------------------------------------------
# CUDA backend (kernels/*.cu), never linked into attention.so: the engine
# loads it with dlopen when a model asks for "cuda".
# - attention_cuda.so: nvcc for sm_80, sm_90 and compute_90 PTX; warnings are
#   errors, and ptxas must report 0 spill bytes for every kernel.
# - attention_cuda_emu.so: the same sources by g++ with kernels/emu/cuda_emu.h
#   and the cuBLAS and cuBLASLt shim over OpenBLAS, run on the CPU (CI; selected in the
#   server by the superuser GUC attention.cuda_library).
# nvcc and the toolkit's headers are autodetected; USE_CUDA=0 skips both.
USE_CUDA ?= 1
CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(or $(shell command -v nvcc 2>/dev/null),$(wildcard $(CUDA_HOME)/bin/nvcc))
CUDA_SRCS = $(wildcard kernels/*.cu)
CUDA_DEPS = $(CUDA_SRCS) $(wildcard kernels/*.cuh kernels/*.h kernels/emu/* src/*.h)
CUDA_WARNINGS = -Wall,-Wextra,-Werror,-Wno-unused-parameter
# NCCL: beside the toolkit's libraries on this image (lib/), or lib64/.
NCCL_LIB ?= $(dir $(firstword $(wildcard $(CUDA_HOME)/lib/libnccl.so $(CUDA_HOME)/lib64/libnccl.so \
	/usr/lib/$(shell gcc -print-multiarch)/libnccl.so)))
EMU_CXXFLAGS = -std=c++17 -O2 -g -fPIC -fvisibility=hidden -Wall -Wextra -Werror -Wno-unused-parameter \
	-Isrc -Ikernels -I$(CUDA_HOME)/include -isystem $(OPENBLAS_INC)
EMU_SHIMS = kernels/emu/cublas_emu.cc kernels/emu/nccl_emu.cc
EMU_LIBS = $(OPENBLAS_LIBS) -pthread
ifneq ($(USE_CUDA),0)
ifneq ($(NVCC),)
# nvcc alone is not the toolkit: without cuBLAS's headers or NCCL the GPU library is left out, saying why
ifeq ($(wildcard $(CUDA_HOME)/include/cublas_v2.h),)
$(warning nvcc is $(NVCC), but $(CUDA_HOME)/include has no cublas_v2.h: the CUDA library is not built (set CUDA_HOME to the toolkit))
else ifeq ($(NCCL_LIB),)
$(warning no libnccl.so in $(CUDA_HOME)/lib, $(CUDA_HOME)/lib64 or /usr/lib: the CUDA library is not built (set NCCL_LIB))
else
CUDA_LIB = attention_cuda$(DLSUFFIX)
NVCC_FLAGS = -O3 -std=c++17 -Xcompiler -fPIC,-fvisibility=hidden,$(CUDA_WARNINGS) -Werror all-warnings \
	-Isrc -Ikernels -Xptxas -v \
	-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
	-gencode arch=compute_90,code=compute_90
all: $(CUDA_LIB)
$(CUDA_LIB): $(CUDA_DEPS)
	$(NVCC) $(NVCC_FLAGS) -shared -o $@ $(CUDA_SRCS) -Xlinker -rpath,$(CUDA_HOME)/lib64 -lcublas -lcublasLt \
		-L$(NCCL_LIB) -Xlinker -rpath,$(NCCL_LIB) -lnccl 2> kernels/ptxas.log || { cat kernels/ptxas.log; exit 1; }
	@spills=$$(grep -c "[1-9][0-9]* bytes spill" kernels/ptxas.log || true); \
	  kernels=$$(grep -c "spill stores" kernels/ptxas.log || true); \
	  echo "nvcc: $$kernels kernel builds (sm_80, sm_90), $$spills with spills"; \
	  [ "$$spills" = 0 ] || { grep -B3 "[1-9][0-9]* bytes spill" kernels/ptxas.log; exit 1; }
install: install-cuda
install-cuda: $(CUDA_LIB)
	$(INSTALL_SHLIB) $(CUDA_LIB) '$(DESTDIR)$(pkglibdir)/$(CUDA_LIB)'
EXTRA_CLEAN += $(CUDA_LIB) kernels/ptxas.log
endif
endif
ifneq ($(wildcard $(CUDA_HOME)/include/cublas_v2.h),)
CUDA_EMU_LIB = attention_cuda_emu$(DLSUFFIX)
all: $(CUDA_EMU_LIB)
$(CUDA_EMU_LIB): $(CUDA_DEPS)
	$(CXX) $(EMU_CXXFLAGS) -shared -o $@ -x c++ $(CUDA_SRCS) -x none $(EMU_SHIMS) $(EMU_LIBS)
install: install-cuda-emu
install-cuda-emu: $(CUDA_EMU_LIB)
	$(INSTALL_SHLIB) $(CUDA_EMU_LIB) '$(DESTDIR)$(pkglibdir)/$(CUDA_EMU_LIB)'
# The harness's own checks (cuBLAS goldens, planted bugs), plain and under ThreadSanitizer.
test/cuda/test_harness: test/cuda/test_harness.cu kernels/emu/cuda_emu.h kernels/emu/mma_emu.h kernels/mma.cuh $(EMU_SHIMS)
	$(CXX) $(EMU_CXXFLAGS) -O1 -o $@ -x c++ test/cuda/test_harness.cu -x none $(EMU_SHIMS) $(EMU_LIBS)
test/cuda/test_harness_tsan: test/cuda/test_harness.cu kernels/emu/cuda_emu.h kernels/emu/mma_emu.h kernels/mma.cuh $(EMU_SHIMS)
	$(CXX) $(EMU_CXXFLAGS) -O1 -fsanitize=thread -DCUEMU_UCONTEXT -o $@ -x c++ test/cuda/test_harness.cu \
		-x none $(EMU_SHIMS) $(EMU_LIBS)
# every backend kernel under ThreadSanitizer
test/cuda/test_kernels_race: test/cuda/test_kernels_race.cu $(CUDA_DEPS)
	$(CXX) $(EMU_CXXFLAGS) -O1 -fsanitize=thread -DCUEMU_UCONTEXT -o $@ -x c++ test/cuda/test_kernels_race.cu \
		$(filter-out kernels/backend_cuda.cu,$(CUDA_SRCS)) -x none $(EMU_LIBS)
# The census build (kernels/emu/census.h): the kernels instrumented by -fsanitize=thread, whose
# hooks (census_hooks.cc, not ThreadSanitizer's runtime) count each global access; no
# vectorisation or store merging, so one hook is one access as written. bench/gpu_census.
CUDA_CENSUS_LIB = attention_cuda_census$(DLSUFFIX)
CENSUS_OBJS = $(patsubst kernels/%.cu,kernels/census/%.o,$(CUDA_SRCS))
kernels/census/%.o: kernels/%.cu $(CUDA_DEPS)
	@mkdir -p kernels/census
	$(CXX) $(EMU_CXXFLAGS) -DCUEMU_CENSUS -fsanitize=thread --param tsan-instrument-func-entry-exit=0 \
		-fno-tree-vectorize -fno-tree-slp-vectorize -fno-store-merging -mtls-dialect=gnu2 -c -o $@ -x c++ $<
$(CUDA_CENSUS_LIB): $(CENSUS_OBJS) kernels/emu/census_hooks.cc $(EMU_SHIMS)
	$(CXX) $(EMU_CXXFLAGS) -DCUEMU_CENSUS -mtls-dialect=gnu2 -shared -Wl,--no-undefined -o $@ $(CENSUS_OBJS) \
		kernels/emu/census_hooks.cc $(EMU_SHIMS) $(EMU_LIBS)
test/cuda/test_census: test/cuda/test_census.cu kernels/emu/cuda_emu.h kernels/emu/census.h kernels/emu/census_hooks.cc kernels/common.cuh \
		kernels/mma.cuh kernels/emu/mma_emu.h
	$(CXX) $(EMU_CXXFLAGS) -DCUEMU_CENSUS -fsanitize=thread --param tsan-instrument-func-entry-exit=0 \
		-fno-tree-vectorize -fno-tree-slp-vectorize -fno-store-merging -mtls-dialect=gnu2 -c -o test/cuda/test_census.o \
		-x c++ test/cuda/test_census.cu
	$(CXX) $(EMU_CXXFLAGS) -DCUEMU_CENSUS -mtls-dialect=gnu2 -o $@ test/cuda/test_census.o kernels/emu/census_hooks.cc -pthread
EXTRA_CLEAN += test/cuda/test_census test/cuda/test_census.o
EXTRA_CLEAN += $(CUDA_EMU_LIB) $(CUDA_CENSUS_LIB) kernels/census test/cuda/test_harness test/cuda/test_harness_tsan \
	test/cuda/test_kernels_race
# training jobs on emulated GPUs through the server: one device, then data parallelism
REGRESS += cuda cuda_parallel
endif
endif

.PHONY: check-cuda-emu check-cuda
# The engine tests' program (built below); defined here because a rule's
# prerequisites are expanded where the rule is read.
ENGINE_TEST_SRCS = $(wildcard test/engine/*.c)
ENGINE_TEST_BIN = test/engine/run_tests
# Every kernel on the emulator against the CPU backend, in three fiber orders (scripts/test-cuda-emu);
# cuda-emu-deps builds what it needs (the test command builds it beside nvcc's library, make -j).
CUDA_EMU_DEPS = $(ENGINE_TEST_BIN) $(CUDA_EMU_LIB) test/cuda/test_harness test/cuda/test_harness_tsan \
	test/cuda/test_kernels_race test/cuda/precision_debian test/cuda/test_census $(CUDA_CENSUS_LIB) bench/census_step
.PHONY: cuda-emu-deps
cuda-emu-deps: $(CUDA_EMU_DEPS)
check-cuda-emu: $(CUDA_EMU_DEPS)
	scripts/test-cuda-emu
# The same engine tests on a real GPU.
check-cuda: $(ENGINE_TEST_BIN) $(CUDA_LIB)
	./$(ENGINE_TEST_BIN) test/fixtures cuda ./$(CUDA_LIB)

# ---------------------------------------------------------------------------
# Engine unit tests: a standalone C program (no PostgreSQL) built with the
# engine sources; it also runs on the GPU machine.
ENGINE_STD_CFLAGS = -std=c11 -O3 $(OPTFLAGS) -g -fopenmp $(WARNINGS) -Isrc -isystem $(OPENBLAS_INC) \
	-DTF_OPENBLAS_LIBRARY='"$(OPENBLAS_DIR)/libopenblas.so.0"'
EXTRA_CLEAN += $(ENGINE_TEST_BIN) test/engine/spm.o test/engine/spm_asan.o

test/engine/spm.o: $(ENGINE_CXX) src/spm.h
	$(CXX) -std=c++17 -O2 -g $(WARNINGS) -Isrc -c -o $@ $<

$(ENGINE_TEST_BIN): $(ENGINE_TEST_SRCS) $(ENGINE_C) $(ENGINE_NN) $(wildcard src/*.h test/engine/*.h) test/engine/spm.o
	$(CC) $(ENGINE_STD_CFLAGS) -o $@ $(ENGINE_TEST_SRCS) $(ENGINE_C) $(ENGINE_NN) test/engine/spm.o \
		-lsentencepiece_train -lsentencepiece -lstdc++ $(ENGINE_LIBS) -ldl

# The same runner for this machine's ISA (-march=native): the negative control of
# scripts/test-portable, which runs both on an emulated AVX2-only CPU.
EXTRA_CLEAN += test/engine/run_tests_native
test/engine/run_tests_native: $(ENGINE_TEST_SRCS) $(ENGINE_C) $(ENGINE_NN) $(wildcard src/*.h test/engine/*.h) test/engine/spm.o
	$(CC) $(ENGINE_STD_CFLAGS) -march=native -o $@ $(ENGINE_TEST_SRCS) $(ENGINE_C) $(ENGINE_NN) test/engine/spm.o \
		-lsentencepiece_train -lsentencepiece -lstdc++ $(ENGINE_LIBS) -ldl

# Benchmarks (bench/run drives them).
BENCH_BIN = bench/train_step bench/decode bench/parallel_counts bench/cpu_matmul bench/census_step
EXTRA_CLEAN += $(BENCH_BIN)
bench/train_step: bench/train_step.c bench/corpus.h bench/device.h $(ENGINE_NN) $(wildcard src/*.h) test/engine/spm.o
	$(CC) $(ENGINE_STD_CFLAGS) -o $@ bench/train_step.c $(ENGINE_NN) test/engine/spm.o \
		-lsentencepiece_train -lsentencepiece -lstdc++ $(ENGINE_LIBS) -ldl
# bf16 against fp32 on the real corpus (scripts/test-cuda-emu)
test/cuda/precision_debian: test/cuda/precision_debian.c bench/corpus.h $(ENGINE_NN) $(wildcard src/*.h) \
		test/engine/spm.o
	$(CC) $(ENGINE_STD_CFLAGS) -o $@ test/cuda/precision_debian.c $(ENGINE_NN) test/engine/spm.o \
		-lsentencepiece_train -lsentencepiece -lstdc++ $(ENGINE_LIBS) -ldl
EXTRA_CLEAN += test/cuda/precision_debian
bench/decode: bench/decode.c bench/device.h $(ENGINE_NN) $(wildcard src/*.h)
	$(CC) $(ENGINE_STD_CFLAGS) -o $@ bench/decode.c $(ENGINE_NN) $(ENGINE_LIBS) -ldl
bench/census_step: bench/census_step.c bench/device.h $(ENGINE_NN) $(wildcard src/*.h)
	$(CC) $(ENGINE_STD_CFLAGS) -o $@ bench/census_step.c $(ENGINE_NN) $(ENGINE_LIBS) -ldl
bench/cpu_matmul: bench/cpu_matmul.c
	$(CC) $(ENGINE_STD_CFLAGS) -o $@ bench/cpu_matmul.c $(ENGINE_LIBS) $(OPENBLAS_LIBS)
bench/parallel_counts: bench/parallel_counts.c $(ENGINE_NN) $(wildcard src/*.h)
	$(CC) $(ENGINE_STD_CFLAGS) -o $@ bench/parallel_counts.c $(ENGINE_NN) $(ENGINE_LIBS) -ldl

# The same tests under AddressSanitizer and UndefinedBehaviorSanitizer.
ENGINE_ASAN_BIN = test/engine/run_tests_asan
EXTRA_CLEAN += $(ENGINE_ASAN_BIN)
$(ENGINE_ASAN_BIN): $(ENGINE_TEST_SRCS) $(ENGINE_C) $(ENGINE_NN) $(ENGINE_CXX) $(wildcard src/*.h)
	$(CXX) -std=c++17 -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer $(WARNINGS) -Isrc \
		-c -o test/engine/spm_asan.o $(ENGINE_CXX)
	$(CC) $(ENGINE_STD_CFLAGS) -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all \
		-o $@ $(ENGINE_TEST_SRCS) $(ENGINE_C) $(ENGINE_NN) test/engine/spm_asan.o \
		-lsentencepiece_train -lsentencepiece -lstdc++ $(ENGINE_LIBS) -ldl

# libFuzzer targets (test/fuzz/, clang): the safetensors header parser, the
# SentencePiece loading that import_vocabulary does, and the BLEU tokenizer;
# check-fuzz runs each from its committed seed corpus for a stated number of
# inputs (FUZZ_RUNS_*), new inputs going to a scratch directory.
FUZZ_CC ?= clang
FUZZ_CXX ?= clang++
FUZZ_FLAGS = -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -Isrc
FUZZ_BIN = test/fuzz/fuzz_safetensors test/fuzz/fuzz_bleu test/fuzz/fuzz_vocabulary
FUZZ_RUNS_SAFETENSORS ?= 2000000
FUZZ_RUNS_BLEU ?= 200000
FUZZ_RUNS_VOCABULARY ?= 20000
EXTRA_CLEAN += $(FUZZ_BIN)
test/fuzz/fuzz_safetensors: test/fuzz/fuzz_safetensors.c src/safetensors.c src/safetensors.h
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ test/fuzz/fuzz_safetensors.c src/safetensors.c
test/fuzz/fuzz_bleu: test/fuzz/fuzz_bleu.c src/bleu.c src/bleu.h
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ test/fuzz/fuzz_bleu.c src/bleu.c -lm
test/fuzz/fuzz_vocabulary: test/fuzz/fuzz_vocabulary.cc src/spm.cc src/spm.h
	$(FUZZ_CXX) -std=c++17 $(FUZZ_FLAGS) -o $@ test/fuzz/fuzz_vocabulary.cc src/spm.cc \
		-lsentencepiece_train -lsentencepiece -lpthread

.PHONY: check-fuzz
check-fuzz: $(FUZZ_BIN)
	scripts/test-fuzz $(FUZZ_RUNS_SAFETENSORS) $(FUZZ_RUNS_BLEU) $(FUZZ_RUNS_VOCABULARY)

.PHONY: check-engine check-engine-asan test demo
# Every suite under this CPU's own kernels (OpenBLAS's family and oneDNN's ISA as
# they pick them), then again under a pinned pair that every AVX2 CPU runs:
# OpenBLAS's Haswell kernels (the bf16 fixture's family; on an AVX-512 CPU they sum
# differently from its own) and oneDNN held to AVX2 (no VNNI: 7-bit int8 weights).
# A fixture that only one CPU reproduces fails one of the two on any machine.
# (forced on a CPU without AVX2, OpenBLAS's Haswell kernels would die of SIGILL: skipped there)
PINNED_CPU = OPENBLAS_CORETYPE=Haswell ONEDNN_MAX_CPU_ISA=AVX2
check-engine: $(ENGINE_TEST_BIN)
	./$(ENGINE_TEST_BIN) test/fixtures
	if grep -qw avx2 /proc/cpuinfo; then $(PINNED_CPU) ./$(ENGINE_TEST_BIN) test/fixtures; \
	else echo "SKIPPED the pinned run: this CPU has no AVX2"; fi

check-engine-asan: $(ENGINE_ASAN_BIN)
	ASAN_OPTIONS=detect_leaks=1 ./$(ENGINE_ASAN_BIN) test/fixtures

# The two commands of the README (demo, tests).
test:
	scripts/test
demo:
	scripts/demo
