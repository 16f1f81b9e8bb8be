#!/usr/bin/env bash
# kernel3 device call 1: smoke, variant timings, SASS mix, correctness, ncu of the TMA kernel.
# (Variant indices of that build: 7 tma_256x128, 8 tma_128x256, 9 tma_192x128.)
cd "$(dirname "$0")/.."
B=.runtime/bin
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv; } > $OUT/gpu.txt
timeout 30 $B/sgemm-bench --shapes 1000,777x1001x333 --variant 7 --runs 2 --warmup 1 --ref-rows 4 > $OUT/smoke.log 2>&1; smoke=$?; echo "smoke rc=$smoke" >> $OUT/gpu.txt; cat $OUT/smoke.log
[ $smoke = 0 ] && timeout 120 $B/sgemm-bench --shapes 4096,8192,2048,8192x8192x1024,128x8192x8192,8192x128x8192 --variants --runs 10 --warmup 3 --ref-rows 0 --csv $OUT/variants.csv > $OUT/variants.log 2>&1; echo "bench rc=$?" >> $OUT/gpu.txt
grep -v "gemv\|32x128\|128x32\|64x64x32\|128x64x16" $OUT/variants.log | head -60
cuobjdump -sass $B/sgemm-bench > /tmp/sass.txt 2>/dev/null
awk '/Function :/{name=$3} /FFMA/{f[name]++} /LDS\.128/{l[name]++} /LDS[^.]/{s[name]++} /LDGSTS/{g[name]++} /UTMALDG/{t[name]++} /LDL|STL/{x[name]++} /SYNCS/{y[name]++}
  {while (match($0, /R[0-9]+/)) { r=substr($0, RSTART+1, RLENGTH-1)+0; if (r!=255 && r>mr[name]) mr[name]=r; $0=substr($0, RSTART+RLENGTH)}}
  END{for(n in f) printf "%6d FFMA %4d LDS.128 %4d LDS %4d LDGSTS %3d UTMALDG %3d SYNCS %3d local maxreg R%d %s\n", f[n], l[n], s[n], g[n], t[n], y[n], x[n], mr[n], n}' /tmp/sass.txt | cut -c1-230 > $OUT/sass-mix.txt
grep "tma_simt\|ILi4ELb1ELb0ELb0" $OUT/sass-mix.txt
awk '/Function :/{p=($0 ~ /tma_simt.*ILi4ELi2ELi8ELi4ELi8ELi16/)} p' /tmp/sass.txt | gzip > $OUT/sass-tma256x128.txt.gz
timeout 75 $B/pingpong_sgemm_test --gtest_brief=1 --gtest_filter='Variants/*:Square/*:Unaligned/*:Degenerate/*:AlphaBeta/*' > $OUT/test.log 2>&1; echo "test rc=$?" >> $OUT/gpu.txt
tail -4 $OUT/test.log
[ $smoke = 0 ] && timeout 60 ncu --clock-control none -k regex:tma_simt --launch-count 1 --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis $B/sgemm-bench --shapes 4096 --kernels pingpong --variant 7 --runs 1 --warmup 0 --ref-rows 0 > $OUT/ncu-tma-4096.txt 2>&1; echo "ncu rc=$?" >> $OUT/gpu.txt
cat $OUT/gpu.txt
