#!/usr/bin/env bash
# Device driver for the kernel2 helper's calls (untracked; the committed record is bench/results/).
# usage: k2call.sh NAME PARTS...   (env: SHAPES for variants, NCU="shape:variant ...")
set -u
name=$1; shift
export NCCL_NVLS_ENABLE=0
O=/tmp/o/$name; mkdir -p "$O"
[ -d .runtime ] || tar -xJf .runtime.tar.xz
export LD_LIBRARY_PATH=$PWD/.runtime/lib
SGEMM_VARIANT_SHAPES=${SHAPES:-} OUT=$O scripts/gpu-check.sh "$@"
for sv in ${NCU:-}; do
  s=${sv%%:*}; v=${sv##*:}
  timeout 90 ncu --clock-control none -k regex:pingpong_sgemm_kernel --launch-count 1 --section SpeedOfLight \
    --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
    --section WarpStateStats --section SchedulerStats .runtime/bin/sgemm-bench --shapes "$s" --kernels pingpong \
    --variant "$v" --runs 1 --warmup 0 --ref-rows 0 > "$O/ncu-$s-v$v.log" 2>&1
  echo "=== ncu $s variant $v rc=$?" | tee -a "$O/summary.txt"
done
if [ -n "${NCU:-}" ] || [ -n "${BENCH:-}" ]; then :; fi
for b in ${BENCH:-}; do  # extra sgemm-bench runs: "shapes@variant"
  s=${b%%@*}; v=${b##*@}
  timeout 120 .runtime/bin/sgemm-bench --shapes "$s" --kernels cublas,pingpong --variant "$v" --runs 20 \
    --ref-rows 0 --csv "$O/bench-v$v.csv" > "$O/bench-v$v.log" 2>&1
  echo "=== bench $s variant $v rc=$?" | tee -a "$O/summary.txt"
done
cat "$O/summary.txt"
tar -C /tmp/o -czf "$OUT/$name.tgz" "$name"
