# Quick start:   make run    (install what is missing, build, run the main job on its defaults)
#                make test   (install what is missing, build, run every test through ctest)
BUILD ?= build
JOBS ?= 2
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=RelWithDebInfo

.PHONY: all deps build run test bench-trainer bench-recovery bench-ft-cost chaos test-asan test-tsan test-sanitize equivalence fuzz fuzz-smoke fuzz-build pip-install-check clean

all: build

deps:
	@scripts/install-deps.sh

$(BUILD)/build.ninja: CMakeLists.txt | deps
	cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS)

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

# The main job on its embedded defaults: the debug Llama model trained with FSDP over NPROC local
# ranks joined through shared memory (fsdp-run serves the rendezvous; no MPI or cluster needed).
NPROC ?= 2
RUN_ARGS ?= --training.steps 100
run: build
	$(BUILD)/launch/fsdp-run --nproc $(NPROC) -- $(BUILD)/train/fsdp-train --config configs/debug_model.toml $(RUN_ARGS)

# Every test runs with the collective fingerprint check on: a test whose ranks disagree on a
# collective fails at once naming both calls, instead of timing out (docs/errors.md).
TEST_ENV = FSDP_CHECK_COLLECTIVES=1
test: build
	cd $(BUILD) && $(TEST_ENV) ctest -j $(JOBS) --output-on-failure --timeout 300

# The standard comparison (fsdp-bench, 2 ranks pinned to separate cores, every backend and the memcpy
# bound in one run per collective); regenerates docs/benchmarks.md and its plots (docs/benchmarks_*.svg).
bench: build
	bench/run_standard.sh $(BUILD)

# The Python trainer (python -m fsdp_runtime.train) against fsdp-train on the same TOML, 2 ranks, interleaved:
# tokens/s and where each one's step goes (docs/benchmarks.md). Not in CI (ctest python.trainer_vs_fsdp_train
# runs it for 3 steps of a tiny model).
bench-trainer: build
	/usr/bin/python3 bench/trainer_vs_fsdp_train.py --build $(BUILD)

# What a lost rank costs (docs/fault_tolerance.md): recovery in the job at 2, 3, 4 ranks split into its
# phases, the same kill with restart from a checkpoint, and the redundancy's step time, interleaved.
bench-recovery: build
	bench/ft_recovery.sh $(BUILD)

# The redundancy's cost in step time: 2 ranks, fault_tolerance on and off interleaved, PAIRS pairs
# (docs/fault_tolerance.md). Not in CI.
PAIRS ?= 6
bench-ft-cost: build
	bench/ft_cost.sh $(BUILD) $(PAIRS)

# A 4-rank fault-tolerant job with a random rank SIGKILLed every 2 s down to 2 ranks, against the run
# nobody killed (docs/fault_tolerance.md). Not in CI.
chaos: build
	bench/chaos.sh $(BUILD)

# The full equivalence check (CI runs the same tests on a tiny model): the debug model for 20 steps at
# N = 2, 3, 4 and HSDP 2 x 2, reshard on/off/2, 2 accumulation steps, against the 1-rank run within 1e-5
# (and the MoE debug model with expert parallelism, N = 2, 4, EP 2, 4: Layouts/TrainerExpertParallel);
# and checkpoint resume N = 4 -> M = 2, 3, 4 (bitwise at M = N).
#
# The PyTorch front end (python -m fsdp_runtime.train, where torch is installed), on the debug model:
# N = 2, 3, 4 and HSDP 2 x 2 against 1 rank, and against fsdp-train from the same weights (1e-5 over 20 steps).
PY_EQUIVALENCE = FSDP_EQUIVALENCE=full FSDP_PYTHON_PATH=$(abspath $(BUILD))/python /usr/bin/python3
equivalence: build
	FSDP_EQUIVALENCE=full $(BUILD)/tests/train/trainer_test --gtest_filter='Trainer.*:Layouts/*'
	FSDP_EQUIVALENCE=full $(BUILD)/tests/train/train_job_test --gtest_filter='*Resume*'
	@if [ -d $(BUILD)/python/fsdp_runtime ]; then \
	  for layout in 2 3 4 2x2; do \
	    $(PY_EQUIVALENCE) tests/python/test_train_equivalence.py $(BUILD)/launch/fsdp-run $$layout || exit 1; \
	  done; \
	  $(PY_EQUIVALENCE) tests/python/test_train_vs_fsdp_train.py $(BUILD)/launch/fsdp-run $(BUILD)/train/fsdp-train; \
	else echo "equivalence: PyTorch front end not built, its checks SKIPPED"; fi

# pip install ./python as a user does (docs/pytorch.md, "Install"): pip's build configures the project
# in build-python/ (no tests) and builds the extension and fsdp-run there (minutes from nothing on 2
# cores; ccache serves what make built), installs into a fresh venv over the system's torch, and runs
# a 2-rank job from outside the repository. ctest's packaging.PipInstall does the same over $(BUILD).
pip-install-check: deps
	cmake -DPYTHON=/usr/bin/python3 -DSOURCE_DIR=$(CURDIR) -DWORK_DIR=$(abspath $(BUILD))-pip-install \
	  -P tests/packaging/pip_install.cmake

# Sanitizer configurations: only the layers where races and memory bugs live (threads, shared memory,
# sockets, bytes from outside) and, under ASan + UBSan, the sizes computed from user input (spec,
# sharding: checked int64, a second or two of tests), each built alone (tests_<layer> targets) and run with its widest sweeps
# trimmed, because everything runs 3x (ASan) to 10x (TSan) slower and the normal build already checks
# the whole matrix: process and launcher jobs at 1-2 ranks (3-4 ranks repeat the same code paths),
# the in-process matrices on one type per element size class (float, bfloat16, fp8_e4m3, int64) and
# without 4 and 7 ranks, three of the five hierarchical layouts, no 16- and 144-rank cases, and none of
# the two-host or fake-host runs, which repeat across processes what the in-process suites already
# check. TSan leaves out the model layer (single-threaded maths).
ASAN_LAYERS = common spec collectives sharding launch nccl runtime model
TSAN_LAYERS = common collectives launch nccl runtime
# What SANITIZE_EXCLUDE leaves out, one concern per line (ctest -E regexes joined with |):
SANITIZE_SKIP_SCALE = [_/]n(16|144)(_|$$)|TwoHosts|FakeHosts
SANITIZE_SKIP_MATRIX = Matrix.*_n[47]_|Matrix\..*_(int8|uint8|int32|uint32|uint64|half|double|fp8_e5m2)$$
SANITIZE_SKIP_LAYOUTS = Hierarchical.*/(one_rank_per_host|two_by_four_round_robin)$$
SANITIZE_SKIP_PROCESS_JOBS = Processes\.EveryCollective.*/n[34]_|MpiJobs.*/n[34]$$|FsdpRunWorld.*_[34]$$|FsdpRunWorld.*/ucx_|MpirunWorld.*_4$$|MpirunWorld.*/ucx_
SANITIZE_SKIP_NCCL_API = InitAll.*/n[3-9]_count70000$$|nccl\.mpi\.np3$$
SANITIZE_EXCLUDE = $(SANITIZE_SKIP_SCALE)|$(SANITIZE_SKIP_MATRIX)|$(SANITIZE_SKIP_LAYOUTS)|$(SANITIZE_SKIP_PROCESS_JOBS)|$(SANITIZE_SKIP_NCCL_API)
empty :=
space := $(empty) $(empty)
layer_targets = $(addprefix tests_,$(1))
layer_labels = ^($(subst $(space),|,$(strip $(1))))$$
# UCX's memory hooks (mmap/malloc interposition) crash under ThreadSanitizer when a thread starts, in
# any binary that loads libucp: sanitizer runs do without them (UCX only loses its registration cache).
# The build needs them off too: test discovery runs every test binary (OpenBLAS starts its threads
# at load, so even the model tests crash there).
SANITIZE_ENV = UCX_MEM_MMAP_HOOK_MODE=none UCX_MEM_MALLOC_HOOKS=no
test-asan: deps
	cmake -S . -B $(BUILD)-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DFSDP_SANITIZE=address
	$(SANITIZE_ENV) cmake --build $(BUILD)-asan -j $(JOBS) --target $(call layer_targets,$(ASAN_LAYERS))
	cd $(BUILD)-asan && $(SANITIZE_ENV) $(TEST_ENV) ctest -j $(JOBS) --output-on-failure --timeout 600 -L '$(call layer_labels,$(ASAN_LAYERS))' -E '$(SANITIZE_EXCLUDE)'

# OpenBLAS's worker threads are not instrumented, so TSan sees their writes to a GEMM's output
# without the synchronisation that orders them: TSan runs keep OpenBLAS on the calling thread.
test-tsan: deps
	cmake -S . -B $(BUILD)-tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DFSDP_SANITIZE=thread
	$(SANITIZE_ENV) cmake --build $(BUILD)-tsan -j $(JOBS) --target $(call layer_targets,$(TSAN_LAYERS))
	cd $(BUILD)-tsan && $(SANITIZE_ENV) $(TEST_ENV) OPENBLAS_NUM_THREADS=1 ctest -j $(JOBS) --output-on-failure --timeout 600 -L '$(call layer_labels,$(TSAN_LAYERS))' -E '$(SANITIZE_EXCLUDE)'

test-sanitize: test-asan test-tsan

# libFuzzer targets over the decoders of bytes from outside (docs/fuzzing.md): a clang build of only
# those (ASan + UBSan), then FUZZ_SECONDS per target from the checked-in seeds; fuzz-smoke is CI's.
FUZZ_SECONDS ?= 60
fuzz-build: deps
	CC=clang CXX=clang++ cmake -S . -B $(BUILD)-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFSDP_FUZZ=ON -DBUILD_TESTING=OFF
	cmake --build $(BUILD)-fuzz -j $(JOBS)

fuzz: fuzz-build
	FUZZ_SECONDS=$(FUZZ_SECONDS) fuzz/run.sh $(BUILD)-fuzz

fuzz-smoke: fuzz-build
	FUZZ_SECONDS=10 fuzz/run.sh $(BUILD)-fuzz

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-tsan $(BUILD)-fuzz $(BUILD)-pip-install build-python python/build
