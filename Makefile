# Build, test and run hora from a fresh clone: `make test`, `make demo`.
# Everything Python runs from .venv (hora.mxnet's tests from .venv-mxnet; both
# made by scripts/setup.sh); the C++ build lives in build/, the Python
# extension's build in build/py, the wheel pip builds in build/wheel and the
# portable one made of it (`make wheel`) in build/wheelhouse.

VENV := .venv
PYTHON := $(VENV)/bin/python
BUILD := build
# MXNet 1.9 needs numpy<1.24: hora.mxnet's tests run in a venv of their own.
MXNET_VENV := .venv-mxnet
# The stamps record that the wheel in build/wheelhouse, and the package in
# .venv and in .venv-mxnet (the same wheel), match these sources.
WHEEL_STAMP := $(BUILD)/wheel.stamp
INSTALLED_STAMP := $(BUILD)/py-installed.stamp
MXNET_INSTALLED_STAMP := $(BUILD)/py-mxnet-installed.stamp
PACKAGE_INPUTS := $(shell find python bindings src include -type f \
                    -not -path '*/__pycache__/*' 2>/dev/null) CMakeLists.txt pyproject.toml

# The venv's cmake, ninja and python come first.
export PATH := $(abspath $(VENV)/bin):$(PATH)

.PHONY: setup build cpp wheel python test fuzz sanitize sanitize-asan sanitize-tsan demo bench clean

setup:
	scripts/setup.sh

build: setup cpp python

# The C++ library and its tests.
cpp: setup
	@test -f $(BUILD)/CMakeCache.txt || \
	  $(VENV)/bin/cmake -S . -B $(BUILD) -G Ninja -DHORA_BUILD_TESTS=ON
	$(VENV)/bin/cmake --build $(BUILD)

# The wheel users install (docs/install.md): pip builds it, then auditwheel
# copies Gloo and the libraries it needs into it (hora.libs/) and gives it a
# manylinux tag. Open MPI stays out: the MPI plugin links none and runs on
# the machine's own MPI, the one mpirun belongs to; the excludes keep it out
# should anything link it.
WHEELHOUSE := $(BUILD)/wheelhouse
MPI_LIBRARIES := libmpi.so.* libmpi_cxx.so.* libopen-rte.so.* libopen-pal.so.*
wheel: $(WHEEL_STAMP)

# The Python package with its extension, built once as that wheel and
# installed into .venv and .venv-mxnet (both are made by setup.sh's python3),
# so that every test runs what users install.
python: $(INSTALLED_STAMP) $(MXNET_INSTALLED_STAMP)

$(WHEEL_STAMP): $(PACKAGE_INPUTS) $(VENV)/pyvenv.cfg | setup
	rm -rf $(BUILD)/wheel $(WHEELHOUSE)
	$(PYTHON) -m pip wheel --no-build-isolation --no-deps -w $(BUILD)/wheel .
	$(VENV)/bin/auditwheel repair $(foreach lib,$(MPI_LIBRARIES),--exclude '$(lib)') \
	  -w $(WHEELHOUSE) $(BUILD)/wheel/hora-*.whl
	@touch $@

$(INSTALLED_STAMP): $(WHEEL_STAMP)
	$(PYTHON) -m pip install --no-deps --force-reinstall $(WHEELHOUSE)/hora-*.whl
	@touch $@

$(MXNET_INSTALLED_STAMP): $(WHEEL_STAMP) $(MXNET_VENV)/pyvenv.cfg
	$(MXNET_VENV)/bin/python -m pip install --no-deps --force-reinstall $(WHEELHOUSE)/hora-*.whl
	@touch $@

$(VENV)/pyvenv.cfg $(MXNET_VENV)/pyvenv.cfg:
	scripts/setup.sh

test: build fuzz
	$(VENV)/bin/ctest --test-dir $(BUILD) --output-on-failure
	$(PYTHON) -m pytest -q tests/python
	$(MXNET_VENV)/bin/python -m pytest -q tests/python/mxnet

# The libFuzzer targets in fuzz/ (clang), each for FUZZ_SECONDS.
FUZZ_BUILD := build-fuzz
FUZZ_SECONDS ?= 30
FUZZ_TARGETS := control_wire_fuzzer store_protocol_fuzzer store_server_fuzzer segment_header_fuzzer \
  segment_record_fuzzer control_frames_fuzzer control_hello_fuzzer shm_ring_fuzzer
fuzz: setup
	@test -f $(FUZZ_BUILD)/CMakeCache.txt || \
	  $(VENV)/bin/cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_CXX_COMPILER=clang++ \
	    -DHORA_BUILD_FUZZERS=ON -DHORA_BUILD_TESTS=OFF -DHORA_WITH_MPI=OFF
	$(VENV)/bin/cmake --build $(FUZZ_BUILD) --target $(FUZZ_TARGETS) write_seeds
	scripts/fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

# The C++ tests built and run under AddressSanitizer + UndefinedBehavior-
# Sanitizer (build-asan) and under ThreadSanitizer (build-tsan), without MPI
# (docs/testing.md). A report fails the test it comes from.
SANITIZE_asan := address,undefined
SANITIZE_tsan := thread
export ASAN_OPTIONS := detect_leaks=1:halt_on_error=1:strict_string_checks=1
export UBSAN_OPTIONS := print_stacktrace=1:halt_on_error=1
export TSAN_OPTIONS := halt_on_error=1:second_deadlock_stack=1:suppressions=$(abspath tests/sanitizers/tsan.supp)
sanitize: sanitize-asan sanitize-tsan
sanitize-asan sanitize-tsan: sanitize-%: setup
	@test -f build-$*/CMakeCache.txt || \
	  $(VENV)/bin/cmake -S . -B build-$* -G Ninja -DHORA_BUILD_TESTS=ON -DHORA_WITH_MPI=OFF \
	    -DHORA_SANITIZE=$(SANITIZE_$*)
	$(VENV)/bin/cmake --build build-$*
	$(VENV)/bin/ctest --test-dir build-$* --output-on-failure

# Two tasks training side by side on the even and odd ranks; writes multitask.png.
demo: build
	$(VENV)/bin/horarun -np 4 $(PYTHON) examples/multitask.py

bench: build
	$(PYTHON) benchmarks/allreduce.py

clean:
	rm -rf $(BUILD) $(FUZZ_BUILD) build-asan build-tsan dist python/hora.egg-info
	find python tests -name __pycache__ -type d -prune -exec rm -rf {} +
