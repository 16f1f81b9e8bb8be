#!/usr/bin/env bash
# fp32x3 (3xTF32 wgmma) checks and benchmarks for the GPU machine, in one device call.
#
# Here (no GPU needed), build and collect the binaries and this script into .runtime-fp32x3/:
#   scripts/gpu-fp32x3.sh collect [BUILD_DIR=build]
# On the GPU machine (device tool; carry .runtime-fp32x3, or .wt/<name>/.runtime-fp32x3
# from the main checkout; results go to $OUT or ./out):
#   RT=<carried dir> <carried dir>/gpu-fp32x3.sh all      # sass, test, bench, variants, ncu, sanitize
#   ... test | sanitize | bench [sgemm-bench args] | variants [args] | sass | ncu [SHAPE]
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
RT=${RT:-$HERE}
OUT=${OUT:-out}
mkdir -p "$OUT"
SHAPES=${SHAPES:-1024,2048,4096,8192,8192x8192x1024,1024x1024x16384,4095,8191x8193x1000}

collect() {
  local build=${1:-build}
  local dest=.runtime-fp32x3
  cmake --build "$build" --target sgemm-bench fp32x3_sgemm_test fp32x3_can_implement_test \
    kernels_can_implement_test || exit 1
  rm -rf "$dest"
  mkdir -p "$dest"
  for b in "$build/bin/sgemm-bench" "$build/tests/fp32x3_sgemm_test" "$build/tests/fp32x3_can_implement_test" \
           "$build/tests/kernels_can_implement_test"; do
    cp -L "$b" "$dest/"
    # Only the CUDA runtime and cuBLAS (on the GPU host) beyond libc; list anything else:
    ldd "$b" | awk '/=> \// {print $3}' | grep -Ev '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|libcudart|libcublas|libcublasLt)\.so' || true
  done
  cp scripts/gpu-fp32x3.sh "$dest/"
  du -sh "$dest"
}

run_tests() {
  echo "== tests"
  timeout 60 "$RT/fp32x3_can_implement_test" --gtest_brief=1 2>&1 | tail -1
  timeout 60 "$RT/kernels_can_implement_test" --gtest_brief=1 2>&1 | tail -1
  timeout 300 "$RT/fp32x3_sgemm_test" --gtest_brief=1 > "$OUT/test-fp32x3.log" 2>&1
  echo "fp32x3_sgemm_test rc=$?"
  grep -E "^\[  FAILED|^\[  PASSED|SKIPPED" "$OUT/test-fp32x3.log" | cut -c1-120 | head -20
}

# One log (sanitize.log) for the three tools, so that few files come back from the device.
sanitize_one() {  # TOOL TIMEOUT FILTER
  local tool=$1 limit=$2 filter=$3
  timeout "$limit" compute-sanitizer --tool "$tool" --error-exitcode 9 "$RT/fp32x3_sgemm_test" --gtest_brief=1 \
    --gtest_filter="$filter" > "$OUT/$tool.tmp" 2>&1
  local rc=$?
  echo "$tool rc=$rc $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY|PASSED|FAILED' "$OUT/$tool.tmp" | tail -3 | tr '\n' ' ')"
  { echo "===== $tool (rc=$rc) filter: $filter"; cat "$OUT/$tool.tmp"; } >> "$OUT/sanitize.log"
  rm -f "$OUT/$tool.tmp"
}

run_sanitize() {
  echo "== compute-sanitizer"
  # gtest filters know only * and ?, no [0-9] classes: name the cases.
  local small='Square/*/1x1x1_*:Square/*/7x7x7_*:Square/*/31x31x31_*:Square/*/127x127x127_*:Square/*/129x129x129_*:Square/*/257x257x257_*'
  sanitize_one memcheck 200 "$small:Shapes/*:Unaligned/*:AlphaBeta/*/257x129x65_*:WideExponent/*/300x200x77_*:Variants/*:Fp32x3Determinism.*:Fp32x3Backend.*:CublasTf32.*"
  sanitize_one racecheck 150 "$small:Variants/*/129x131x3?_*:Variants/*/7x9x5_*:Variants/*/257x259x*"
  sanitize_one synccheck 100 "$small:Variants/*/129x131x3?_*:Variants/*/257x259x*"
}

run_bench() {
  echo "== sgemm-bench (cuBLAS SGEMM, cuBLAS TF32, fp32x3)"
  { date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader; } \
    > "$OUT/sgemm-bench-fp32x3.txt"
  timeout 300 "$RT/sgemm-bench" --shapes "$SHAPES" --kernels cublas,tf32,fp32x3 --csv "$OUT/sgemm-bench-fp32x3.csv" "$@" \
    2>&1 | tee -a "$OUT/sgemm-bench-fp32x3.txt"
}

run_variants() {
  echo "== fp32x3 variants"
  timeout 300 "$RT/sgemm-bench" --shapes "${VSHAPES:-2048,4096,8192,4095,8191x8193x1000}" --kernels cublas,fp32x3 --fp32x3-variants --runs 15 \
    --csv "$OUT/fp32x3-variants.csv" "$@" 2>&1 | tee "$OUT/fp32x3-variants.txt"
}

run_sass() {
  echo "== SASS of the fp32x3 kernels"
  cuobjdump -sass "$RT/sgemm-bench" > "$OUT/sass-all.txt" 2>/dev/null
  awk '/Function :/{name=$3} /HGMMA/{h[name]++} /SYNCS/{s[name]++} /UTMALDG/{t[name]++} /LDL|STL/{x[name]++}
       END{for(n in h) printf "%5d HGMMA %4d SYNCS %3d UTMALDG %3d local  %s\n", h[n], s[n], t[n], x[n], n}' \
       "$OUT/sass-all.txt" | cut -c1-200
  grep -m3 "HGMMA" "$OUT/sass-all.txt"
  rm -f "$OUT/sass-all.txt"
}

run_ncu() {
  local shape=${1:-4096}
  ncu --clock-control none -k regex:fp32x3_gemm_kernel --launch-count 1 --section SpeedOfLight \
      --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
      "$RT/sgemm-bench" --shapes "$shape" --kernels fp32x3 --runs 1 --warmup 0 --ref-rows 0 > "$OUT/ncu-fp32x3-$shape.txt" 2>&1
  grep -E "fp32x3_gemm_kernel|Duration|Throughput|Hit Rate|Registers|No Eligible|Issued Warp|Active Warps" \
      "$OUT/ncu-fp32x3-$shape.txt" | cut -c1-150 | head -30
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
  # Measurements first, sanitizers last; 7 files in $OUT (the device tool returns at most 8).
  all) run_sass; run_tests; run_bench; run_variants --runs 15; run_ncu 4096; run_sanitize ;;
  *) echo "unknown command $cmd"; exit 2 ;;
esac
