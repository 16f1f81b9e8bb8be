#!/usr/bin/env bash
# obs-figures.sh [BUILD]: the observability pictures and samples of docs/observability.md,
# made with the project's own commands on THIS machine's backend (cpu when it
# has no GPU; the files say which). The GPU versions come from
# `scripts/gpu-check.sh obs` (docs/observability.md, "Pictures").
#
#   scripts/obs-figures.sh            # after cmake --build build
#
# Writes bench/results/<date>_<backend>_observability/ (one trace, timings.jsonl, its
# summary and list, a metrics scrape, the commands) and
# docs/img/obs-<backend>-{trace,timings}.png.
set -euo pipefail
cd "$(dirname "$0")/.."
b=${1:-build}
backend=${SGEMM_OBS_BACKEND:-cpu}
py=/usr/bin/python3
[ -x "$py" ] || py=python3
out=bench/results/$(date -u +%F)_${backend}_observability
rm -rf "$out"
mkdir -p docs/img "$out"
traces=$(mktemp -d)
tool="$py tools/sgemm_timings.py"

"$b/bin/sgemm-server" --listen 127.0.0.1:0 --port-file "$out/port" --backend "$backend" --log-dir "$out/logs" \
  --trace-dir "$traces" --metrics-listen 127.0.0.1:0 >"$out/server.log" 2>&1 &
spid=$!
trap 'kill $spid 2>/dev/null || true' EXIT
for _ in $(seq 300); do [ -s "$out/port" ] && break; sleep 0.1; done
addr=127.0.0.1:$(cat "$out/port")
mport=$(sed -n 's/.*\/metrics (port \([0-9]*\)).*/\1/p' "$out/server.log" | head -n 1)
client() { echo "+ sgemm-client $*" >>"$out/commands.txt"; "$b/bin/sgemm-client" "$@"; }

client submit --server "$addr" --size 512 --verify --repeat 10 >"$out/submit-512.txt"
client submit --server "$addr" --m 1000 --n 700 --k 300 --beta 0.5 --verify --repeat 5 >"$out/submit-odd.txt"
client submit --server "$addr" --size 1536 --verify --trace "$out/trace-1536.json" >"$out/submit-1536.txt"
client submit --server "$addr" --size 1536 --repeat 4 >>"$out/submit-1536.txt"
$py -c "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1]).read().decode())" \
  "http://127.0.0.1:$mport/metrics" >"$out/metrics.txt"
kill "$spid"
wait "$spid" || true
trap - EXIT

{
  echo "# $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD), backend $backend"
  echo "# host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
  echo "# tools/sgemm_timings.py summary $out/logs/timings.jsonl"
  $tool summary "$out/logs/timings.jsonl"
} >"$out/timings-summary.txt"
$tool list "$out/logs/timings.jsonl" >"$out/timings-list.txt"
$tool trace "$out/trace-1536.json" >"$out/trace-1536-summary.txt"
$tool trace "$out/trace-1536.json" --png "docs/img/obs-$backend-trace.png" \
  --title "sgemm-client submit --size 1536 --trace (backend $backend, $(nproc)-core build host)" >/dev/null
$tool summary "$out/logs/timings.jsonl" --png "docs/img/obs-$backend-timings.png" >/dev/null
echo "--trace-dir wrote $(ls "$traces" | wc -l) traces (one per request; not kept)" >>"$out/commands.txt"
rm -rf "$traces" "$out/port"
echo "obs-figures: $out, docs/img/obs-$backend-trace.png, docs/img/obs-$backend-timings.png"
