#!/usr/bin/env bash
# kernel3 device call 2: tests of the TMA variants (incl. split-K), every variant's timing, stall reasons.
# (Variant indices of that build: 0 the 64x128 ping-pong tile, 8 tma_128x256, 9 tma_192x128, 12 tma_128x256_u2.)
cd "$(dirname "$0")/.."
B=.runtime/bin
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv; } > $OUT/gpu.txt
timeout 100 $B/pingpong_sgemm_test --gtest_brief=1 --gtest_filter='Variants/*:SplitK/*' > $OUT/test.log 2>&1; echo "test rc=$?" >> $OUT/gpu.txt
tail -4 $OUT/test.log; grep -B2 -A8 "FAILED\|Failure" $OUT/test.log | head -40
timeout 220 $B/sgemm-bench --shapes 4096,8192,2048,8192x8192x1024,1024x1024x16384,128x8192x8192,8192x128x8192 --kernels pingpong,cublas --variants --runs 15 --warmup 3 --ref-rows 0 --csv $OUT/variants.csv > $OUT/variants.log 2>&1; echo "bench rc=$?" >> $OUT/gpu.txt
grep "cublas\|tma\|64x128x16" $OUT/variants.log
M='regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio|sm__inst_executed_pipe_fma.sum|smsp__issue_active.avg.pct_of_peak_sustained_active|smsp__inst_executed.sum|gpu__time_duration.sum'
for v in 0 8 12 9; do
  timeout 45 ncu --clock-control none -k regex:'tma_simt|pingpong_sgemm' --launch-count 1 --metrics "$M" $B/sgemm-bench --shapes 4096 --kernels pingpong --variant $v --runs 1 --warmup 0 --ref-rows 0 > $OUT/ncu-stalls-v$v.txt 2>&1; echo "ncu v$v rc=$?" >> $OUT/gpu.txt
done
cat $OUT/gpu.txt
