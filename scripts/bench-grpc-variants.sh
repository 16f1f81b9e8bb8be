#!/usr/bin/env bash
# gRPC transport settings, measured side by side on the serving host: for each
# variant, a fresh sgemm-server with the variant's server flags and
# grpc-transport-bench with its client flags (64 MiB each way next to raw TCP, and
# end to end at 8192). Logs go to $OUT/variant-NAME.log.
#   OUT=dir scripts/bench-grpc-variants.sh BIN_DIR BACKEND
set -uo pipefail
bin=${1:?bin dir}
backend=${2:-cuda}
: "${OUT:?set OUT}"
variants=(
  "default||"
  "chunks-4MiB|--response-chunk-bytes 4193280|--chunk-bytes 4193280"
  "window-16MiB|--grpc-arg grpc.http2.lookahead_bytes=16777216|--arg grpc.http2.lookahead_bytes=16777216"
  "no-bdp-64MiB|--grpc-arg grpc.http2.bdp_probe=0 --grpc-arg grpc.http2.lookahead_bytes=67108864|--arg grpc.http2.bdp_probe=0 --arg grpc.http2.lookahead_bytes=67108864"
  "frame-16MiB|--grpc-arg grpc.http2.max_frame_size=16777215 --grpc-arg grpc.experimental.tcp_max_read_chunk_size=16777216|--arg grpc.http2.max_frame_size=16777215 --arg grpc.experimental.tcp_max_read_chunk_size=16777216"
)
for v in "${variants[@]}"; do
  IFS='|' read -r name sargs cargs <<<"$v"
  tmp=$(mktemp -d)
  # shellcheck disable=SC2086  # lists of arguments
  "$bin/sgemm-server" --listen 127.0.0.1:0 --port-file "$tmp/port" --backend "$backend" $sargs >"$OUT/variant-$name-server.log" 2>&1 &
  spid=$!
  for _ in $(seq 600); do [ -s "$tmp/port" ] && break; sleep 0.1; done
  echo "=== $name: server [$sargs] client [$cargs]" | tee -a "$OUT/variants.txt"
  # shellcheck disable=SC2086
  timeout 60 "$bin/grpc-transport-bench" --server "127.0.0.1:$(cat "$tmp/port")" --sizes "" --e2e-sizes "${SGEMM_VARIANT_E2E:-8192}" --repeat 3 $cargs \
    2>&1 | tee -a "$OUT/variants.txt"
  kill "$spid"; wait "$spid" 2>/dev/null
  rm -rf "$tmp"
done
