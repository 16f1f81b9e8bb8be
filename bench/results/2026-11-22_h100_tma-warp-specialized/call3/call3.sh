#!/usr/bin/env bash
# kernel3 device call 3: the picker's default bench set, 16-warp candidates, full kernel tests.
# (Variant indices of that build: 0 the 64x128 tile, 7 tma_128x256, 8 tma_192x128, 15/16 the 16-warp tiles.)
cd "$(dirname "$0")/.."
B=.runtime/bin
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv; } > $OUT/gpu.txt
timeout 150 $B/sgemm-bench --kernels cublas,pingpong --runs 20 --csv $OUT/sgemm-bench.csv > $OUT/sgemm-bench.log 2>&1; echo "bench rc=$?" >> $OUT/gpu.txt
cat $OUT/sgemm-bench.log
for v in 0 7 8 15 16; do
  timeout 60 $B/sgemm-bench --shapes 2048,4096,8192 --kernels cublas,pingpong --variant $v --runs 15 --ref-rows 0 --csv $OUT/variant-$v.csv > $OUT/variant-$v.log 2>&1; echo "variant $v rc=$?" >> $OUT/gpu.txt
  grep -v "^device\|^shape\|verifications" $OUT/variant-$v.log
done
timeout 200 $B/pingpong_sgemm_test --gtest_brief=1 > $OUT/pingpong_sgemm_test.log 2>&1; echo "pingpong_sgemm_test rc=$?" >> $OUT/gpu.txt
tail -3 $OUT/pingpong_sgemm_test.log; grep -B2 -A8 "FAILED\|Failure" $OUT/pingpong_sgemm_test.log | head -30
timeout 30 $B/kernels_can_implement_test --gtest_brief=1 > $OUT/kernels_can_implement_test.log 2>&1; echo "can_implement rc=$?" >> $OUT/gpu.txt
cat $OUT/gpu.txt
