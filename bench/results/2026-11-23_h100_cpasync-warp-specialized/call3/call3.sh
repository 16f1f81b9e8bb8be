# issue 14 sixth pass, call 3 (tree e6aeb56): tests + sanitizers on the committed tree, stall reasons (ncu), the two alternatives
B=.runtime/bin; export LD_LIBRARY_PATH=$PWD/.runtime/lib; D=$OUT/d; mkdir -p $D
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $D/device.txt 2>&1; date -u >> $D/device.txt
( time $B/pingpong_sgemm_test --gtest_brief=1 ) > $D/tests.log 2>&1
$B/kernels_can_implement_test --gtest_brief=1 > $D/can_implement.log 2>&1
F='SplitK/*/1023x1025x333_*:SplitK/*/300x260x129_*:SplitK/*/130x129x7_*:SplitK/*/257x383x1_*:SplitK/*/4095x300x100_*:Variants/*/7x9x5_*:Variants/*/257x259x33_*:SplitK/*/515x772x332_*'
R='SplitK/*/130x129x7_*:SplitK/*/257x383x1_*'
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
timeout 60 $CS --tool memcheck --error-exitcode 1 $B/pingpong_sgemm_test --gtest_brief=1 --gtest_filter="$F" > $D/memcheck.log 2>&1; echo "rc=$?" >> $D/memcheck.log
timeout 60 $CS --tool synccheck --error-exitcode 1 $B/pingpong_sgemm_test --gtest_brief=1 --gtest_filter="$F" > $D/synccheck.log 2>&1; echo "rc=$?" >> $D/synccheck.log
timeout 60 $CS --tool racecheck --error-exitcode 1 $B/pingpong_sgemm_test --gtest_brief=1 --gtest_filter="$R" > $D/racecheck.log 2>&1; echo "rc=$?" >> $D/racecheck.log
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for v in cpasync_2x128x128 tma_2x128x128x32_w64x64_t8x16_s3_rings cpasync1w_ cpasyncb_; do
  timeout 60 $NCU -k regex:tma_simt_sgemm_kernel -c 1 --section WarpStateStats --section SchedulerStats --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,gpu__time_duration.sum' \
    $B/sgemm-bench --shapes 4096 --kernels cublas --variant-match $v --runs 1 --warmup 0 --ref-rows 0 > $D/ncu-$v.txt 2>&1
done
M='64x128x16_w32x64_t8x8_s4-aligned,cpasync,tma_2x128x128x32_w64x64_t8x16_s3_rings'
$B/sgemm-bench --shapes 4096,4095,8191x8193x1000 --kernels pingpong,cublas --variant-match $M --runs 15 --ref-rows 0 --csv $D/bench.csv > $D/bench.log 2>&1
$B/sgemm-bench --shapes 4096 --kernels pingpong,cublas --variant-match $M --pad-ab 1 --runs 15 --ref-rows 0 --csv $D/bench-pad1.csv > $D/bench-pad1.log 2>&1
