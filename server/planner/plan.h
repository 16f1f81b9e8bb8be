// Planner: how one GEMM is split across devices. Pure C++: no CUDA, no gRPC.
//
// make_plan() is a pure function of (problem, device capabilities, load,
// forced strategy, cost-model constants) -> Plan. It estimates the time of
// each strategy with a small cost model (copy in over each GPU's host link,
// kernel at the GPU's fp32 rate, NCCL traffic over NVLink, copy out) that
// assumes the engine's pipelining (copies of one chunk overlap the kernel of
// another), and picks the cheapest. The constants live in PlannerOptions and
// are measured values (see docs/engine.md), not guesses buried in code.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/gemm_types.h"

namespace sgemm {

// One device's part of a product: rows [row_begin, row_end) of C, using
// columns [k_begin, k_end) of A and the same rows of B.
struct Shard {
  int device = -1;
  int64_t row_begin = 0;
  int64_t row_end = 0;
  int64_t k_begin = 0;
  int64_t k_end = 0;
  friend bool operator==(const Shard&, const Shard&) = default;
};

// A rectangle of a stored matrix: rows [row_begin, row_end) x columns
// [col_begin, col_end).
struct StoredBlock {
  int64_t row_begin = 0;
  int64_t row_end = 0;
  int64_t col_begin = 0;
  int64_t col_end = 0;
  friend bool operator==(const StoredBlock&, const StoredBlock&) = default;
};

// The block of a stored operand X that rows [row_begin, row_end) x columns
// [col_begin, col_end) of op(X) read: the same block under kN, the mirrored
// one under kT (op(X) = X^T: its rows are X's columns). Shards and pipeline
// blocks are ranges of op(A) and op(B); this is where they meet storage.
StoredBlock stored_block(Op op, int64_t row_begin, int64_t row_end, int64_t col_begin, int64_t col_end);
// What `shard` reads of the stored A (rows of C x its K range of op(A)): with
// op_a = kT a row split takes COLUMNS [row_begin, row_end) of the stored k x m
// A and a K split takes its ROWS [k_begin, k_end).
StoredBlock shard_a_block(const Shard& shard, Op op_a);
// What `shard` reads of the stored B (its K range of op(B), all n columns):
// with op_b = kT, columns [k_begin, k_end) of the stored n x k B.
StoredBlock shard_b_block(const Shard& shard, int64_t n, Op op_b);

// What the planner knows of one device. Rates are configured or measured
// (docs/engine.md has the H100/H200 figures the defaults come from).
struct DeviceCaps {
  int device = -1;               // the engine's device id (CUDA ordinal)
  double fp32_tflops = 47.0;     // sustained SGEMM rate of the default kernel (ping-pong: 46-48 on H100/H200)
  double host_link_gbps = 54.0;  // pinned host<->device copy rate, each direction (53-55 measured)
  double peer_gbps = 310.0;      // NVLink rate NCCL broadcast reached in the engine (305-318 measured)
  int busy_lanes = 0;            // requests running on it right now
  // Share of B's rows already on this device (a resident matrix, docs/resident.md):
  // those rows need no copy in, so a request goes where its B lives.
  double b_resident_fraction = 0.0;
};

// Cost-model constants and split geometry. Defaults are measured on H100/H200
// (SXM, NVLink 4) and documented in docs/engine.md.
struct PlannerOptions {
  // Alignment of row-split boundaries (rows), when the rows allow it.
  int64_t row_align = 128;
  // Alignment of K-split boundaries (elements of K), when K allows it.
  int64_t k_align = 16;
  // Fixed cost of a single-GPU request: launches, events, host sync (ms).
  double single_overhead_ms = 0.02;
  // Extra fixed cost of a split request: NCCL launches, one lane per GPU, the
  // split mutex (ms).
  double split_overhead_ms = 0.10;
  // Latency of one NCCL collective, beyond its bandwidth term (ms).
  double nccl_latency_ms = 0.02;
  // NCCL sum-reduce algBw as a fraction of DeviceCaps::peer_gbps: a 64 MiB
  // reduce over 2 H100/H200 takes ~0.2 ms, 335 GB/s, against 390 GB/s.
  double reduce_vs_peer = 0.86;
  // Chunks per shard the engine pipelines copy-in / kernel / copy-out over.
  int pipeline_chunks = 8;
  // Kernel efficiency falls for thin problems; below this many rows, columns
  // or K the rate scales down linearly (a 64-row product runs at ~1/8 of the
  // full rate of a 512-row one).
  int64_t full_rate_extent = 512;
  // A busy device shares its rate among its requests: effective rate is
  // rate / (1 + busy_lanes * busy_share).
  double busy_share = 1.0;
};

// The K-split partial sums are combined either by reduce-scatter (every GPU
// copies out its own block of rows) or by reduce to one GPU that copies out
// everything. The engine picks; the planner costs the one it is told.
enum class KReduce { kReduceScatter, kReduceToRoot };
std::string_view k_reduce_name(KReduce r);

struct PlanRequest {
  GemmShape shape;
  bool has_c = false;
  SplitMode forced = SplitMode::kAuto;  // kAuto: the cost model decides
  KReduce k_reduce = KReduce::kReduceScatter;
  std::vector<DeviceCaps> devices;  // at least one
};

struct Plan {
  SplitMode mode = SplitMode::kSingle;  // never kAuto
  // kSingle: one shard. kRows / kK: one shard per device in request order
  // (some may be empty when the problem is smaller than the device count).
  std::vector<Shard> shards;
  double est_ms = 0;         // estimate of the chosen strategy
  double single_est_ms = 0;  // estimate on the best single device, for the reason
  std::string reason;        // human readable: "rows: 2 GPUs, est 12.1 ms vs single 22.0 ms"
};

// Estimates (ms) of each strategy; exposed for tests and the benchmark.
double estimate_single_ms(const GemmShape& s, bool has_c, const DeviceCaps& d, const PlannerOptions& o);
double estimate_rows_ms(const GemmShape& s, bool has_c, const std::vector<DeviceCaps>& d,
                        const std::vector<Shard>& shards, const PlannerOptions& o);
double estimate_k_ms(const GemmShape& s, bool has_c, const std::vector<DeviceCaps>& d, const std::vector<Shard>& shards,
                     KReduce r, const PlannerOptions& o);

// Splits [0, total) into weights.size() consecutive ranges with sizes roughly
// proportional to the weights, boundaries at multiples of `align` where that
// leaves every part non-empty; otherwise the alignment is relaxed (down to 1).
// Parts may be empty only when total < number of parts. Returns the
// boundaries: weights.size() + 1 values, first 0, last total.
std::vector<int64_t> split_range(int64_t total, const std::vector<double>& weights, int64_t align);

// Chooses the strategy. Forced kRows/kK on one device degenerates to kSingle
// (the reason says so). Small requests go whole to the least busy device.
Plan make_plan(const PlanRequest& request, const PlannerOptions& options = {});

// The engine's pipeline blocks: what one kernel launch computes.
// Rows of one block of a shard of `rows` rows (single GPU and row split):
// `chunk_rows` when set, else rows / pipeline_chunks rounded up to 128 and at
// least 512 (smaller blocks leave the kernel's grid too small to fill 132 SMs;
// docs/engine.md). A shard smaller than that is one block.
int64_t pipeline_row_block(int64_t rows, int64_t chunk_rows, int pipeline_chunks);
// The row blocks of rows [begin, end) of a C `n` wide, in blocks of `step`:
// boundaries, first `begin`, last `end`. The last block's rows of C go to the
// host after its kernel with nothing left to hide the copy, so where that block
// is large it is split, its last part a quarter of it (rounded up to 128 rows,
// at most half of it), provided that part still fills the GPU (at least 2 Mi elements of C: 128
// tiles of 128x128, about one wave on 132 SMs).
std::vector<int64_t> pipeline_row_bounds(int64_t begin, int64_t end, int64_t step, int64_t n);
// K of one block of a K slice of `kc` (K split of `s`): `chunk_k` when set, else
// kc / pipeline_chunks rounded up to 16, at least 2048, or at least 16384 when C
// is small (m * n <= 4 Mi elements: each block would not fill the GPU).
int64_t pipeline_k_block(const GemmShape& s, int64_t kc, int64_t chunk_k, int pipeline_chunks);
// The largest product one kernel launch computes under `plan` for `s`: the
// shape the kernel is chosen for (server/planner/kernel_choice.h).
GemmShape kernel_block_shape(const Plan& plan, const GemmShape& s, int64_t chunk_rows, int64_t chunk_k,
                             int pipeline_chunks);

}  // namespace sgemm
