// Kernel choice by measurement: the first time a device runs a kernel shape
// (the largest block of a plan, server/planner/plan.h), the measured speeds'
// pick and the other fp32 kernel are timed on it, on that device, and the
// faster is kept for that shape from then on (server/planner/kernel_choice.h,
// prefer_measured). The speeds are measured on a few shapes per class; what
// ping-pong and cuBLAS each do with a given shape's last wave is not
// (512x4096x4096: ping-pong 103% of cuBLAS, 512x6144x6144: 78%; docs/engine.md,
// "Kernel choice").
//
// A measurement runs on the lane of the request that meets the shape first,
// on zero-filled scratch operands laid out as the engine lays out its blocks
// (leading dimensions padded to 4 floats), before that request's own work.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "common/gemm_types.h"
#include "common/status.h"
#include "server/devices/device_pool.h"

namespace sgemm {

struct KernelTunerOptions {
  // Scratch A, B and C (and the kernels' workspace) one measurement may
  // allocate; a larger shape keeps the measured speeds' pick. 768 MiB covers the
  // 1536x12288x12288 blocks of a 12288^3 product on one GPU.
  std::size_t max_bytes = std::size_t{768} << 20;
  // Shapes of fewer flops (2mnk) keep the measured speeds' pick: their times are mostly
  // launch overhead. 2^26 (a 512x64x2048 block) still takes 18 us in cuBLAS and
  // 69 us in ping-pong on an H100: timed.
  double min_flops = double(int64_t{1} << 26);
  // Timed rounds, each running every candidate once, after one untimed run each;
  // the median per kernel is compared.
  int rounds = 5;
  // The other kernel must be this much faster (a fraction) to replace the measured speeds' pick.
  double margin = 0.02;
};

struct KernelDecision {
  KernelKind kind = KernelKind::kCublas;  // what runs
  bool measured = false;                  // false: the speeds' pick, not timed (note says why)
  KernelKind table_pick = KernelKind::kCublas;
  KernelKind other = KernelKind::kPingpong;
  double table_ms = 0, other_ms = 0;  // medians, when measured
  std::string note;                   // for the plan's reason and the log
};

class KernelTuner {
 public:
  explicit KernelTuner(KernelTunerOptions options) : options_(options) {}

  // The kernel for `shape` (alpha, beta as the request's) on `lane`'s device:
  // from the cache, else measured now on `lane` (its compute stream; the call
  // waits for it). Measurement errors are returned; the caller keeps the
  // table's pick then.
  StatusOr<KernelDecision> choose(Lane& lane, const GemmShape& shape, bool beta_nonzero, KernelKind table_pick,
                                  KernelKind other);

 private:
  StatusOr<KernelDecision> measure(Lane& lane, const GemmShape& shape, bool beta_nonzero, KernelKind table_pick,
                                   KernelKind other) const;

  const KernelTunerOptions options_;
  std::mutex mu_;
  // (device ordinal, m, n, k, beta != 0) -> decision
  std::map<std::tuple<int, int64_t, int64_t, int64_t, bool>, KernelDecision> cache_;
};

}  // namespace sgemm
