# tlm — top-level commands. The build itself is CMake; this file only strings steps together.
#   make bench   build, then run the default benchmark (GPU if present, else the CPU backend)
#   make test    build, then run the CPU tests, then the same tests under ASan+UBSan
#   make test-gpu  build, then run the GPU-labelled tests (needs a GPU)
JOBS ?= $(shell nproc)
BUILD ?= build
BUILD_ASAN ?= build-asan
CMAKE_FLAGS ?=
# CI=true turns warnings into errors
ifeq ($(CI),true)
CMAKE_FLAGS += -DTLM_WERROR=ON
endif

.PHONY: all deps build bench test test-cpu test-asan test-gpu clean

all: build

deps:
	@bash tools/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) > $(BUILD).configure.log || (cat $(BUILD).configure.log; exit 1)
	@grep 'tlm:' $(BUILD).configure.log || true
	@cmake --build $(BUILD) -j $(JOBS)

bench: build
	./$(BUILD)/tlm bench $(ARGS)

test: test-cpu test-asan

test-cpu: build
	ctest --test-dir $(BUILD) -L cpu --output-on-failure -j $(JOBS)

# The sanitizer build skips the CUDA code (nvcc objects are not instrumented) and -march=native.
test-asan: deps
	@cmake -S . -B $(BUILD_ASAN) -DCMAKE_BUILD_TYPE=Debug -DTLM_SANITIZE=ON -DTLM_CUDA=OFF $(CMAKE_FLAGS) > $(BUILD_ASAN).configure.log || (cat $(BUILD_ASAN).configure.log; exit 1)
	@cmake --build $(BUILD_ASAN) -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --test-dir $(BUILD_ASAN) -L cpu -E slow --output-on-failure -j $(JOBS)

test-gpu: build
	ctest --test-dir $(BUILD) -L gpu --output-on-failure

clean:
	rm -rf $(BUILD) $(BUILD_ASAN) $(BUILD).configure.log $(BUILD_ASAN).configure.log
