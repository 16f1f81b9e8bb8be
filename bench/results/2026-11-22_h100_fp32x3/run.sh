#!/usr/bin/env bash
# Device calls (fp32x3b): parts among tests, variants, bench, sanitize, sass, ncu.
set -u
RT=$(dirname "$0"); export LD_LIBRARY_PATH=$RT/lib
cd "$RT"; RT=$PWD
SHAPES=${SHAPES:-2048,4096,8192,4095,8191x8193x1000}
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv; } > $OUT/device.txt
for part in "$@"; do
  s=$SECONDS
  case $part in
  tests) timeout 150 bin/fp32x3_sgemm_test > $OUT/test-fp32x3.log 2>&1; echo "tests rc=$?" >> $OUT/device.txt
         bin/fp32x3_can_implement_test >> $OUT/test-fp32x3.log 2>&1; bin/kernels_can_implement_test >> $OUT/test-fp32x3.log 2>&1
         grep -E "^\[  (PASSED|FAILED)" $OUT/test-fp32x3.log | head -12 ;;
  variants) timeout 400 bin/sgemm-bench --shapes $SHAPES --kernels cublas,fp32x3 --fp32x3-variants --runs ${VRUNS:-15} --csv $OUT/fp32x3-variants.csv > $OUT/fp32x3-variants.txt 2>&1; echo "variants rc=$?" >> $OUT/device.txt
         grep -vE "pingpong|cluster" $OUT/fp32x3-variants.txt | cut -c1-118 ;;
  bench) timeout 300 bin/sgemm-bench --shapes $SHAPES --kernels cublas,fp32x3 --runs 30 --csv $OUT/sgemm-bench-fp32x3.csv > $OUT/sgemm-bench-fp32x3.txt 2>&1; echo "bench rc=$?" >> $OUT/device.txt
         cut -c1-118 $OUT/sgemm-bench-fp32x3.txt ;;
  sanitize) small='Square/*/1x1x1_*:Square/*/7x7x7_*:Square/*/31x31x31_*:Square/*/127x127x127_*:Square/*/129x129x129_*:Square/*/257x257x257_*'
         timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 bin/fp32x3_sgemm_test --gtest_brief=1 --gtest_filter="$small:Shapes/*:Unaligned/*:AlphaBeta/*/257x129x65_*:WideExponent/*/300x200x77_*:Variants/*:Fp32x3Determinism.*:Fp32x3Backend.*:CublasTf32.*" > $OUT/sanitize.log 2>&1; echo "memcheck rc=$?" >> $OUT/device.txt
         timeout 150 compute-sanitizer --tool racecheck --error-exitcode 9 bin/fp32x3_sgemm_test --gtest_brief=1 --gtest_filter="$small:Variants/*/129x131x3?_*:Variants/*/7x9x5_*:Variants/*/257x259x*" >> $OUT/sanitize.log 2>&1; echo "racecheck rc=$?" >> $OUT/device.txt
         timeout 100 compute-sanitizer --tool synccheck --error-exitcode 9 bin/fp32x3_sgemm_test --gtest_brief=1 --gtest_filter="$small:Variants/*/129x131x3?_*:Variants/*/257x259x*" >> $OUT/sanitize.log 2>&1; echo "synccheck rc=$?" >> $OUT/device.txt
         grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" $OUT/sanitize.log | head; grep rc= $OUT/device.txt ;;
  sassdump) for k in Li3ELb0ELi8E Lb1ELi0ELb0ELi8E; do f=$(cuobjdump -sass bin/sgemm-bench | grep -oE "Function : \S*${k}\S*" | head -1 | awk '{print $3}'); cuobjdump -sass -fun "$f" bin/sgemm-bench > $OUT/sass-$k.txt 2>&1; done
         for f in $OUT/sass-*.txt; do echo $f; grep -oE "^\s+/\*[0-9a-f]+\*/\s+[A-Z0-9_.]+" $f | awk '{print $2}' | sed 's/\..*//' | sort | uniq -c | sort -rn | head -25 | tr '\n' ' '; echo; done ;;
  ncu) timeout 200 ncu --kernel-name-base mangled -k "regex:${NCU_K:-Li3ELb0ELi8E}" --launch-count 1 --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis --section InstructionStats bin/sgemm-bench --shapes 4096 --kernels fp32x3 --fp32x3-variants --runs 1 --warmup 0 > $OUT/ncu.txt 2>&1; echo "ncu rc=$?" >> $OUT/device.txt; grep -E "Duration|Throughput|Stall|Issue|Warp Cycles|Executed Ipc|Pipe" $OUT/ncu.txt | head -40 ;;
  sass) cuobjdump -res-usage bin/sgemm-bench 2>&1 | grep -A1 fp32x3_gemm | grep -oE "REG:[0-9]+ STACK:[0-9]+ SHARED:[0-9]+ LOCAL:[0-9]+" > $OUT/sass-res.txt; cat $OUT/sass-res.txt ;;
  esac
  echo "=== $part $((SECONDS - s)) s" | tee -a $OUT/device.txt
done
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv >> $OUT/device.txt
