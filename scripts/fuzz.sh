#!/usr/bin/env bash
# Builds the libFuzzer targets (preset fuzz: clang-14, ASan/UBSan) and runs
# each from the committed seed corpus (tests/fuzz/corpus/) for SECONDS
# (default 30; CI runs both, a minute in all). New inputs go to a scratch
# directory, not the committed corpus. Fails on any crash, leak, timeout or
# sanitizer report, leaving the input under build-fuzz/findings/.
#   scripts/fuzz.sh            # 30 s each
#   scripts/fuzz.sh 600        # a longer run
#   scripts/fuzz.sh --corpus   # rewrite tests/fuzz/corpus/ from the e2e messages (write_corpus.cc)
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset fuzz >/dev/null
cmake --build build-fuzz --target sgemm-fuzz-codec sgemm-fuzz-assembly sgemm-fuzz-write-corpus -j "$(nproc)"
if [ "${1:-}" = "--corpus" ]; then
  rm -rf tests/fuzz/corpus
  build-fuzz/bin/sgemm-fuzz-write-corpus tests/fuzz/corpus
  exit 0
fi
seconds="${1:-30}"
findings=build-fuzz/findings
mkdir -p "$findings"
for target in codec assembly; do
  scratch=$(mktemp -d)
  extra=()
  [ "$target" = assembly ] && extra=(-max_len=65536)
  echo "fuzz: $target for ${seconds} s"
  if ! build-fuzz/bin/sgemm-fuzz-$target "$scratch" tests/fuzz/corpus/$target -max_total_time="$seconds" \
       -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$findings/$target-" "${extra[@]}" \
       > "$findings/$target.log" 2>&1; then
    tail -60 "$findings/$target.log" >&2
    echo "fuzz: $target FAILED; the input is in $findings/" >&2
    rm -rf "$scratch"
    exit 1
  fi
  grep -E "stat::number_of_executed_units|Done" "$findings/$target.log" || true
  rm -rf "$scratch"
done
echo "fuzz: no findings"
