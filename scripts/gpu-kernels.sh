#!/usr/bin/env bash
# Kernel checks and benchmarks for the GPU machine, in as few device calls as possible.
#
# Here (no GPU needed), build and collect the binaries into .runtime-kernels/:
#   scripts/gpu-kernels.sh collect [BUILD_DIR=build-kernels]
# On the GPU machine (device tool: carry .runtime-kernels; results go to $OUT or ./out):
#   scripts/gpu-kernels.sh test       # gtest suites (label unit + gpu)
#   scripts/gpu-kernels.sh sanitize   # compute-sanitizer memcheck + racecheck on small shapes
#   scripts/gpu-kernels.sh bench [sgemm-bench args...]   # full table, CSV, PNG
#   scripts/gpu-kernels.sh variants   # every ping-pong tile configuration (tuning)
#   scripts/gpu-kernels.sh sass       # instruction mix of the kernels (cuobjdump)
#   scripts/gpu-kernels.sh ncu [SHAPE]  # Nsight Compute on one ping-pong and one cuBLAS run
#   scripts/gpu-kernels.sh all        # test, sanitize, bench
set -uo pipefail
cd "$(dirname "$0")/.."
RT=.runtime-kernels
OUT=${OUT:-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$RT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
STAMP=$(date -u +%Y-%m-%d)

collect() {
  local build=${1:-build-kernels}
  cmake --build "$build" --target sgemm-bench kernels_can_implement_test pingpong_sgemm_test \
    fp32x3_can_implement_test fp32x3_sgemm_test || exit 1
  rm -rf "$RT"
  mkdir -p "$RT/bin" "$RT/lib"
  # The binaries need only the CUDA runtime and cuBLAS (present on the GPU host);
  # GoogleTest is linked statically. List anything else they would need:
  for b in "$build/bin/sgemm-bench" "$build/tests/kernels_can_implement_test" "$build/tests/pingpong_sgemm_test" \
           "$build/tests/fp32x3_can_implement_test" "$build/tests/fp32x3_sgemm_test"; do
    cp -L "$b" "$RT/bin/"
    ldd "$b" | awk '/=> \// {print $3}' | grep -Ev '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|libcudart|libcublas|libcublasLt)\.so' || true
  done
  du -sh "$RT"
}

run_tests() {
  echo "== tests"
  $RT/bin/kernels_can_implement_test --gtest_brief=1 2>&1 | tee "$OUT/test-unit.log" | tail -3
  $RT/bin/pingpong_sgemm_test --gtest_brief=1 2>&1 | tee "$OUT/test-gpu.log" | tail -25
  # fp32x3 (3xTF32 wgmma, sm_90a) and cuBLAS TF32; scripts/gpu-fp32x3.sh has its benchmarks.
  $RT/bin/fp32x3_can_implement_test --gtest_brief=1 2>&1 | tail -2
  $RT/bin/fp32x3_sgemm_test --gtest_brief=1 2>&1 | tee "$OUT/test-fp32x3.log" | grep -E "FAILED|PASSED|SKIPPED" | tail -25
}

run_sanitize() {
  echo "== compute-sanitizer"
  local filter='Variants/*:Degenerate/*:Square/*_[0-8]:Unaligned/*_1*:SplitK/*_[0-5]'
  compute-sanitizer --tool memcheck --error-exitcode 9 $RT/bin/pingpong_sgemm_test --gtest_brief=1 \
    --gtest_filter="$filter" > "$OUT/memcheck.log" 2>&1
  echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY|PASSED|FAILED' "$OUT/memcheck.log" | tail -3 | tr '\n' ' ')"
  compute-sanitizer --tool racecheck --error-exitcode 9 $RT/bin/pingpong_sgemm_test --gtest_brief=1 \
    --gtest_filter='Variants/*:Square/*_[0-6]:SplitK/*_[0-4]' > "$OUT/racecheck.log" 2>&1
  echo "racecheck rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY|PASSED|FAILED' "$OUT/racecheck.log" | tail -3 | tr '\n' ' ')"
  # Split-K (workspace + reduction kernel, and the atomic variant), incl. 1024x1024x16384.
  compute-sanitizer --tool memcheck --error-exitcode 9 $RT/bin/pingpong_sgemm_test --gtest_brief=1 \
    --gtest_filter='SplitK/*:PingpongSplitK.*' > "$OUT/memcheck-splitk.log" 2>&1
  echo "memcheck split-K rc=$? $(grep -E 'ERROR SUMMARY|PASSED|FAILED' "$OUT/memcheck-splitk.log" | tail -3 | tr '\n' ' ')"
  compute-sanitizer --tool racecheck --error-exitcode 9 $RT/bin/pingpong_sgemm_test --gtest_brief=1 \
    --gtest_filter='SplitK/*5000_*:SplitK/*4099_*' > "$OUT/racecheck-splitk.log" 2>&1
  echo "racecheck split-K rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY|PASSED|FAILED' "$OUT/racecheck-splitk.log" | tail -3 | tr '\n' ' ')"
}

run_bench() {
  echo "== sgemm-bench"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader | tee "$OUT/device.txt"
  $RT/bin/sgemm-bench --csv "$OUT/sgemm-bench.csv" "$@" 2>&1 | tee "$OUT/sgemm-bench.txt"
  python3 scripts/plot_bench.py "$OUT/sgemm-bench.csv" "$OUT/sgemm-bench.png" || echo "plot failed"
}

run_variants() {
  echo "== ping-pong variants"
  $RT/bin/sgemm-bench --variants --runs 20 --ref-rows 0 --csv "$OUT/variants.csv" "$@" 2>&1 | tee "$OUT/variants.txt"
}

run_sass() {
  echo "== SASS instruction mix per kernel"
  cuobjdump -sass $RT/bin/sgemm-bench > "$OUT/sass.txt" 2>/dev/null
  awk '/Function :/{name=$3} /FFMA/{f[name]++} /LDS\.128/{l[name]++} /LDS[^.]/{s[name]++} /LDGSTS/{g[name]++} /LDL|STL/{x[name]++}
       END{for(n in f) printf "%6d FFMA %4d LDS.128 %4d LDS(other) %4d LDGSTS %3d local  %s\n", f[n], l[n], s[n], g[n], x[n], n}' \
       "$OUT/sass.txt" | sort -k11 | cut -c1-200
  gzip -f "$OUT/sass.txt"
}

run_ncu() {
  # scripts/gpu-kernels.sh ncu SHAPE [VARIANT...]: Nsight Compute on the picked ping-pong
  # kernel (or the given variant indices) and on cuBLAS, one launch each.
  local shape=${1:-4096}
  shift || true
  local variants=("${@:-auto}")
  local sections="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis
      --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats"
  echo "== ncu $shape"
  for v in "${variants[@]}"; do
    local vflag=""
    [ "$v" != auto ] && vflag="--variant $v"
    ncu --clock-control none -k regex:pingpong_sgemm_kernel --launch-count 1 $sections \
        $RT/bin/sgemm-bench --shapes "$shape" --kernels pingpong $vflag --runs 1 --warmup 0 --ref-rows 0 \
        > "$OUT/ncu-pingpong-$shape-$v.txt" 2>&1
  done
  ncu --clock-control none -k regex:'gemm|xmma' --launch-count 1 $sections \
      $RT/bin/sgemm-bench --shapes "$shape" --kernels cublas --runs 1 --warmup 0 --ref-rows 0 \
      > "$OUT/ncu-cublas-$shape.txt" 2>&1
  grep -E "^  [a-zA-Z_].*\(|Duration|Registers Per|Achieved Occupancy|Compute \(SM\) Throughput|Issue Slots Busy|No Eligible|Dynamic Shared|Bank Conflicts|Stall|cycles being stalled" \
      "$OUT"/ncu-*-"$shape"*.txt | cut -c1-220
}

cmd=${1:-all}
shift || true
case "$cmd" in
  collect) collect "$@" ;;
  test) run_tests ;;
  sanitize) run_sanitize ;;
  bench) run_bench "$@" ;;
  variants) run_variants "$@" ;;
  sass) run_sass ;;
  ncu) run_ncu "$@" ;;
  all) run_tests; run_sanitize; run_bench "$@" ;;
  *) echo "unknown command $cmd"; exit 2 ;;
esac
