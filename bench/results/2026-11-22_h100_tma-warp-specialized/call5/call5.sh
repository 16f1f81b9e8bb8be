#!/usr/bin/env bash
# kernel3 device call 5: the 12-warp split-K tiles on the 128-wide classes, ncu evidence, final bench rerun.
# Variant indices of this build: 0 64x128 tile, 1 its split-K, 7 tma_128x256, 8 tma_192x128,
# 9 tma_128x256_splitk, 10 tma_192x128_splitk, 11 tma_128x192_splitk.
cd "$(dirname "$0")/.."
B=.runtime/bin
L=/tmp/c5; mkdir -p $L/ncu
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv; } > $L/gpu.txt
timeout 90 $B/pingpong_sgemm_test --gtest_brief=1 --gtest_filter='Variants/*:SplitK/*' > $L/test.log 2>&1; echo "test rc=$?" >> $L/gpu.txt
tail -2 $L/test.log
for t in cuda_engine_gpu_test cuda_engine_region_gpu_test; do
  timeout 120 $B/$t --gtest_brief=1 > $L/$t.log 2>&1; echo "$t rc=$?" >> $L/gpu.txt; tail -2 $L/$t.log
done
timeout 120 $B/sgemm-bench --shapes 8192x128x8192,128x8192x8192,4096x128x8192,128x4096x8192,1024x1024x16384 --kernels cublas,pingpong --variants --runs 20 --ref-rows 0 --csv $L/thin-variants.csv > $L/thin-variants.log 2>&1; echo "thin rc=$?" >> $L/gpu.txt
grep -E "cublas|auto|64x128x16|tma" $L/thin-variants.log
OUT=$L/ncu SGEMM_NCU_SHAPE=4096 timeout 200 scripts/gpu-check.sh ncu > $L/ncu-part.log 2>&1; echo "ncu part rc=$?" >> $L/gpu.txt
S="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats"
timeout 60 ncu --clock-control none -k regex:tma_simt --launch-count 1 $S $B/sgemm-bench --shapes 8192 --kernels pingpong --runs 1 --warmup 0 --ref-rows 0 > $L/ncu-8192-tma192x128.txt 2>&1; echo "ncu 8192 rc=$?" >> $L/gpu.txt
for f in $L/ncu/ncu-pingpong.log $L/ncu/ncu-pingpong-64x128.log $L/ncu/ncu-cublas.log $L/ncu-8192-tma192x128.txt; do echo "== $f"; grep -E "^  [a-z_]|Duration|SM Frequency|Compute \(SM\) Throughput|Issue Slots Busy|Issued Ipc Active|No Eligible|Warp Cycles Per Issued|Registers Per Thread|Achieved Occupancy|L2 Hit Rate|DRAM Throughput" $f | head -16; done
timeout 100 $B/sgemm-bench --kernels cublas,pingpong --runs 20 --csv $L/sgemm-bench.csv > $L/sgemm-bench.log 2>&1; echo "bench rc=$?" >> $L/gpu.txt
grep -E "auto" $L/sgemm-bench.log | awk '{print $1, $3, $7}'
cat $L/gpu.txt
tar -czf $OUT/call5.tgz -C /tmp c5
