#!/usr/bin/env bash
# gpu-engine.sh: the CUDA engine's checks on the two-GPU machine.
#
# Run from the repository root on the GPU host, with the binaries built on the
# build host and carried in .runtime/ (see /work/shared/tools/collect-runtime-libs.sh):
#   .runtime/bin/{cuda_engine_gpu_test,cuda_engine_multigpu_test,engine-bench}
#   .runtime/lib/   (shared libraries the GPU host may lack)
# Writes every log to $OUT (must exist). Every step runs even if an earlier one
# fails; the exit status is non-zero if any step failed.
#
#   OUT=/tmp/out scripts/gpu-engine.sh            # tests, then the full benchmark
#   SGEMM_BENCH_ARGS="--iters 5" scripts/gpu-engine.sh
#   SGEMM_SKIP_BENCH=1 scripts/gpu-engine.sh      # tests only
set -uo pipefail

: "${OUT:?set OUT to the folder for logs}"
RT=${SGEMM_RUNTIME:-.runtime}
BIN=$RT/bin
export LD_LIBRARY_PATH="$RT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# NVLink SHARP (multicast) is off on these machines; NCCL must not try it.
export NCCL_NVLS_ENABLE=0
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
mkdir -p "$OUT"

failed=()
step() {  # step NAME TIMEOUT_S CMD...: runs CMD, log in $OUT/NAME.log
  local name=$1 limit=$2
  shift 2
  echo "=== $name: $*" | tee -a "$OUT/summary.txt"
  local start=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "=== $name: rc=$rc in $((SECONDS - start)) s" | tee -a "$OUT/summary.txt"
  tail -n 25 "$OUT/$name.log"
  [ $rc -eq 0 ] || failed+=("$name(rc=$rc)")
}

{
  echo "date: $(date -u +%FT%TZ)"
  echo "host: $(hostname)"
  echo "NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE"
} >"$OUT/summary.txt"
nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1 || echo "nvidia-smi failed" >>"$OUT/summary.txt"
nvidia-smi topo -m >"$OUT/nvidia-topo.txt" 2>&1 || true
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
echo "gpus: $ngpu" | tee -a "$OUT/summary.txt"

for b in cuda_engine_gpu_test cuda_engine_multigpu_test engine-bench; do
  if [ ! -x "$BIN/$b" ]; then
    echo "missing $BIN/$b" | tee -a "$OUT/summary.txt"
    failed+=("missing:$b")
  fi
done

if [ -x "$BIN/cuda_engine_gpu_test" ]; then
  step engine-gpu-test 900 "$BIN/cuda_engine_gpu_test" --gtest_output="xml:$OUT/engine-gpu-test.xml"
fi
if [ -x "$BIN/cuda_engine_multigpu_test" ]; then
  [ "$ngpu" -ge 2 ] || echo "warning: fewer than 2 GPUs: the multigpu suite will skip" | tee -a "$OUT/summary.txt"
  step engine-multigpu-test 900 "$BIN/cuda_engine_multigpu_test" --gtest_output="xml:$OUT/engine-multigpu-test.xml"
fi
if [ -x "$BIN/engine-bench" ] && [ -z "${SGEMM_SKIP_BENCH:-}" ]; then
  # shellcheck disable=SC2086  # SGEMM_BENCH_ARGS is a list of arguments
  step engine-bench 1500 "$BIN/engine-bench" --csv-out "$OUT/engine-bench.csv" ${SGEMM_BENCH_ARGS:-}
fi

if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: ${failed[*]}" | tee -a "$OUT/summary.txt"
  exit 1
fi
echo "all engine GPU steps passed" | tee -a "$OUT/summary.txt"
