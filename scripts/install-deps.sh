#!/usr/bin/env bash
# Installs the Debian packages the build and tests need, and only those missing. Idempotent: a
# second run installs nothing and takes about a second.
set -euo pipefail

packages=(
  cmake ninja-build g++ make pkg-config ccache  # toolchain
  libgtest-dev libgmock-dev                     # tests
  protobuf-compiler libprotobuf-dev libtomlplusplus-dev  # sharding planner
  libboost-dev                                  # tcp transport (header-only Asio)
  zlib1g-dev                                    # gzipped training data (c4's *.json.gz)
  libopenblas-dev                               # reference model matmuls (cblas_sgemm)
  openmpi-bin libopenmpi-dev                    # mpirun, the MPI transport and the mpi-native benchmark peer
  libucx-dev                                    # the UCX transport (ucp)
  libgloo-dev                                   # the Gloo benchmark peer (fsdp-bench --backend gloo)
  python3-torch libtorch-dev pybind11-dev python3-dev  # the PyTorch backend fsdp_runtime (python/, docs/pytorch.md)
  python3-pip python3-setuptools python3-wheel  # pip install ./python (docs/pytorch.md, "Install")
  iproute2                                      # network namespaces for the two-host tests
  clang libclang-rt-14-dev                      # libFuzzer and its sanitizer runtimes (make fuzz, docs/fuzzing.md)
  chromium                                      # headless check of the run report (ctest train.cli.report_in_chromium)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
