# issue 14 sixth pass, call 1 (tree ca35474): tests, sanitizers on the cp.async cases, SASS of the cp.async kernels, bench
# (tests.log, synccheck.log and the SASS did not come back: more files under $OUT than the tool returns)
B=.runtime/bin; export LD_LIBRARY_PATH=$PWD/.runtime/lib
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/device.txt 2>&1
date -u >> $OUT/device.txt
( time $B/pingpong_sgemm_test --gtest_brief=1 ) > $OUT/tests.log 2>&1
$B/kernels_can_implement_test --gtest_brief=1 > $OUT/can_implement.log 2>&1
F='SplitK/*/1023x1025x333_*:SplitK/*/300x260x129_*:SplitK/*/130x129x7_*:SplitK/*/257x383x1_*:SplitK/*/4095x300x100_*:Variants/*/7x9x5_*:Variants/*/257x259x33_*'
R='SplitK/*/130x129x7_*:SplitK/*/257x383x1_*'
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
timeout 60 $CS --tool memcheck --error-exitcode 1 $B/pingpong_sgemm_test --gtest_brief=1 --gtest_filter="$F" > $OUT/memcheck.log 2>&1; echo "rc=$?" >> $OUT/memcheck.log
timeout 50 $CS --tool synccheck --error-exitcode 1 $B/pingpong_sgemm_test --gtest_brief=1 --gtest_filter="$F" > $OUT/synccheck.log 2>&1; echo "rc=$?" >> $OUT/synccheck.log
timeout 50 $CS --tool racecheck --error-exitcode 1 $B/pingpong_sgemm_test --gtest_brief=1 --gtest_filter="$R" > $OUT/racecheck.log 2>&1; echo "rc=$?" >> $OUT/racecheck.log
cuobjdump -sass $B/sgemm-bench | awk '/Function :/{p=/tma_simt_sgemm_kernel.*Lb0ELb1E/} p' | gzip > $OUT/sass-cpasync.txt.gz
M='64x128x16_w32x64_t8x8_s4-aligned,cpasync_,tma_2x128x128x32_w64x64_t8x16_s3_rings,tma_192x128x32_w64x32_t8x8_s5'
$B/sgemm-bench --shapes 4095,8191x8193x1000,2047,6143,8191,4095x4097x4095,4096 --kernels pingpong,cublas --variant-match $M --runs 15 --ref-rows 0 --csv $OUT/bench.csv > $OUT/bench.log 2>&1
$B/sgemm-bench --shapes 4096,2048 --kernels pingpong,cublas --variant-match $M --pad-ab 1 --runs 15 --ref-rows 0 --csv $OUT/bench-pad1.csv > $OUT/bench-pad1.log 2>&1
