#!/usr/bin/env bash
# Installs what a fresh Debian 12 / Ubuntu 24.04 machine lacks to build
# sgemm-service, then configures and builds it (CMake preset "default").
#
#   scripts/setup.sh            # install missing packages, configure, build everything
#   SGEMM_PRESET=debug scripts/setup.sh
#   SGEMM_TARGETS="sgemm-server sgemm-client" scripts/setup.sh   # only these targets
#   SGEMM_PRESET=client scripts/setup.sh   # client library, CLI, Python package tests: no CUDA
#
# The CUDA Toolkit 13 (nvcc, cuBLAS, NCCL) is expected to be installed already
# (it is on our GPU hosts, CI machines and the CUDA devel image); everything
# else comes from the distribution's packages.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libspdlog-dev libcli11-dev nlohmann-json3-dev libopenblas-dev
  libgtest-dev libgmock-dev libbenchmark-dev clang-format clang-tidy   # clang-tidy: scripts/tidy.sh
  liblzma-dev                                         # the golden kernel-decision record (tests/kernels)
  clang-14 libfuzzer-14-dev openssl                   # fuzz targets (scripts/fuzz.sh); TLS tests make certificates
  python3 python3-grpcio python3-numpy python3-yaml   # Python client tests, manifest checks
  python3-kubernetes                                  # the manifests against the Kubernetes API schema
  python3-venv python3-pip python3-setuptools python3-wheel  # the Python client's install test (pip, no index)
  prometheus-cpp-dev python3-matplotlib               # --metrics-listen; sgemm-timings --png
  docker-compose                                      # `docker-compose config` of deploy/compose*.yaml (no daemon)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# CUDA: nvcc on PATH, or the usual install location.
if ! command -v nvcc >/dev/null 2>&1; then
  for d in /usr/local/cuda/bin /usr/local/cuda-13.0/bin; do
    [ -x "$d/nvcc" ] && export PATH="$d:$PATH" && break
  done
fi
preset="${SGEMM_PRESET:-default}"
[ "$preset" = client ] || command -v nvcc >/dev/null 2>&1 || {
  echo "setup: nvcc not found. Install the CUDA Toolkit 13 (with cuBLAS and NCCL) and put nvcc on PATH," >&2
  echo "setup: or build the client alone: SGEMM_PRESET=client scripts/setup.sh" >&2
  exit 1
}

cmake --preset "$preset" >/dev/null
read -r -a targets <<<"${SGEMM_TARGETS:-}"
cmake --build --preset "$preset" -j "$(nproc)" ${targets[@]+--target "${targets[@]}"}
echo "setup: built with preset '$preset'${SGEMM_TARGETS:+ (targets: $SGEMM_TARGETS)}"
