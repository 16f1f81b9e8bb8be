#!/usr/bin/env bash
# gpu-check.sh: everything that needs a GPU, in one call on the GPU machine.
#
# Build here (the build host has gRPC; the GPU host does not), bundle, carry:
#   cmake --build build && scripts/gpu-check.sh --bundle      # fills .runtime/
#   (device) OUT=... scripts/gpu-check.sh [PART...]           # runs there
# The one GPU driver script: kernels, engine, service.
# PARTs (default: tests e2e serve):
#   tests          kernel + engine gpu/multigpu suites (SGEMM_TEST_GPUS="2,4" narrows the counts)
#   sanitize       compute-sanitizer memcheck + racecheck (+ synccheck) on the kernel tests
#   e2e            the e2e suite with the cuda backend (then again with SGEMM_E2E_TRANSPORT=shm)
#   faults         GPU faults injected through SGEMM_FAULT_INJECT (a trapping kernel, a failed device,
#                  a hung collective aborted after --collective-timeout, no device left); 2 GPUs
#   serve          sgemm-server --backend cuda and sgemm-client submit --size 4096/8192 --verify,
#                  each precision the GPUs offer, and sgemm-load (64 clients; then misbehaving clients attached)
#   bench-kernels  sgemm-bench (SGEMM_KERNEL_BENCH_ARGS), CSV and plot
#   bench-fp32x3   sgemm-bench: cuBLAS SGEMM, cuBLAS TF32 and fp32x3 (SGEMM_FP32X3_SHAPES)
#   contract       the fp32 contract: fp32_contract_test; sgemm-bench --accuracy (cw of every kernel and of
#                  the fp32 default against cuBLAS DGEMM, uniform / wide-exponent / cancelling inputs) on
#                  SGEMM_ACCURACY_SHAPES; sgemm-bench timing of the fp32 default against cuBLAS SGEMM on
#                  SGEMM_CONTRACT_SHAPES; sgemm-client submit --size 8192 --verify for fp32 and fp32-ffma
#                  against sgemm-server --backend cuda (the summary names the concrete kernel), and with
#                  --split rows and --split k where there are 2 GPUs or more
#   variants-fp32x3  every fp32x3 schedule/tile variant
#   bench-engine   engine-bench (SGEMM_ENGINE_BENCH_ARGS, e.g. "--gpus 1,2,4 --shapes ...")
#   bench-kernel-choice  engine-bench --gpus 1 on SGEMM_KERNEL_CHOICE_SHAPES four ways: the engine's choice
#                  timed on the GPU (the default), the measured table alone (--no-kernel-autotune), cuBLAS
#                  and ping-pong named; kernel phase per shape side by side in kernel-choice.txt
#   bench-transport  shared memory vs the device-side floor at 4096 and 8192 (SGEMM_TRANSPORT_SIZES): engine-bench
#                  --gpus 1 (pinned in, pinned out), then through sgemm-server on its Unix socket with
#                  transport-bench --transport shm, and gRPC over TCP beside it; writes bench-transport.txt
#   bench-grpc     the gRPC data plane: grpc-transport-bench against sgemm-server --backend cuda (64 MiB each
#                  way as one request over 1/2/4/8 connections, next to raw loopback TCP on 1 and on as many
#                  connections; end to end at 4096 and 8192 likewise), sgemm-client submit --size 4096/8192
#                  --connections 1/4(/8), and engine-bench's device-side time for the same shapes (the floor).
#                  Every step has its own timeout; about 100 s in all, at most about 270 s
#   variants       every ping-pong tile variant (a -DSGEMM_KERNEL_TUNING=ON build adds the tuning ones);
#                  SGEMM_VARIANT_SHAPES="1x4096x4096,8192x64x8192" narrows the shapes
#   sass           instruction mix of the kernels (cuobjdump), of every $BIN/sgemm-bench* binary; the
#                  TMA-fed kernels' SASS kept (sass-tma-NAME.txt.gz: tools/sass_stats.py reads their cubins)
#   compare-builds every $BIN/sgemm-bench* binary (builds carried side by side: bundle-runtime.sh copies
#                  e.g. sgemm-bench-kernel3 next to sgemm-bench), in turn, SGEMM_COMPARE_ROUNDS (2) rounds,
#                  each running every ';'-separated argument list of SGEMM_COMPARE_ARGS; compare-builds.txt
#   ncu [SHAPE]    Nsight Compute on the ping-pong pick (the TMA-fed kernel where picked), the 64x128
#                  ping-pong tile, fp32x3 and cuBLAS, one launch each (SGEMM_NCU_SHAPE)
#   ncu-source     per-instruction warp-state samples and SASS of the picked TMA-fed kernel and of cuBLAS's
#                  (SGEMM_NCU_SHAPES, default "4096 8192"): where each kind of stall falls, instruction by instruction
#   ncu-thin       Nsight Compute on the GEMV kernels (1x8192x8192, 8192x1x8192) and the thin
#                  tile (8192x64x8192), each next to cuBLAS on the same shape
#   obs            observability (docs/observability.md) into $OUT/obs: first vs tenth request on a cold
#                  server (--no-warm-up --pinned-pool-bytes 0) and a warm one; on every GPU a 16384^3 row
#                  split and K split with --trace (how much of B's broadcast was waiting, per GPU); the
#                  Prometheus scrape; sgemm-timings summary/list; PNGs when python3-matplotlib is there
#                  (else render them on the build host: docs/observability.md, "Pictures"); alias: warm
#   resident       resident matrices (docs/resident.md): the engine's gpu and multigpu resident suites, then
#                  the e2e resident suite with SGEMM_E2E_BACKEND=cuda
#   bench-resident sgemm-load --resident against sgemm-server --backend cuda over gRPC on 127.0.0.1: streams
#                  of A (1, 64, 1024 rows) against a resident 4096^2 and 8192^2 B vs sending B, 1 client
#                  (latency) and 4 (throughput), and a kept 4096^3 result vs the upload of A alone;
#                  writes bench-resident-*.json and bench-resident.txt (SGEMM_RESIDENT_ARGS adds arguments)
#   profile-resident  where a small resident request's time goes: 1x4096 x a resident 4096^2,
#                  1 client, 3000 products (SGEMM_PROFILE_ARGS adds sgemm-load arguments), with and without
#                  each hand-off between threads (--inline-compute-ms 0, sgemm-load --reactor-calls); the
#                  server's phases and the engine's host steps from timings.jsonl; profile-resident/summary.txt
#   cluster        cluster mode, one server per GPU: cluster-sockets then cluster-nvlink
#   cluster-sockets  scripts/cluster-check.sh sockets: NCCL over TCP (as between hosts); e2e suite (row
#                  and K split vs fp64, a member killed mid-request); engine-bench --cluster N (the cluster
#                  engine over one process per GPU: kernel phase and device-side end to end vs one GPU, the
#                  link's broadcast and fan-out rates measured at join); then the same products through
#                  sgemm-server processes: SGEMM_CLUSTER_SIZE^3 (32768) row split and SGEMM_CLUSTER_K_SHAPE
#                  ("4096 4096 262144") K split over the cluster vs one GPU. SGEMM_CLUSTER_SKIP="server"
#                  (or e2e, engine, rows, k; a list) leaves steps out
#   cluster-nvlink   the same with NVLink allowed, for comparison (2 GPUs are enough)
# Every log goes to $OUT; every part runs even if an earlier one failed. More than 8
# files there are packed into $OUT/logs.tar.gz at the end (the device tool returns 8).
# A bundle over the device tool's 64 MiB carry limit is also packed as
# .runtime.tar.xz; carry that instead and the script unpacks it.
set -uo pipefail
cd "$(dirname "$0")/.."
RT=${SGEMM_RUNTIME:-.runtime}

if [ "${1:-}" = "--bundle" ]; then
  b=${SGEMM_BUILD:-build}
  rm -rf "$RT"
  bins=("$b"/bin/sgemm-server "$b"/bin/sgemm-client "$b"/bin/sgemm-bench "$b"/bin/engine-bench "$b"/bin/sgemm-load
        "$b"/bin/transport-bench "$b"/bin/grpc-transport-bench "$b"/bin/batch-bench)
  for t in "$b"/tests/*; do [ -f "$t" ] && [ -x "$t" ] && bins+=("$t"); done
  scripts/bundle-runtime.sh "$RT" "${bins[@]}"
  if [ "$(du -sm "$RT" | cut -f1)" -gt 60 ]; then
    tar -cJf "$RT.tar.xz" "$RT" && echo "packed $RT.tar.xz ($(du -sh "$RT.tar.xz" | cut -f1)): carry that"
  fi
  exit 0
fi
if [ ! -d "$RT" ] && [ -f "$RT.tar.xz" ]; then tar -xJf "$RT.tar.xz"; fi

: "${OUT:?set OUT to the folder for logs}"
BIN=$RT/bin
export LD_LIBRARY_PATH="$RT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NCCL_NVLS_ENABLE=0   # never NVLink multicast on the shared hosts
export SGEMM_SERVER_BIN=$PWD/$BIN/sgemm-server SGEMM_CLIENT_BIN=$PWD/$BIN/sgemm-client SGEMM_LOAD_BIN=$PWD/$BIN/sgemm-load SGEMM_REGION_PROBE_BIN=$PWD/$BIN/e2e-region-probe
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(tests e2e serve)
failed=()
step() {  # step NAME TIMEOUT_S CMD...
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "=== $name: rc=$rc in $((SECONDS - start)) s: $*" | tee -a "$OUT/summary.txt"
  grep -E "PASSED|FAILED|SKIPPED \]|Failure|error" "$OUT/$name.log" | tail -n 8
  [ $rc -eq 0 ] || failed+=("$name")
}
has() { local p; for p in "${parts[@]}"; do [ "$p" = "$1" ] && return 0; done; return 1; }

{ date -u +%FT%TZ; nvidia-smi --query-gpu=index,name,memory.total,clocks.sm,clocks.max.sm --format=csv; } \
  | tee "$OUT/summary.txt"

if has tests; then
  for t in kernels_can_implement_test fp32x3_can_implement_test pingpong_sgemm_test fp32x3_sgemm_test \
           fp32_contract_test cuda_engine_gpu_test cuda_engine_region_gpu_test cuda_engine_multigpu_test \
           transpose_test cuda_engine_ops_gpu_test cuda_engine_ops_multigpu_test cuda_engine_batch_gpu_test \
           cuda_engine_batch_multigpu_test; do
    [ -x "$BIN/$t" ] && step "$t" 580 "$BIN/$t" --gtest_brief=1
  done
fi
if has faults; then
  # Each case starts its own server with the fault it needs (tests/e2e/gpu_fault_test.cc).
  step faults 580 "$BIN/e2e_gpu_fault_test" --gtest_brief=1
fi
if has sanitize; then
  # gtest filters know only * and ?, no [0-9] classes: the cases are named.
  small='Square/*/1x1x1_*:Square/*/7x7x7_*:Square/*/31x31x31_*:Square/*/127x127x127_*:Square/*/129x129x129_*:Square/*/257x257x257_*'
  step memcheck 300 compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN/pingpong_sgemm_test" \
    --gtest_brief=1 --gtest_filter="Variants/*:Degenerate/*:$small:Unaligned/*:SplitK/*:PingpongSplitK.*:Thin/*:Gemv/*"
  step racecheck 300 compute-sanitizer --tool racecheck --error-exitcode 9 "$BIN/pingpong_sgemm_test" \
    --gtest_brief=1 --gtest_filter="Variants/*:$small:SplitK/*/200x300x5000_*:Gemv/*/1x2051x513_*:Gemv/*/1000x1x4097_*:Gemv/*/1x1000x3001_*:Thin/*/2000x40x3000_*:Thin/*/25x2000x3000_*:SplitK/*/150x70x1100_*:Thin/*/1500x50x1100_*"
  # The TMA-fed kernel's mbarrier ring (its cases are in Variants and SplitK).
  step synccheck 200 compute-sanitizer --tool synccheck --error-exitcode 9 "$BIN/pingpong_sgemm_test" \
    --gtest_brief=1 --gtest_filter="Variants/*:SplitK/515x*:SplitK/2100x*:SplitK/128x2000x*:$small"
  [ -x "$BIN/fp32x3_sgemm_test" ] && step memcheck-fp32x3 200 compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN/fp32x3_sgemm_test" \
    --gtest_brief=1 --gtest_filter="$small:Shapes/*:Unaligned/*:AlphaBeta/*/257x129x65_*:WideExponent/*/300x200x77_*:Variants/*:Fp32x3Determinism.*:Fp32x3Backend.*:Fp32x3Split.*:CublasTf32.*"
  [ -x "$BIN/fp32x3_sgemm_test" ] && step racecheck-fp32x3 150 compute-sanitizer --tool racecheck --error-exitcode 9 "$BIN/fp32x3_sgemm_test" \
    --gtest_brief=1 --gtest_filter="$small:Variants/*/129x131x3?_*:Variants/*/7x9x5_*:Variants/*/257x259x*"
  [ -x "$BIN/fp32x3_sgemm_test" ] && step synccheck-fp32x3 100 compute-sanitizer --tool synccheck --error-exitcode 9 "$BIN/fp32x3_sgemm_test" \
    --gtest_brief=1 --gtest_filter="$small:Variants/*/129x131x3?_*:Variants/*/257x259x*"
  grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT"/memcheck*.log "$OUT"/racecheck*.log "$OUT"/synccheck*.log \
    | tee -a "$OUT/summary.txt"
fi
if has e2e; then
  for t in e2e_multiply_test e2e_bad_input_test e2e_cli_lifecycle_test e2e_lifecycle_test e2e_shm_test \
    e2e_observability_test e2e_stripes_test e2e_auth_test e2e_tls_test e2e_ops_test e2e_batch_test \
    e2e_batch_sources_test; do
    SGEMM_E2E_BACKEND=cuda step "$t" 300 "$BIN/$t" --gtest_brief=1
  done
  for t in e2e_multiply_test e2e_bad_input_test e2e_cli_lifecycle_test e2e_lifecycle_test; do  # over shared memory
    SGEMM_E2E_BACKEND=cuda SGEMM_E2E_TRANSPORT=shm step "shm-$t" 300 "$BIN/$t" --gtest_brief=1
  done
fi
if has resident; then
  for t in cuda_engine_resident_gpu_test cuda_engine_resident_multigpu_test; do
    [ -x "$BIN/$t" ] && step "$t" 580 "$BIN/$t" --gtest_brief=1
  done
  SGEMM_E2E_BACKEND=cuda step e2e_resident_test 300 "$BIN/e2e_resident_test" --gtest_brief=1
fi
if has bench-resident; then
  tmp=$(mktemp -d)
  "$BIN/sgemm-server" --listen 127.0.0.1:0 --port-file "$tmp/port" --backend cuda \
    --log-dir "$OUT/resident-server-logs" >"$OUT/resident-server.log" 2>&1 &
  spid=$!
  for _ in $(seq 600); do [ -s "$tmp/port" ] && break; sleep 0.1; done
  addr=127.0.0.1:$(cat "$tmp/port" 2>/dev/null)
  step client-info-resident 60 "$BIN/sgemm-client" info --server "$addr"
  # Latency: one client, 500 products per stream (20 sending B). Throughput: 4 clients.
  # shellcheck disable=SC2086  # a list of arguments
  step bench-resident-1client 580 "$BIN/sgemm-load" --server "$addr" --resident --b-sizes 4096,8192 \
    --a-rows 1,64,1024 --clients 1 --requests 500 --sent-requests 20 --warmup 20 --keep-requests 10 \
    --keep-dim 4096 --json ${SGEMM_RESIDENT_ARGS:-}
  cp "$OUT/bench-resident-1client.log" "$OUT/bench-resident-1client.json"
  # shellcheck disable=SC2086
  step bench-resident-4clients 580 "$BIN/sgemm-load" --server "$addr" --resident --b-sizes 4096,8192 \
    --a-rows 1,64,1024 --clients 4 --requests 200 --sent-requests 5 --warmup 10 --keep-requests 0 \
    --json ${SGEMM_RESIDENT_ARGS:-}
  cp "$OUT/bench-resident-4clients.log" "$OUT/bench-resident-4clients.json"
  kill "$spid"; wait "$spid"; echo "server exit: $?" | tee -a "$OUT/summary.txt"
  python3 - "$OUT" <<'PY' | tee "$OUT/bench-resident.txt" | tee -a "$OUT/summary.txt"
import json, sys, os
out = sys.argv[1]
for name in ("bench-resident-1client", "bench-resident-4clients"):
    path = os.path.join(out, name + ".json")
    try:
        text = open(path).read()
        d = json.loads(text[text.index("{"):])
    except Exception as e:
        print("%s: no JSON (%s)" % (name, e))
        continue
    print("%s: %s, %s, %d client(s)" % (name, d.get("backend"), d.get("device", "?"), d["clients"]))
    print("%-16s %9s %9s %10s %11s %11s %10s %8s" % ("A x B", "p50 ms", "p99 ms", "req/s", "GFLOP/s", "sent p50", "sent req/s", "verify"))
    for r in d["streams"]:
        res, sent = r["resident"], r.get("sent_b", {})
        print("%-16s %9.3f %9.3f %10.1f %11.1f %11.3f %10.2f %8s" % (
            "%dx%d x %d^2" % (r["m"], r["k"], r["n"]), res["p50_ms"], res["p99_ms"], res["requests_per_s"],
            res["gflops"], sent.get("p50_ms", 0), sent.get("requests_per_s", 0), r["verify"]["passed"]))
        if r["m"] == 1 and r["n"] == 4096:
            print("  target: 1x4096 x resident 4096^2 p50 <= 0.5 ms: %s" % ("MET" if res["p50_ms"] <= 0.5 else "MISSED"))
    k = d.get("kept_result")
    if k:
        print("kept %d^3: product p50 %.3f ms, upload of A alone p50 %.3f ms: %.2fx (target <= 1.3x: %s), verify %s" % (
            k["dim"], k["kept_product_p50_ms"], k["upload_a_p50_ms"], k["ratio_p50"],
            "MET" if k["ratio_p50"] <= 1.3 else "MISSED", k["verify"]["passed"]))
PY
fi
if has profile-resident; then
  p=$OUT/profile-resident
  mkdir -p "$p"
  { echo "tools: $(command -v nsys perf ncu | tr '\n' ' ')"; lscpu | grep -E "Model name|^CPU\(s\)"; } >"$p/host.txt" 2>&1
  profile_load() {  # NAME "SERVER ARGS" "LOAD ARGS": a server, one sgemm-load run, the server stopped
    local name=$1 sargs=$2 largs=$3 tmp
    tmp=$(mktemp -d)
    # shellcheck disable=SC2086  # lists of arguments
    "$BIN/sgemm-server" --listen 127.0.0.1:0 --port-file "$tmp/port" --backend cuda $sargs \
      --log-dir "$p/$name-logs" >"$p/$name-server.log" 2>&1 &
    local spid=$!
    for _ in $(seq 900); do [ -s "$tmp/port" ] && break; sleep 0.1; done
    # shellcheck disable=SC2086
    step "profile-$name" 240 "$BIN/sgemm-load" --server "127.0.0.1:$(cat "$tmp/port" 2>/dev/null)" --resident \
      --b-sizes 4096 --a-rows 1 --clients 1 --requests 3000 --sent-requests 0 --warmup 200 --keep-requests 0 \
      --json $largs ${SGEMM_PROFILE_ARGS:-}
    kill -INT "$spid"; wait "$spid"
    python3 - "$p/$name-logs/timings.jsonl" "$OUT/profile-$name.log" "$sargs $largs" <<'PY' | tee -a "$p/summary.txt"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rows = [r for r in rows if r["shape"] == {"m": 1, "n": 4096, "k": 4096}][200:]
def p50(v):
    v = sorted(v); return v[len(v) // 2] if v else float("nan")
text = open(sys.argv[2]).read()
try:
    d = json.loads(text[text.index("{"):]); client = d["streams"][0]["resident"]["p50_ms"]
    verified = d["streams"][0]["verify"]["passed"]
except Exception as e:
    client, verified = float("nan"), False
print("%s [%s]: %d requests, verified %s; client p50 %.3f ms; server p50: total %.3f = receive %.3f + queue %.3f"
      " + compute %.3f + send %.3f; GPU p50: copy in %.4f, kernel %.4f, copy out %.4f" % (
      sys.argv[2].split("/")[-1], sys.argv[3].strip(), len(rows), verified, client, p50([r["total_ms"] for r in rows]),
      p50([r["receive_ms"] for r in rows]), p50([r["queue_ms"] for r in rows]), p50([r["compute_ms"] for r in rows]),
      p50([r["send_ms"] for r in rows]), p50([r["devices"][0]["copy_in_ms"] for r in rows]),
      p50([r["devices"][0]["kernel_ms"] for r in rows]), p50([r["devices"][0]["copy_out_ms"] for r in rows])))
steps = [k for k in (rows[0].get("engine_host_ms", {}) if rows else {})]
if steps:
    print("  engine host p50 ms: " + ", ".join("%s %.4f" % (k, p50([r["engine_host_ms"].get(k, 0) for r in rows])) for k in steps))
PY
  }
  # The hand-offs one at a time: the compute thread (--inline-compute-ms 0) and gRPC's client threads (--reactor-calls).
  profile_load before "--inline-compute-ms 0" "--reactor-calls"
  profile_load caller "--inline-compute-ms 0" ""
  profile_load inline "" "--reactor-calls"
  profile_load both "" ""
  cat "$p/host.txt" "$p/summary.txt"
fi
if has serve; then
  tmp=$(mktemp -d)
  "$BIN/sgemm-server" --listen 127.0.0.1:0 --port-file "$tmp/port" --backend cuda --log-dir "$OUT/server-logs" \
    >"$OUT/server.log" 2>&1 &
  spid=$!
  for _ in $(seq 600); do [ -s "$tmp/port" ] && break; sleep 0.1; done
  addr=127.0.0.1:$(cat "$tmp/port" 2>/dev/null)
  step client-info 60 "$BIN/sgemm-client" info --server "$addr"
  step submit-4096 300 "$BIN/sgemm-client" submit --server "$addr" --size 4096 --verify --repeat 3
  step submit-8192 300 "$BIN/sgemm-client" submit --server "$addr" --size 8192 --verify --repeat 2
  step submit-odd 300 "$BIN/sgemm-client" submit --server "$addr" --m 1025 --n 777 --k 3001 --beta 0.5 --verify
  step submit-8192-fp32x3 300 "$BIN/sgemm-client" submit --server "$addr" --size 8192 --precision fp32x3 --verify --repeat 2
  step submit-4096-tf32 300 "$BIN/sgemm-client" submit --server "$addr" --size 4096 --precision tf32 --verify --repeat 2
  step load-64 300 "$BIN/sgemm-load" --server "$addr" --clients 64 --requests 10 --sizes 256,1024,4096 --with-c --json
  step load-misbehaving 300 "$BIN/sgemm-load" --server "$addr" --clients 8 --requests 20 --sizes 256 \
    --header-only 4 --trickle 1 --silent 300 --no-read 2 --json
  for f in client-info submit-4096 submit-8192 submit-odd submit-8192-fp32x3 submit-4096-tf32 load-64 load-misbehaving; do
    echo "--- $f"
    cat "$OUT/$f.log"
  done
  kill "$spid"; wait "$spid"; echo "server exit: $?" | tee -a "$OUT/summary.txt"
fi
if has bench-grpc; then
  tmp=$(mktemp -d)
  "$BIN/sgemm-server" --listen 127.0.0.1:0 --port-file "$tmp/port" --backend cuda --log-dir "$OUT/grpc-server-logs" \
    >"$OUT/grpc-server.log" 2>&1 &
  spid=$!
  for _ in $(seq 600); do [ -s "$tmp/port" ] && break; sleep 0.1; done
  addr=127.0.0.1:$(cat "$tmp/port" 2>/dev/null)
  # shellcheck disable=SC2086  # a list of arguments
  step grpc-transport-bench 100 "$BIN/grpc-transport-bench" --server "$addr" --sizes "" --e2e-sizes 4096,8192 \
    --connections 1,2,4,8 --streams 1 --repeat 3 ${SGEMM_TRANSPORT_BENCH_ARGS:-}
  grpc_logs=(grpc-transport-bench)
  for sc in 4096:1 4096:4 8192:1 8192:4 8192:8; do
    step "grpc-submit-${sc%:*}-c${sc#*:}" 23 "$BIN/sgemm-client" submit --server "$addr" --size "${sc%:*}" \
      --connections "${sc#*:}" --repeat 4
    grpc_logs+=("grpc-submit-${sc%:*}-c${sc#*:}")
  done
  kill "$spid"; wait "$spid"; echo "server exit: $?" | tee -a "$OUT/summary.txt"
  step grpc-engine-bench 40 "$BIN/engine-bench" --gpus 1 --shapes 4096x4096x4096,8192x8192x8192
  grpc_logs+=(grpc-engine-bench)
  for f in "${grpc_logs[@]}"; do
    echo "--- $f"
    cat "$OUT/$f.log"
  done
fi
if has bench-kernels; then
  # shellcheck disable=SC2086  # a list of arguments
  step sgemm-bench 580 "$BIN/sgemm-bench" --csv "$OUT/sgemm-bench.csv" ${SGEMM_KERNEL_BENCH_ARGS:-}
  cat "$OUT/sgemm-bench.log"
  python3 scripts/plot_bench.py "$OUT/sgemm-bench.csv" "$OUT/sgemm-bench.png" >/dev/null 2>&1 || echo "(no plot)"
fi
if has bench-engine; then
  step engine-bench 580 "$BIN/engine-bench" --csv-out "$OUT/engine-bench.csv" ${SGEMM_ENGINE_BENCH_ARGS:-}
  cat "$OUT/engine-bench.log"
fi
if has bench-kernel-choice; then
  shapes=${SGEMM_KERNEL_CHOICE_SHAPES:-2048x2048x2048,3072x3072x3072,4096x4096x4096,6144x6144x6144,8192x8192x8192,2304x2304x2304,8192x8192x1024,4096x64x4096,4096x32x4096,8192x64x8192,8192x32x8192,8192x128x8192}
  for cfg in "tuned:" "table:--no-kernel-autotune" "cublas:--kernel cublas" "pingpong:--kernel pingpong"; do
    # shellcheck disable=SC2086  # a list of arguments
    step "kernel-choice-${cfg%%:*}" 300 "$BIN/engine-bench" --gpus 1 --iters 10 --warmup 2 --shapes "$shapes" \
      ${cfg#*:} --csv-out "$OUT/kernel-choice-${cfg%%:*}.csv"
  done
  python3 - "$OUT" <<'PY' | tee "$OUT/kernel-choice.txt" | tee -a "$OUT/summary.txt"
import csv, sys, os
out = sys.argv[1]
d = {}
for n in ("tuned", "table", "cublas", "pingpong"):
    p = os.path.join(out, "kernel-choice-%s.csv" % n)
    if os.path.exists(p):
        for r in csv.DictReader(open(p)):
            d.setdefault(r["shape"], {})[n] = r
print("kernel phase, ms (engine-bench --gpus 1; tuned: the default; table: --no-kernel-autotune)")
print("%-16s %9s %9s %9s %9s %7s  %s" % ("shape", "tuned", "table", "cublas", "pingpong", "tuned %", "the tuned run's plan"))
for s, v in d.items():
    k = lambda n: float(v[n]["kernel_ms"]) if n in v else float("nan")
    best = min(k("cublas"), k("pingpong"))
    print("%-16s %9.3f %9.3f %9.3f %9.3f %6.1f%%  %s" % (s, k("tuned"), k("table"), k("cublas"), k("pingpong"),
          100 * best / k("tuned"), v.get("tuned", {}).get("plan", "")))
PY
fi
if has bench-transport; then
  sizes=${SGEMM_TRANSPORT_SIZES:-4096,8192}
  shapes=$(echo "$sizes" | tr ',' '\n' | sed 's/.*/&x&x&/' | paste -sd,)
  step engine-bench-floor 300 "$BIN/engine-bench" --gpus 1 --shapes "$shapes" --csv-out "$OUT/engine-floor.csv"
  tmp=$(mktemp -d)
  "$BIN/sgemm-server" --listen 127.0.0.1:0 --listen "unix:$tmp/sgemm.sock" --port-file "$tmp/port" --backend cuda \
    --log-dir "$OUT/transport-server-logs" >"$OUT/transport-server.log" 2>&1 &
  spid=$!
  for _ in $(seq 600); do [ -s "$tmp/port" ] && break; sleep 0.1; done
  step transport-shm 300 "$BIN/transport-bench" --e2e-sizes "$sizes" --transport shm --server "unix:$tmp/sgemm.sock" \
    --iters 10 --csv-out "$OUT/transport-shm.csv"
  step transport-grpc 300 "$BIN/transport-bench" --e2e-sizes "$sizes" --transport grpc \
    --server "127.0.0.1:$(cat "$tmp/port")" --iters 3 --csv-out "$OUT/transport-grpc.csv"
  kill "$spid"; wait "$spid"
  # The table: device-side floor (engine-bench single, pinned in and out) against each transport's end to end.
  python3 - "$OUT" <<'PY' | tee "$OUT/bench-transport.txt" | tee -a "$OUT/summary.txt"
import csv, sys, os
out = sys.argv[1]
floor = {}
for r in csv.DictReader(open(os.path.join(out, "engine-floor.csv"))):
    if r["config"] == "single":
        floor[int(r["shape"].split("x")[0])] = float(r["e2e_ms"])
targets = {4096: 1.5, 8192: 1.3}
print("%-6s %-9s %12s %12s %8s %8s" % ("size", "transport", "floor ms", "e2e med ms", "ratio", "target"))
for name in ("shm", "grpc"):
    path = os.path.join(out, "transport-%s.csv" % name)
    if not os.path.exists(path):
        continue
    for r in csv.DictReader(open(path)):
        n = int(r["size"]); e2e = float(r["e2e_median_ms"]); f = floor.get(n)
        ratio = e2e / f if f else float("nan")
        tgt = targets.get(n) if name == "shm" else None
        print("%-6d %-9s %12.2f %12.2f %7.2fx %8s" % (n, name, f or float("nan"), e2e, ratio,
              ("<= %.1fx %s" % (tgt, "MET" if ratio <= tgt else "MISSED")) if tgt else ""))
PY
fi
if has bench-fp32x3; then
  step sgemm-bench-fp32x3 300 "$BIN/sgemm-bench" --kernels cublas,tf32,fp32x3 --csv "$OUT/sgemm-bench-fp32x3.csv" \
    --shapes "${SGEMM_FP32X3_SHAPES:-1024,2048,4096,8192,8192x8192x1024,1024x1024x16384,4095,8191x8193x1000}"
  cat "$OUT/sgemm-bench-fp32x3.log"
fi
if has contract; then
  step fp32-contract-test 300 "$BIN/fp32_contract_test"
  cat "$OUT/fp32-contract-test.log"
  step accuracy 400 "$BIN/sgemm-bench" --kernels cublas,pingpong,fp32x3 --accuracy uniform,wide-exponent,cancelling \
    --shapes "${SGEMM_ACCURACY_SHAPES:-1536x1536x64,1536x1536x128,1536x1536x256,1536x1536x1024,1536x1536x1152,1536x1536x2048,1536x1536x4096,1536x1536x65536,4096x4096x256,2048x2048x4096,2048x2048x8192,8192x2048x8192,4096x4096x32768,2048,4096,8192,16384}"
  cat "$OUT/accuracy.log"
  step contract-bench 400 "$BIN/sgemm-bench" --kernels cublas,pingpong,fp32x3 --runs 10 --warmup 3 \
    --csv "$OUT/contract-bench.csv" \
    --shapes "${SGEMM_CONTRACT_SHAPES:-2048,4096,8192,16384,8192x8192x1024,16384x4096x4096,4096x4096x16384,2048x8192x8192,8192x2048x8192,1536x1536x8192,1024x1024x16384,256x8192x8192,8192x256x8192}"
  cat "$OUT/contract-bench.log"
  if [ -x "$BIN/sgemm-server" ]; then
    tmp=$(mktemp -d)
    "$BIN/sgemm-server" --listen 127.0.0.1:0 --port-file "$tmp/port" --backend cuda --log-dir "$OUT/contract-logs" \
      >"$OUT/contract-server.log" 2>&1 &
    spid=$!
    for _ in $(seq 600); do [ -s "$tmp/port" ] && break; sleep 0.1; done
    addr=127.0.0.1:$(cat "$tmp/port" 2>/dev/null)
    step contract-info 60 "$BIN/sgemm-client" info --server "$addr"
    step contract-submit-8192 300 "$BIN/sgemm-client" submit --server "$addr" --size 8192 --verify --repeat 2
    step contract-submit-8192-ffma 300 "$BIN/sgemm-client" submit --server "$addr" --size 8192 --precision fp32-ffma \
      --verify
    logs=(contract-info contract-submit-8192 contract-submit-8192-ffma)
    if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then  # row and K splits over the GPUs
      for sp in rows k; do
        step "contract-submit-8192-$sp" 300 "$BIN/sgemm-client" submit --server "$addr" --size 8192 --split "$sp" --verify
        logs+=("contract-submit-8192-$sp")
      done
    fi
    for f in "${logs[@]}"; do
      echo "--- $f"
      cat "$OUT/$f.log"
    done
    kill "$spid"; wait "$spid"; echo "server exit: $?" | tee -a "$OUT/summary.txt"
  fi
fi
if has variants-fp32x3; then
  step fp32x3-variants 300 "$BIN/sgemm-bench" --shapes "${SGEMM_FP32X3_SHAPES:-2048,4096,8192,4095,8191x8193x1000}" \
    --kernels cublas,fp32x3 --fp32x3-variants --runs 15 --csv "$OUT/fp32x3-variants.csv"
  cat "$OUT/fp32x3-variants.log"
fi
if has variants; then
  # shellcheck disable=SC2046  # no shapes: the bench's default set
  step variants 580 "$BIN/sgemm-bench" --variants --runs 20 --ref-rows 0 --csv "$OUT/variants.csv" \
    $([ -n "${SGEMM_VARIANT_SHAPES:-}" ] && echo --shapes "$SGEMM_VARIANT_SHAPES")
  cat "$OUT/variants.log"
fi
if has sass; then
  for b in "$BIN"/sgemm-bench*; do
    n=$(basename "$b")
    cuobjdump -sass "$b" >"$OUT/sass.txt" 2>/dev/null
    awk '/Function :/{name=$3} /FFMA/{f[name]++} /HGMMA/{h[name]++} /LDS\.128/{l[name]++} /LDS[^.]/{s[name]++} /LDGSTS/{g[name]++} /UTMALDG/{t[name]++} /LDL|STL/{x[name]++}
         END{for(n in f) printf "%6d FFMA %5d HGMMA %4d LDS.128 %4d LDS(other) %4d LDGSTS %3d UTMALDG %3d local  %s\n", f[n], h[n], l[n], s[n], g[n], t[n], x[n], n}' \
      "$OUT/sass.txt" | sort -k11 | cut -c1-200 >"$OUT/sass-mix-$n.txt"
    awk '/Function :/{p=/tma_simt_(sgemm|whole_tile)_kernel/} p' "$OUT/sass.txt" | gzip >"$OUT/sass-tma-$n.txt.gz"
    rm -f "$OUT/sass.txt"
  done
  cat "$OUT/sass-mix-sgemm-bench.txt"
fi
if has compare-builds; then
  IFS=';' read -ra sets <<<"${SGEMM_COMPARE_ARGS:---shapes 4096,8192 --kernels cublas,pingpong --runs 20 --ref-rows 0}"
  for round in $(seq "${SGEMM_COMPARE_ROUNDS:-2}"); do
    for b in "$BIN"/sgemm-bench*; do
      for i in "${!sets[@]}"; do
        name=compare-$(basename "$b")-r$round-$i
        # shellcheck disable=SC2086  # a list of arguments
        step "$name" 300 "$b" ${sets[$i]}
        { echo "### $(basename "$b"), round $round: ${sets[$i]}"; grep -E " (pingpong|cublas) " "$OUT/$name.log"; } \
          >>"$OUT/compare-builds.txt"
      done
    done
  done
  cat "$OUT/compare-builds.txt"
fi
if has ncu; then
  shape=${SGEMM_NCU_SHAPE:-4096}
  sections="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis
    --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats"
  # shellcheck disable=SC2086  # $sections is a list of arguments
  # The picker's kernel (the TMA-fed one where it is picked), then the 64x128 ping-pong tile (variant 0).
  step ncu-pingpong 300 ncu --clock-control none -k regex:'pingpong_sgemm_kernel|tma_simt_sgemm_kernel|tma_simt_whole_tile_kernel' --launch-count 1 \
    $sections "$BIN/sgemm-bench" --shapes "$shape" --kernels pingpong --runs 1 --warmup 0 --ref-rows 0
  # shellcheck disable=SC2086
  step ncu-pingpong-64x128 300 ncu --clock-control none -k regex:pingpong_sgemm_kernel --launch-count 1 $sections \
    "$BIN/sgemm-bench" --shapes "$shape" --kernels pingpong --variant 0 --runs 1 --warmup 0 --ref-rows 0
  # shellcheck disable=SC2086
  # shellcheck disable=SC2086
  step ncu-fp32x3 300 ncu --clock-control none -k regex:fp32x3_gemm_kernel --launch-count 1 $sections \
    "$BIN/sgemm-bench" --shapes "$shape" --kernels fp32x3 --runs 1 --warmup 0 --ref-rows 0
  step ncu-cublas 300 ncu --clock-control none -k regex:'gemm|xmma' --launch-count 1 $sections \
    "$BIN/sgemm-bench" --shapes "$shape" --kernels cublas --runs 1 --warmup 0 --ref-rows 0
fi
if has ncu-source; then
  # Per-instruction warp-state samples (SourceCounters) of the picked TMA-fed kernel and of cuBLAS's,
  # each with its SASS: ncu-source-{ours,cublas}-SHAPE.csv.gz (tools/sass_stats.py --ncu reads them).
  for shape in ${SGEMM_NCU_SHAPES:-4096 8192}; do
    for who in ours cublas; do
      if [ $who = ours ]; then kre='tma_simt_sgemm_kernel|tma_simt_whole_tile_kernel|pingpong_sgemm_kernel' bk=pingpong
      else kre='gemm|xmma' bk=cublas; fi
      rep=$OUT/ncu-source-$who-$shape
      step "ncu-source-$who-$shape" 300 ncu --clock-control none -k "regex:$kre" --launch-count 1 \
        --print-kernel-base mangled --section SourceCounters --section WarpStateStats --import-source no -f -o "$rep" \
        "$BIN/sgemm-bench" --shapes "$shape" --kernels $bk --runs 1 --warmup 0 --ref-rows 0
      ncu -i "$rep.ncu-rep" --page source --print-source sass --csv 2>&1 | gzip -9 >"$rep.csv.gz"
      ncu -i "$rep.ncu-rep" --print-kernel-base mangled --page details 2>&1 | head -n 60 >"$rep-details.txt"
      rm -f "$rep.ncu-rep"
    done
  done
fi
if has ncu-thin; then
  ncu_thin() {  # NAME KERNEL_REGEX SHAPE BENCH_KERNEL
    step "ncu-$1" 120 ncu --clock-control none -k "regex:$2" --launch-count 1 --section SpeedOfLight \
      --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section Occupancy --section LaunchStats \
      --section WarpStateStats "$BIN/sgemm-bench" --shapes "$3" --kernels "$4" --runs 1 --warmup 0 --ref-rows 0
  }
  for s in 1x8192x8192 8192x1x8192; do
    ncu_thin "gemv-$s" '^gemv_(row|col)_kernel' "$s" pingpong
    ncu_thin "cublas-$s" 'gemv|gemm|dot|^kernel$' "$s" cublas  # cuBLAS's 1xNxK kernel is named "kernel"
  done
  ncu_thin thin-8192x64x8192 pingpong_sgemm_kernel 8192x64x8192 pingpong
  ncu_thin cublas-8192x64x8192 'gemm|xmma' 8192x64x8192 cublas
fi
if has obs || has warm; then
  o=$OUT/obs
  mkdir -p "$o/traces"
  tool="python3 tools/sgemm_timings.py"
  obs_server() {  # obs_server NAME FLAGS...: starts sgemm-server, sets addr, mport, spid
    local name=$1
    shift
    rm -f "$o/$name.port"
    "$BIN/sgemm-server" --listen 127.0.0.1:0 --port-file "$o/$name.port" --backend cuda --log-dir "$o/$name-logs" \
      --metrics-listen 127.0.0.1:0 "$@" >"$o/$name-server.log" 2>&1 &
    spid=$!
    for _ in $(seq 900); do [ -s "$o/$name.port" ] && break; sleep 0.1; done
    addr=127.0.0.1:$(cat "$o/$name.port" 2>/dev/null)
    mport=$(sed -n 's/.*\/metrics (port \([0-9]*\)).*/\1/p' "$o/$name-server.log" | head -n 1)
    grep -E "started in|engine ready" "$o/$name-server.log" | tee -a "$OUT/summary.txt"
  }
  obs_requests() {  # the same requests on each server: 10 of each, first vs tenth
    local name=$1
    step "obs-$name-cublas-4096" 300 "$BIN/sgemm-client" submit --server "$addr" --size 4096 --kernel cublas --repeat 10
    step "obs-$name-pingpong-4096" 300 "$BIN/sgemm-client" submit --server "$addr" --size 4096 --kernel pingpong \
      --repeat 10
    step "obs-$name-16384" 580 "$BIN/sgemm-client" submit --server "$addr" --size 16384 --split single --repeat 2
  }
  obs_server cold --no-warm-up --pinned-pool-bytes 0
  obs_requests cold
  kill "$spid"; wait "$spid"
  obs_server warm --trace-dir "$o/traces"
  obs_requests warm
  ngpu=$(nvidia-smi -L | wc -l)
  step obs-rows-16384 580 "$BIN/sgemm-client" submit --server "$addr" --size 16384 --split rows --repeat 2 \
    --trace "$o/trace-rows-16384-${ngpu}gpu.json"
  step obs-k-16384 580 "$BIN/sgemm-client" submit --server "$addr" --size 16384 --split k --repeat 2 \
    --trace "$o/trace-k-16384-${ngpu}gpu.json"
  python3 -c "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1]).read().decode())" \
    "http://127.0.0.1:$mport/metrics" >"$o/metrics.txt" 2>&1
  kill "$spid"; wait "$spid"
  for s in cold warm; do
    echo "--- $s server: one line per request, in order (first vs tenth)" | tee -a "$OUT/summary.txt"
    $tool list "$o/$s-logs/timings.jsonl" | tee -a "$OUT/summary.txt"
  done
  $tool summary "$o/warm-logs/timings.jsonl" >"$o/timings-summary.txt"
  $tool summary "$o/warm-logs/timings.jsonl" --csv >"$o/timings-summary.csv"
  for t in "$o"/trace-*.json; do
    echo "--- $t" | tee -a "$OUT/summary.txt"
    $tool trace "$t" | grep -E "NCCL|process" | tee -a "$OUT/summary.txt"
  done
  grep -E "^sgemm_(requests_total|gpu_busy_seconds_total|gpu_wait_seconds_total)" "$o/metrics.txt" | head -n 40
  if python3 -c "import matplotlib" 2>/dev/null; then
    for t in "$o"/trace-*.json; do $tool trace "$t" --png "${t%.json}.png" >/dev/null; done
    $tool summary "$o/warm-logs/timings.jsonl" --png "$o/timings-summary.png" >/dev/null
  else
    echo "obs: no matplotlib here; render the PNGs on the build host (docs/observability.md, Pictures)" \
      | tee -a "$OUT/summary.txt"
  fi
fi
for m in sockets nvlink; do
  if has cluster || has "cluster-$m"; then
    export BIN OUT
    step "cluster-$m" 480 scripts/cluster-check.sh "$m" "${SGEMM_CLUSTER_SIZE:-32768}"
    cat "$OUT/cluster-$m.log"
  fi
done
# The device tool brings back at most 8 files: past that, every file goes into
# $OUT/logs.tar.gz, and summary.txt and up to 6 other top-level .txt reports stay beside it.
pack_logs() {
  [ "$(find "$OUT" -type f | wc -l)" -gt 8 ] || return 0
  local tgz
  tgz=$(mktemp --suffix .tar.gz)
  tar -czf "$tgz" -C "$OUT" . || return 0
  find "$OUT" -mindepth 1 -maxdepth 1 -exec rm -rf {} +
  mv "$tgz" "$OUT/logs.tar.gz"
  local keep
  keep=$(tar -tzf "$OUT/logs.tar.gz" | grep -E '^\./[^/]+\.txt$' | grep -v '^\./summary\.txt$' | head -n 6)
  # shellcheck disable=SC2086  # a list of member names
  tar -xzf "$OUT/logs.tar.gz" -C "$OUT" ./summary.txt $keep
}
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: ${failed[*]}" | tee -a "$OUT/summary.txt"
  pack_logs
  exit 1
fi
echo "gpu-check: all parts passed (${parts[*]})" | tee -a "$OUT/summary.txt"
pack_logs
