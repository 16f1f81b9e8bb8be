#!/usr/bin/env bash
# Measures gRPC loopback throughput by chunk size through the real server
# (CPU backend, so only transport and assembly are measured).
# Writes bench/results/<date>_cpu_grpc-chunk-size/transport-bench.txt (bench/results/INDEX.md:
# add a line for it).
#   scripts/bench-transport.sh [build-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
b=${1:-build}
out=bench/results/$(date -u +%F)_cpu_grpc-chunk-size/transport-bench.txt
mkdir -p "$(dirname "$out")"
tmp=$(mktemp -d)
start_server() {
  "$b/bin/sgemm-server" --listen 127.0.0.1:0 --port-file "$tmp/port" --backend cpu "$@" >"$tmp/server.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.05; done
  port=$(cat "$tmp/port")
}
stop_server() { kill "$pid"; wait "$pid" || true; rm -f "$tmp/port"; }
{
  echo "# transport-bench on $(hostname -s), $(nproc) cores, $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD)"
  echo "## upload: client chunk size (64 MiB A per request)"
  start_server
  "$b/bin/transport-bench" --server "127.0.0.1:$port" --direction up --benchmark_counters_tabular=true 2>&1
  stop_server
  for c in 65536 262144 1048576 2097152 4193280; do
    echo "## download: server --response-chunk-bytes $c (64 MiB C per request)"
    start_server --response-chunk-bytes "$c"
    "$b/bin/transport-bench" --server "127.0.0.1:$port" --direction down 2>&1 | grep -E "download|^-|Benchmark"
    stop_server
  done
} | tee "$out"
rm -rf "$tmp"
echo "wrote $out"
