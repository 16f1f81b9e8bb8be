#!/usr/bin/env bash
# clang-tidy (.clang-tidy) with clang's thread-safety analysis over our C++:
# the .cc files of server/, common/, client/ and proto/, and our headers
# through them. Not the .cu files: clang 14 cannot parse CUDA 13's headers
# (its CUDA wrapper includes texture_fetch_functions.h, which CUDA 12 dropped);
# their host-side code lives in .cc files, which are checked.
# Uses the compile commands of a built tree (the generated protobuf headers
# must exist): `cmake --preset ci && cmake --build build`, as scripts/test.sh does.
#
#   scripts/tidy.sh                        # self-test, then every file (CI)
#   scripts/tidy.sh server/cluster/*.cc    # self-test, then these files
#   scripts/tidy.sh --self-test            # the self-test alone (seconds)
#   SGEMM_TIDY_BUILD=build-debug SGEMM_TIDY_JOBS=4 scripts/tidy.sh
#
# The self-test proves the thread-safety check is armed before trusting a clean
# run: a snippet that reads a SGEMM_GUARDED_BY member without its mutex, calls a
# SGEMM_REQUIRES function without it and reads after MutexLock::unlock() must
# fail with exactly those three errors; one that locks correctly must pass.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build="${SGEMM_TIDY_BUILD:-build}"
jobs="${SGEMM_TIDY_JOBS:-$(nproc)}"
tidy=$(command -v clang-tidy || command -v clang-tidy-14 || true)
runner=$(command -v run-clang-tidy || command -v run-clang-tidy-14 || true)
[ -n "$tidy" ] && [ -n "$runner" ] || {
  echo "tidy: clang-tidy and run-clang-tidy not found (scripts/setup.sh installs clang-tidy)" >&2
  exit 1
}
# -Wno-error: the compile commands are GCC's (-Werror); clang's own -Wall
# findings are not this check's business, .clang-tidy decides what fails.
extra=(-extra-arg=-Wthread-safety -extra-arg=-Wno-error -extra-arg=-Wno-unknown-warning-option)

self_test() {
  local dir
  dir=$(mktemp -d)
  trap 'rm -rf "$dir"' RETURN
  cat >"$dir/locked_wrong.cc" <<'EOF'
#include "common/thread_annotations.h"
namespace sgemm {
class Counter {
 public:
  int read_unlocked() { return n_; }
  void bump() { bump_locked(); }
  int read_after_unlock() {
    MutexLock lock(mu_);
    lock.unlock();
    return n_;
  }
 private:
  void bump_locked() SGEMM_REQUIRES(mu_) { ++n_; }
  Mutex mu_;
  int n_ SGEMM_GUARDED_BY(mu_) = 0;
};
}  // namespace sgemm
EOF
  cat >"$dir/locked_right.cc" <<'EOF'
#include <deque>
#include "common/thread_annotations.h"
namespace sgemm {
class Queue {
 public:
  void push(int v) SGEMM_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    items_.push_back(v);
    cv_.notify_one();
  }
  int pop() SGEMM_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    lock.wait(cv_, [&] {
      mu_.assert_held();
      return !items_.empty();
    });
    const int v = take_locked();
    lock.unlock();
    lock.lock();
    return v + int(items_.size());
  }
 private:
  int take_locked() SGEMM_REQUIRES(mu_) {
    const int v = items_.front();
    items_.pop_front();
    return v;
  }
  Mutex mu_;
  std::condition_variable cv_;
  std::deque<int> items_ SGEMM_GUARDED_BY(mu_);
};
}  // namespace sgemm
EOF
  local args=(--config-file="$root/.clang-tidy" --quiet)
  local flags=(-- -std=c++20 -I"$root" -Wthread-safety)
  local out found
  if out=$("$tidy" "${args[@]}" "$dir/locked_wrong.cc" "${flags[@]}" 2>&1); then
    echo "tidy: self-test: an unlocked access to guarded data passed clang-tidy; the thread-safety check is off" >&2
    echo "$out" >&2
    return 1
  fi
  found=$(grep -c 'error: .*\[clang-diagnostic-thread-safety-analysis' <<<"$out" || true)
  if [ "$found" != 3 ]; then
    echo "tidy: self-test: expected 3 thread-safety errors in the wrong snippet, got $found:" >&2
    echo "$out" >&2
    return 1
  fi
  if ! out=$("$tidy" "${args[@]}" "$dir/locked_right.cc" "${flags[@]}" 2>&1); then
    echo "tidy: self-test: correctly locked code fails clang-tidy:" >&2
    echo "$out" >&2
    return 1
  fi
  echo "tidy: self-test: unlocked accesses are errors, locked code passes"
}

self_test
[ "${1:-}" = "--self-test" ] && exit 0

db="$build/compile_commands.json"
[ -f "$db" ] || {
  echo "tidy: $db not found: configure and build first (cmake --preset ci && cmake --build build)" >&2
  exit 1
}
if (($#)); then
  files=()
  for f in "$@"; do files+=("$root/$f"); done
else
  # Every .cc of ours the build compiles (the compile database also lists
  # tests, benchmarks, kernels' launch code and generated sources).
  mapfile -t files < <(python3 - "$db" "$root" <<'EOF'
import json, re, sys
db, root = sys.argv[1], sys.argv[2]
ours = re.compile(re.escape(root) + r"/(server|common|client|proto)/[^ ]*\.cc$")
print("\n".join(sorted({e["file"] for e in json.load(open(db)) if ours.match(e["file"])})))
EOF
  )
fi
echo "tidy: ${#files[@]} files, $jobs at a time ($("$tidy" --version | grep -m1 -o 'version [0-9.]*'))"
# run-clang-tidy takes regular expressions: each path is escaped and anchored.
mapfile -t patterns < <(printf '%s\n' "${files[@]}" | sed 's/[][\.*^$+?(){}|]/\\&/g; s/.*/^&$/')
set +e
"$runner" -p "$build" -j "$jobs" -quiet -clang-tidy-binary "$tidy" "${extra[@]}" "${patterns[@]}" 2>&1 |
  grep -v '^[^ ]*clang-tidy[-0-9]* .* -p=\|warnings\? generated\.$\|^Suppressed [0-9]* warnings\|^Use -header-filter\|^$'
status=${PIPESTATUS[0]}
set -e
if [ "$status" -ne 0 ]; then
  echo "tidy: clang-tidy found the errors above (.clang-tidy says which checks run and why)" >&2
  exit 1
fi
echo "tidy: clean"
