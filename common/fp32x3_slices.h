// How the fp32x3 kernel cuts K into slices (split K), as pure shape arithmetic: the
// kernel's launcher (kernels/fp32x3_sgemm.cu) runs the cut and the planner
// (server/planner/kernel_choice.cc) judges speed and the fp32 contract by it, so both see
// the same cut. No CUDA here.
//
// The kernel's work unit is one 128 x 128 tile of C times one slice of K; a GPU of
// `sm_count` SMs runs one unit per SM at a time (a wave). Each slice's partial product
// goes through memory and a second kernel sums the slices pairwise. The cut:
//  * speed: the count with the least modelled time, waves x (slice length + a unit's
//    fixed cost) plus the partial products' traffic, and a cut only where that beats no
//    cut by kFp32x3SliceMinGain (the model's constants were fitted to sgemm-bench on one
//    H100, bench/results/2026-11-27_h100_fp32x3-splitk: on each of 15 shapes its pick
//    ran within 8% of the fastest measured count, within 6% on 14);
//  * accuracy: where cuBLAS SGEMM itself splits K (few tiles, long K:
//    sgemm_may_split_k), its sums are short and so its error is small; there no slice is
//    longer than kFp32x3ContractSliceKBlocks k-blocks, which kept fp32x3's error at or
//    below cuBLAS SGEMM's on every measured shape and input distribution.
// No slice is shorter than kFp32x3MinSliceKBlocks k-blocks of 32.
#pragma once

#include <cstdint>

#include "common/gemm_types.h"

namespace sgemm {

inline constexpr int64_t kFp32x3TileEdge = 128;             // rows and columns of a tile of C
inline constexpr int64_t kFp32x3KBlock = 32;                // K per pipeline stage
inline constexpr int64_t kFp32x3MinSliceKBlocks = 8;        // 256 of K at least per slice
inline constexpr int64_t kFp32x3ContractSliceKBlocks = 64;  // 2048 of K at most where cuBLAS splits K
inline constexpr int64_t kFp32x3UnitFixedKBlocks = 4;       // a unit's start-up and store, in k-blocks
inline constexpr double kFp32x3BytesPerKBlock = 3.3e6;      // device memory traffic in one unit k-block's time
inline constexpr double kFp32x3SliceMinGain = 0.9;          // a cut must model <= 0.9x the uncut time

// Where cuBLAS SGEMM was measured to split K (its sums then get short and its error
// small; one H100, bench/results/2026-11-26_h100_fp32-contract): C smaller than
// 2048 x 2048 and K more than m * n / 2048.
inline constexpr int64_t kSgemmSplitKMnPerK = 2048;
inline constexpr int64_t kSgemmSplitKBelowMn = int64_t{2048} * 2048;
bool sgemm_may_split_k(const GemmShape& shape);

struct Fp32x3Slices {
  int64_t count = 1;         // slices of K (1: K is not split)
  int64_t slice_blocks = 0;  // k-blocks per slice; the last slice may hold fewer
};

// K cut into `count` slices (clamped to [1, k-blocks]) of equal length, the last shorter.
Fp32x3Slices fp32x3_slices_of_count(const GemmShape& shape, int64_t count);

// The cut fp32x3 uses for `shape` (one launch) on a GPU of sm_count SMs.
Fp32x3Slices fp32x3_slices(const GemmShape& shape, int sm_count);

// Fraction of the SMs' time in whole waves that `units` work units keep busy.
double fp32x3_wave_fill(int64_t units, int sm_count);

}  // namespace sgemm
