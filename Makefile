# tlm — top-level commands. The build itself is CMake; this file only strings steps together.
#   make bench   build, then run the default benchmark (GPU if present, else the CPU backend)
#   make test    build, then run the CPU tests, then the same tests under ASan+UBSan (float-cast-overflow
#                included), then each fuzz harness of the file readers 60 s (tests/fuzz; skipped without clang)
#   make test-gpu  build, then run the GPU-labelled tests (needs a GPU)
#   make fuzz    run each fuzz harness FUZZ_SECONDS (default 600); make fuzz-coverage: the line
#                coverage of src/io reached by the seed corpus and the corpus the fuzzing grew
JOBS ?= $(shell nproc)
BUILD ?= build
BUILD_ASAN ?= build-asan
BUILD_FUZZ ?= build-fuzz
FUZZ_SECONDS ?= 600
CMAKE_FLAGS ?=
# CI=true turns warnings into errors
ifeq ($(CI),true)
CMAKE_FLAGS += -DTLM_WERROR=ON
endif

.PHONY: all deps build bench test test-cpu test-asan test-fuzz test-gpu fuzz fuzz-coverage clean

all: build

deps:
	@bash tools/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) > $(BUILD).configure.log || (cat $(BUILD).configure.log; exit 1)
	@grep 'tlm:' $(BUILD).configure.log || true
	@cmake --build $(BUILD) -j $(JOBS)

bench: build
	./$(BUILD)/tlm bench $(ARGS)

test: test-cpu test-asan test-fuzz

test-cpu: build
	ctest --test-dir $(BUILD) -L cpu --output-on-failure -j $(JOBS)

# The sanitizer build skips the CUDA code (nvcc objects are not instrumented) and -march=native, with
# -fsanitize=address,undefined,float-cast-overflow (CMakeLists.txt). It uses the default compiler (gcc), whose
# OpenMP runtime (libgomp) is the one Debian's OpenBLAS links: a clang build loads LLVM's libomp beside it, and
# libomp's start-up maps /dev/shm/__KMP_REGISTERED_LIB_<pid>_<uid>; an empty one, left by a process of the same
# pid killed while it started, kills the new process with SIGBUS before main (tests/fuzz/run.sh removes those).
test-asan: deps
	@cmake -S . -B $(BUILD_ASAN) -DCMAKE_BUILD_TYPE=Debug -DTLM_SANITIZE=ON -DTLM_CUDA=OFF $(CMAKE_FLAGS) > $(BUILD_ASAN).configure.log || (cat $(BUILD_ASAN).configure.log; exit 1)
	@grep 'tlm: sanitizers' $(BUILD_ASAN).configure.log || true
	@cmake --build $(BUILD_ASAN) -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --test-dir $(BUILD_ASAN) -L cpu -E slow --output-on-failure -j $(JOBS)

# libFuzzer harnesses of the file readers (tests/fuzz/README.md: safetensors, .npy, tokens, checkpoints,
# plot inputs, --exec profiles): ASan+UBSan, no input may crash, leak, take 10 s or allocate over 1 GiB.
# 60 s each from the seed corpus.
test-fuzz: deps
	@JOBS=$(JOBS) bash tests/fuzz/run.sh --build $(BUILD_FUZZ) --seconds 60 --if-clang

test-gpu: build
	ctest --test-dir $(BUILD) -L gpu --output-on-failure

fuzz: deps
	@JOBS=$(JOBS) bash tests/fuzz/run.sh --build $(BUILD_FUZZ) --seconds $(FUZZ_SECONDS)

fuzz-coverage: deps
	@JOBS=$(JOBS) bash tests/fuzz/run.sh --coverage --build $(BUILD_FUZZ)-cov --fuzzed $(BUILD_FUZZ)

clean:
	rm -rf $(BUILD) $(BUILD_ASAN) $(BUILD).configure.log $(BUILD_ASAN).configure.log
	rm -rf $(BUILD_FUZZ) $(BUILD_FUZZ)-cov $(BUILD_FUZZ).configure.log $(BUILD_FUZZ)-cov.configure.log
