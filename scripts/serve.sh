#!/usr/bin/env bash
# Sets up and builds (scripts/setup.sh), then starts sgemm-server in the
# foreground on 0.0.0.0:50051. Extra arguments go to sgemm-server, e.g.
#   scripts/serve.sh --backend cpu --log-dir /tmp/sgemm-logs
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec build/bin/sgemm-server --log-dir "${SGEMM_LOG_DIR:-logs}" "$@"
