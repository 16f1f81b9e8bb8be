#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and builds only what serving needs (sgemm-server
# and sgemm-client, not the tests and benchmarks), then starts sgemm-server in
# the foreground on 0.0.0.0:50051, its logs in ${SGEMM_LOG_DIR:-logs}. Extra
# arguments go to sgemm-server, e.g.
#   scripts/serve.sh --backend cpu --log-dir /tmp/sgemm-logs
# From another shell: build/bin/sgemm-client submit --size 1024 --verify;
# tools/sgemm_timings.py logs/timings.jsonl (docs/operations.md).
set -euo pipefail
cd "$(dirname "$0")/.."
SGEMM_TARGETS="sgemm-server sgemm-client" scripts/setup.sh
echo "serve: the client is $(pwd)/build/bin/sgemm-client, the timings tool $(pwd)/tools/sgemm_timings.py" >&2
exec build/bin/sgemm-server --log-dir "${SGEMM_LOG_DIR:-logs}" "$@"
