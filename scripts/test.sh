#!/usr/bin/env bash
# Sets up and builds (scripts/setup.sh), then runs every test with CTest:
# unit, e2e (real server on 127.0.0.1 + real client), gpu and multigpu (these
# skip, visibly, on a machine without enough GPUs). Extra arguments go to
# ctest, e.g. `scripts/test.sh -L unit`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export PATH="/usr/local/cuda/bin:$PATH"
ctest --preset "${SGEMM_PRESET:-default}" -j "$(nproc)" "$@"
