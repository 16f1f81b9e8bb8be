#include "common/fp32x3_slices.h"

#include <algorithm>

namespace sgemm {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Modelled time of a cut, in k-blocks of one unit on one SM.
double modelled_time(const GemmShape& s, int64_t tiles, const Fp32x3Slices& cut, int sm_count) {
  const double waves = double(ceil_div(tiles * cut.count, std::max(sm_count, 1)));
  const double traffic = cut.count > 1 ? 8.0 * double(cut.count) * double(s.m) * double(s.n) : 0.0;
  return waves * double(cut.slice_blocks + kFp32x3UnitFixedKBlocks) + traffic / kFp32x3BytesPerKBlock;
}

}  // namespace

bool sgemm_may_split_k(const GemmShape& s) {
  return s.m * s.n < kSgemmSplitKBelowMn && s.k * kSgemmSplitKMnPerK > s.m * s.n;
}

Fp32x3Slices fp32x3_slices_of_count(const GemmShape& shape, int64_t count) {
  const int64_t k_blocks = std::max<int64_t>(ceil_div(shape.k, kFp32x3KBlock), 1);
  count = std::clamp<int64_t>(count, 1, k_blocks);
  const int64_t per = ceil_div(k_blocks, count);
  return {ceil_div(k_blocks, per), per};
}

double fp32x3_wave_fill(int64_t units, int sm_count) {
  if (units < 1 || sm_count < 1) return 0.0;
  return double(units) / double(ceil_div(units, sm_count) * sm_count);
}

Fp32x3Slices fp32x3_slices(const GemmShape& shape, int sm_count) {
  const int64_t k_blocks = std::max<int64_t>(ceil_div(shape.k, kFp32x3KBlock), 1);
  const int64_t tiles = ceil_div(shape.m, kFp32x3TileEdge) * ceil_div(shape.n, kFp32x3TileEdge);
  const int64_t most = std::max<int64_t>(k_blocks / kFp32x3MinSliceKBlocks, 1);
  // The contract's bound on slice length, where cuBLAS splits K (and the minimum slice allows it).
  const int64_t fewest = sgemm_may_split_k(shape) ? std::min(ceil_div(k_blocks, kFp32x3ContractSliceKBlocks), most) : 1;
  // Beyond a few waves of units more slices only add traffic.
  const int64_t last = std::max(fewest, std::min(most, fewest + 8 * int64_t(std::max(sm_count, 1))));
  const Fp32x3Slices floor_cut = fp32x3_slices_of_count(shape, fewest);
  Fp32x3Slices best = floor_cut;
  double best_time = modelled_time(shape, tiles, best, sm_count);
  for (int64_t count = fewest + 1; count <= last; ++count) {
    const Fp32x3Slices cut = fp32x3_slices_of_count(shape, count);
    if (cut.count != count) continue;  // the same cut as a smaller count
    const double t = modelled_time(shape, tiles, cut, sm_count);
    if (t < best_time) {
      best = cut;
      best_time = t;
    }
  }
  // A cut for speed alone must win clearly: the model ignores what it does not see.
  if (best.count != floor_cut.count &&
      best_time > kFp32x3SliceMinGain * modelled_time(shape, tiles, floor_cut, sm_count))
    return floor_cut;
  return best;
}

}  // namespace sgemm
