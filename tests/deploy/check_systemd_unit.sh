#!/bin/sh
# deploy/systemd/sgemm-server.service passes `systemd-analyze verify` (no
# warning either) with ExecStart pointed at this build's sgemm-server, and
# sets no flag that binary lacks. Exits 77 (skipped) without systemd-analyze.
#   check_systemd_unit.sh UNIT SGEMM_SERVER_BIN
set -eu
unit=$1 bin=$2
command -v systemd-analyze >/dev/null 2>&1 || { echo "skipped: no systemd-analyze here"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
sed "s|/usr/bin/sgemm-server|$bin|" "$unit" > "$dir/sgemm-server.service"
if ! systemd-analyze verify "$dir/sgemm-server.service" > "$dir/out" 2>&1 || [ -s "$dir/out" ]; then
  echo "systemd-analyze verify $unit:"; cat "$dir/out"; exit 1
fi
# The SGEMM_* variables the unit sets are ones sgemm-server reads (its --help marks each "Env:").
for v in $(grep -o 'SGEMM_[A-Z_]*=' "$unit" | tr -d = | sort -u); do
  [ "$v" = SGEMM_SERVER_ARGS ] && continue
  "$bin" --help | grep -q "Env:$v" || { echo "$unit sets $v, which sgemm-server does not read"; exit 1; }
done
echo "$unit: systemd-analyze verify passes; its SGEMM_* variables are all sgemm-server's"
