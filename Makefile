# Build, test and run hora from a fresh clone: `make test`, `make demo`.
# Everything Python runs from .venv (made by scripts/setup.sh); the C++ build
# lives in build/, the Python extension's build in build/py.

VENV := .venv
PYTHON := $(VENV)/bin/python
BUILD := build
# The stamp records that the package in .venv matches these sources.
INSTALLED_STAMP := $(BUILD)/py-installed.stamp
PACKAGE_INPUTS := $(shell find python bindings src include -type f \
                    -not -path '*/__pycache__/*' 2>/dev/null) CMakeLists.txt pyproject.toml

# The venv's cmake, ninja and python come first.
export PATH := $(abspath $(VENV)/bin):$(PATH)

.PHONY: setup build cpp python test demo bench clean

setup:
	scripts/setup.sh

build: setup cpp python

# The C++ library and its tests.
cpp: setup
	@test -f $(BUILD)/CMakeCache.txt || \
	  $(VENV)/bin/cmake -S . -B $(BUILD) -G Ninja -DHORA_BUILD_TESTS=ON
	$(VENV)/bin/cmake --build $(BUILD)

# The Python package with its extension, installed into .venv.
python: $(INSTALLED_STAMP)

$(INSTALLED_STAMP): $(PACKAGE_INPUTS) $(VENV)/pyvenv.cfg | setup
	$(PYTHON) -m pip install --no-build-isolation --no-deps .
	@mkdir -p $(BUILD) && touch $@

$(VENV)/pyvenv.cfg:
	scripts/setup.sh

test: build
	$(VENV)/bin/ctest --test-dir $(BUILD) --output-on-failure
	$(PYTHON) -m pytest -q tests/python

# Two tasks training side by side on the even and odd ranks; writes multitask.png.
demo: build
	$(VENV)/bin/horarun -np 4 $(PYTHON) examples/multitask.py

bench: build
	$(PYTHON) benchmarks/allreduce.py

clean:
	rm -rf $(BUILD) dist python/hora.egg-info
	find python tests -name __pycache__ -type d -prune -exec rm -rf {} +
