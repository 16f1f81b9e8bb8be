# issue 14 sixth pass, call 2 (tree 2026fd2): tests, memcheck + synccheck, SASS counts, ncu (cp.async vs TMA rings at 4096), the 16-byte form
B=.runtime/bin; export LD_LIBRARY_PATH=$PWD/.runtime/lib; D=$OUT/d; mkdir -p $D
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $D/device.txt 2>&1; date -u >> $D/device.txt
( time $B/pingpong_sgemm_test --gtest_brief=1 ) > $D/tests.log 2>&1
$B/kernels_can_implement_test --gtest_brief=1 > $D/can_implement.log 2>&1
F='SplitK/*/1023x1025x333_*:SplitK/*/300x260x129_*:SplitK/*/130x129x7_*:SplitK/*/257x383x1_*:SplitK/*/4095x300x100_*:Variants/*/7x9x5_*:Variants/*/257x259x33_*:SplitK/*/515x772x332_*'
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
timeout 60 $CS --tool memcheck --error-exitcode 1 $B/pingpong_sgemm_test --gtest_brief=1 --gtest_filter="$F" > $D/memcheck.log 2>&1; echo "rc=$?" >> $D/memcheck.log
timeout 60 $CS --tool synccheck --error-exitcode 1 $B/pingpong_sgemm_test --gtest_brief=1 --gtest_filter="$F" > $D/synccheck.log 2>&1; echo "rc=$?" >> $D/synccheck.log
cuobjdump -sass $B/sgemm-bench | awk '/Function :/{p=/tma_simt_sgemm_kernel.*Lb0ELb1E/} p' > $D/sass.txt
awk '/Function :/{f=$3} /LDGSTS/{l[f]++} /STL/{s[f]++} /LDL/{d[f]++} /FFMA/{x[f]++} END{for(f in x) print f, "LDGSTS", l[f]+0, "STL", s[f]+0, "LDL", d[f]+0, "FFMA", x[f]}' $D/sass.txt > $D/sass-counts.txt
grep -n "STL\|LDL" $D/sass.txt | head -80 > $D/sass-spills.txt; gzip $D/sass.txt
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for v in cpasync_2x128x128 tma_2x128x128x32_w64x64_t8x16_s3_rings cpasync16_2x128; do
  timeout 90 $NCU -k regex:tma_simt_sgemm_kernel -c 1 --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section InstructionStats --section ComputeWorkloadAnalysis \
    $B/sgemm-bench --shapes 4096 --kernels cublas --variant-match $v --runs 1 --warmup 0 --ref-rows 0 > $D/ncu-$v.txt 2>&1
done
M='64x128x16_w32x64_t8x8_s4-aligned,cpasync,tma_2x128x128x32_w64x64_t8x16_s3_rings'
$B/sgemm-bench --shapes 4096,2048,8192,4095,8191x8193x1000 --kernels pingpong,cublas --variant-match $M --runs 15 --ref-rows 0 --csv $D/bench.csv > $D/bench.log 2>&1
tar czf $OUT/call2.tgz -C $OUT d   # (and a summary to stdout)
