#!/usr/bin/env bash
# cluster-check.sh: cluster mode on one machine as if on several (docs/cluster.md).
# Run by scripts/gpu-check.sh (PARTs cluster, cluster-sockets, cluster-nvlink) with
# BIN, OUT and LD_LIBRARY_PATH set; one sgemm-server per GPU (CUDA_VISIBLE_DEVICES).
#
#   scripts/cluster-check.sh MODE [SIZE]
#     MODE  sockets: NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 (NCCL over TCP, as between hosts)
#           nvlink:  NCCL as it likes (NVLink P2P between the GPUs)
#     SIZE  the square product of the benchmark (default 32768)
# Steps:
#   e2e     the e2e_cluster_multigpu_test suite (results vs fp64, a member killed mid-request)
#   engine  engine-bench --cluster N (one process per GPU, started by engine-bench): SIZE^3 row split
#           and the K split at SGEMM_CLUSTER_K_SHAPE, each against the coordinator's GPU alone in the
#           same run: kernel phase, device-side end to end (pinned host in -> out), the link measured at
#           join (broadcast and fan-out); SGEMM_CLUSTER_ITERS timed runs (3) after one warm-up
#   server  sgemm-server processes (a coordinator + members): SIZE^3 over the cluster (twice, the second
#           warm) and on the coordinator's GPU alone (--split single), then the K split (--split k:
#           slices of A and B from rank 0, reduce-scatter of the partial Cs) at SGEMM_CLUSTER_K_SHAPE
#           (default "4096 4096 262144": small m x n, long K), with the link the coordinator measured
# SGEMM_CLUSTER_PROCESSES caps the process count (default: the GPU count, at most 4).
# SGEMM_CLUSTER_E2E_TIMEOUT (240) and SGEMM_CLUSTER_ENGINE_TIMEOUT (240) bound those steps, in seconds.
# SGEMM_CLUSTER_SKIP lists steps to skip (comma or space separated): e2e, engine, server, and rows or k
# (the row-split or K-split products of both benchmarks); "bench" skips engine and server.
set -uo pipefail
mode=${1:?sockets or nvlink}
size=${2:-32768}
: "${BIN:?}" "${OUT:?}"
case $mode in
  sockets) export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 ;;
  nvlink) unset NCCL_P2P_DISABLE NCCL_SHM_DISABLE NCCL_IB_DISABLE ;;
  *) echo "unknown mode $mode" >&2; exit 2 ;;
esac
export NCCL_NVLS_ENABLE=0
gpus=$(nvidia-smi -L | wc -l)
n=${SGEMM_CLUSTER_PROCESSES:-$((gpus < 4 ? gpus : 4))}
[ "$n" -le "$gpus" ] || n=$gpus
if [ "$n" -lt 2 ]; then echo "cluster-check: needs 2 GPUs, found $gpus (skipped)"; exit 0; fi
export SGEMM_CLUSTER_PROCESSES=$n
log=$OUT/cluster-$mode
mkdir -p "$log"
rc=0

skips=",${SGEMM_CLUSTER_SKIP:-},"
skips=${skips// /,}
case $skips in *,bench,*) skips="$skips,engine,server," ;; esac
skip() { case $skips in *",$1,"*) return 0 ;; esac; return 1; }
read -r km kn kk <<<"${SGEMM_CLUSTER_K_SHAPE:-4096 4096 262144}"

if ! skip e2e; then
  echo "=== cluster $mode: $n processes x 1 GPU; e2e_cluster_multigpu_test"
  # Line-buffered, every test named as it starts: a step cut by its timeout still says where it was.
  timeout --kill-after=5 "${SGEMM_CLUSTER_E2E_TIMEOUT:-240}" stdbuf -oL -eL "$BIN/e2e_cluster_multigpu_test" \
    >"$log/e2e.log" 2>&1 || rc=1
  grep -E "RUN|OK \]|PASSED|FAILED|SKIPPED|Failure|next request|error|Which is|Expected" "$log/e2e.log" | tail -n 30
  echo "e2e_cluster_multigpu_test $mode: rc=$rc" >>"$OUT/summary.txt"
fi

# engine-bench --cluster: the cluster engine without the service, one process per GPU.
if ! skip engine; then
  shapes=()
  skip rows || shapes+=("${size}x${size}x${size}:rows")
  skip k || shapes+=("${km}x${kn}x${kk}:k")
  if [ ${#shapes[@]} -gt 0 ]; then
    list=$(IFS=,; echo "${shapes[*]}")
    echo "=== cluster $mode: engine-bench --cluster $n --shapes $list"
    timeout --kill-after=10 "${SGEMM_CLUSTER_ENGINE_TIMEOUT:-240}" "$BIN/engine-bench" --cluster "$n" --shapes "$list" \
      --iters "${SGEMM_CLUSTER_ITERS:-3}" --warmup 1 --sample 4 --csv-out "$log/engine-bench.csv" \
      >"$log/engine-bench.log" 2>&1 || rc=1
    grep -v "^engine-bench member-" "$log/engine-bench.log"
    grep -h "^cluster [0-9]" "$log/engine-bench.log" | sed "s/^cluster /cluster $mode engine-bench: /" \
      | tee -a "$OUT/summary.txt"
    grep -h "link between hosts" "$log/engine-bench.log" | tail -n 1 | sed "s/^/cluster $mode engine-bench: /" \
      | tee -a "$OUT/summary.txt"
  fi
fi
skip server && exit $rc

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap cleanup EXIT
cport=$((20000 + RANDOM % 20000))
CUDA_VISIBLE_DEVICES=0 "$BIN/sgemm-server" --listen 127.0.0.1:0 --port-file "$log/port" --backend cuda \
  --cluster-listen "127.0.0.1:$cport" --cluster-always --cluster-name coord >"$log/coord.log" 2>&1 &
pids+=($!)
for _ in $(seq 300); do [ -s "$log/port" ] && break; sleep 0.1; done
addr=127.0.0.1:$(cat "$log/port")
for i in $(seq 1 $((n - 1))); do
  CUDA_VISIBLE_DEVICES=$i "$BIN/sgemm-server" --listen 127.0.0.1:0 --backend cuda --join "127.0.0.1:$cport" \
    --cluster-name "member-$i" >"$log/member-$i.log" 2>&1 &
  pids+=($!)
done
for _ in $(seq 300); do [ "$(grep -c "' joined with" "$log/coord.log")" -ge $((n - 1)) ] && break; sleep 0.1; done
# Requests run on the coordinator alone while the communicator forms (a request
# starts it): one small product, then the coordinator's word that it is ready.
timeout 30 "$BIN/sgemm-client" submit --server "$addr" --size 64 --no-retry >"$log/warm-up.log" 2>&1
for _ in $(seq 600); do grep -q " ready: $n ranks" "$log/coord.log" && break; sleep 0.1; done

# bench NAME LABEL SPLIT CLIENT-ARGS...: the product twice over the cluster (the
# second warm) and once on the coordinator's GPU alone; the kernel phase (the
# slowest GPU of the warm run) and the server's device-side compute, vs one GPU.
bench() {
  local name=$1 label=$2 split=$3
  shift 3
  echo "=== cluster $mode: $label over $n processes (2 runs, the second warm)"
  timeout 80 "$BIN/sgemm-client" submit --server "$addr" "$@" --split "$split" --repeat 2 --seed 7 --no-retry \
    >"$log/cluster-$name.log" 2>&1 || rc=1
  cat "$log/cluster-$name.log"
  echo "=== cluster $mode: $label on the coordinator's GPU alone"
  timeout 50 "$BIN/sgemm-client" submit --server "$addr" "$@" --split single --seed 7 --no-retry \
    >"$log/single-$name.log" 2>&1 || rc=1
  cat "$log/single-$name.log"
  grep -h "link between hosts\|failed" "$log/coord.log" | tail -n 4
  awk -v mode="$mode" -v n="$n" -v label="$label" '
    FNR == 1 { file++ }
    file == 1 && /^plan:/ { run++; kmax[run] = 0 }
    # kernel ms: the 6th column from the right, before " on HOST" in cluster mode
    /^[0-9]+ / && !/runs:/ { k = (/ on [^ ]+$/ ? $(NF-7) : $(NF-5)) + 0 }
    file == 1 && /^[0-9]+ / && !/runs:/ { if (k > kmax[run]) kmax[run] = k }
    file == 1 && /^server:/ { comp[run] = $9 + 0 }
    file == 2 && /^[0-9]+ / && !/runs:/ { single_k = k }
    file == 2 && /^server:/ { single_comp = $9 + 0 }
    END {
      if (run < 1 || single_k <= 0 || kmax[run] <= 0) { print "cluster " mode " " label ": no figures (see the logs)"; exit }
      printf "cluster %s %dx1 GPU %s: kernel phase %.1f ms vs one GPU %.1f ms = %.2fx; device-side compute %.1f ms vs %.1f ms = %.2fx\n",
        mode, n, label, kmax[run], single_k, single_k / kmax[run], comp[run], single_comp, single_comp / comp[run]
    }' "$log/cluster-$name.log" "$log/single-$name.log" | tee -a "$OUT/summary.txt"
}

if ! skip rows; then
  bench "$size" "${size}^3" rows --size "$size"
fi
if ! skip k; then
  bench "k-${km}x${kn}x${kk}" "${km}x${kn}x${kk} K split" k --m "$km" --n "$kn" --k "$kk"
  grep -h "K split" "$log/cluster-k-${km}x${kn}x${kk}.log" | head -n 1
fi
grep -h "link between hosts" "$log/coord.log" | tail -n 1 | sed "s/^/cluster $mode: /" | tee -a "$OUT/summary.txt"
exit $rc
