// Launchers of the ping-pong SGEMM (kernels/pingpong_sgemm.cuh). The only place
// its kernels are launched; each launcher returns the launch's cudaGetLastError()
// as a Status.
#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <string>

#include "common/kernel_registry.h"
#include "kernels/cuda_status.h"
#include "kernels/gemv_sgemm.h"
#include "kernels/launch_util.h"
#include "kernels/pingpong_sgemm.cuh"
#include "kernels/pingpong_sgemm.h"
#include "kernels/tma_simt_sgemm.h"

namespace sgemm {
namespace {

using pingpong::PingpongConfig;

//                                 BM   BN  BK WM WN TWM TWN TM  TN  ST MINB (GROUP_M)
// (WM, WN: warps along M and N)
using Large = PingpongConfig<128, 128, 16, 4, 2, 4, 8, 8, 8, 3, 2>;      // 256 thr, warp 32x64
using Wide = PingpongConfig<128, 128, 8, 2, 2, 8, 4, 8, 16, 4, 2>;       // 128 thr, warp 64x64
using Huge = PingpongConfig<128, 256, 8, 2, 4, 8, 4, 8, 16, 4, 1>;       // 256 thr, warp 64x64
using Medium = PingpongConfig<128, 64, 16, 2, 2, 8, 4, 8, 8, 3, 4>;      // 128 thr, warp 64x32
using Small = PingpongConfig<64, 64, 16, 2, 2, 4, 8, 8, 4, 4, 4>;        // 128 thr, warp 32x32
using SmallWide = PingpongConfig<64, 128, 16, 2, 2, 4, 8, 8, 8, 3, 4>;   // 128 thr, warp 32x64
using SmallWide4 = PingpongConfig<64, 128, 16, 2, 2, 4, 8, 8, 8, 4, 4>;  // 128 thr, warp 32x64
using SmallWideK8 = PingpongConfig<64, 128, 8, 2, 2, 4, 8, 8, 8, 4, 4>;  // 128 thr, warp 32x64
using Mini = PingpongConfig<64, 64, 16, 2, 1, 4, 8, 8, 8, 4, 8>;         // 64 thr, warp 32x64
// Thin classes: tiles shaped to the thin side of C, split-K to fill the device.
using Tall = PingpongConfig<256, 32, 16, 4, 1, 8, 4, 8, 8, 3, 3>;     // 128 thr, warp 64x32, for n <= 32
using Flat = PingpongConfig<32, 128, 16, 2, 2, 4, 8, 4, 8, 4, 4>;     // 128 thr, warp 16x64, for m <= 32
using TallK32 = PingpongConfig<128, 32, 32, 4, 1, 8, 4, 4, 8, 3, 3>;  // 128 thr, warp 32x32, BK 32
// BK 32 with 4x8 thread tiles (K-major A candidates, bench/results/2026-11-22_h100_thin-kmajor-a/).
using Small32 = PingpongConfig<64, 64, 32, 2, 2, 8, 4, 4, 8, 3, 4>;        // 128 thr, warp 32x32
using Medium32 = PingpongConfig<128, 64, 32, 4, 2, 8, 4, 4, 8, 3, 2>;      // 256 thr, warp 32x32
using Wide32 = PingpongConfig<64, 128, 32, 2, 4, 8, 4, 4, 8, 3, 2>;        // 256 thr, warp 32x32
using Flat32 = PingpongConfig<32, 128, 32, 2, 2, 4, 8, 4, 8, 3, 3>;        // 128 thr, warp 16x64
using SmallWide4B3 = PingpongConfig<64, 128, 16, 2, 2, 4, 8, 8, 8, 4, 3>;  // SmallWide4 at 3 blocks/SM (170 regs)
using MediumK32 = PingpongConfig<128, 64, 32, 2, 2, 8, 4, 8, 8, 3, 2>;     // 128 thr, warp 64x32, BK 32

// C = beta * C ahead of split-K accumulation (C is not read when beta == 0).
Status prescale_c(const GemmArgs& g, cudaStream_t stream) {
  if (g.beta == 1.0f) return Status::Ok();
  if (g.beta == 0.0f)
    return SGEMM_CUDA_STATUS(cudaMemset2DAsync(g.c, size_t(g.ldc) * sizeof(float), 0, size_t(g.shape.n) * sizeof(float),
                                               size_t(g.shape.m), stream));
  const unsigned cols = unsigned(std::min<int64_t>((g.shape.n + 255) / 256, 64));
  const unsigned rows = unsigned(std::min<int64_t>(g.shape.m, 65535));
  pingpong::scale_matrix_kernel<<<dim3(cols, rows), 256, 0, stream>>>(int(g.shape.m), int(g.shape.n), g.beta, g.c,
                                                                      g.ldc);
  return SGEMM_CUDA_STATUS(cudaGetLastError());
}

// C = sum of the workspace slices + beta*C (deterministic split-K, second launch).
Status launch_splitk_reduce(const GemmArgs& g, int splits, const float* w, int64_t ldw, cudaStream_t stream) {
  const bool vec = (reinterpret_cast<uintptr_t>(g.c) & 15u) == 0 && g.ldc % 4 == 0;
  const int v = vec ? 4 : 1;
  const dim3 grid{unsigned(std::min<int64_t>((g.shape.n + 256 * v - 1) / (256 * v), 64)),
                  unsigned(std::min<int64_t>(g.shape.m, 65535))};
  const int m = int(g.shape.m), n = int(g.shape.n);
  if (vec)
    pingpong::splitk_reduce_kernel<true><<<grid, 256, 0, stream>>>(m, n, splits, w, ldw, g.beta, g.c, g.ldc);
  else
    pingpong::splitk_reduce_kernel<false><<<grid, 256, 0, stream>>>(m, n, splits, w, ldw, g.beta, g.c, g.ldc);
  return SGEMM_CUDA_STATUS(cudaGetLastError());
}

// How split-K partials meet: a workspace and a reduction launch (deterministic),
// atomics into C (tuning only), or distributed shared memory inside a cluster of
// the splits of one tile (deterministic, at most 8 splits, no workspace).
enum class SplitReduce { kWorkspace, kAtomic, kCluster };
constexpr int kMaxClusterSplits = 8;  // the portable cluster size

// The caller's scratch for deterministic split-K: `bytes` at `data`.
struct Workspace {
  void* data = nullptr;
  std::size_t bytes = 0;
};

// Bytes of the split-K workspace: one m x ldw slice per split (ldw = n rounded up to 4).
std::size_t splitk_workspace_bytes(const GemmShape& s, int splits) {
  if (splits <= 1) return 0;
  return std::size_t(splits) * std::size_t(s.m) * std::size_t((s.n + 3) / 4 * 4) * sizeof(float);
}

// INVALID_ARGUMENT unless `ws` holds the split-K workspace of `splits` slices of s's C.
Status check_splitk_workspace(const GemmShape& s, int splits, const Workspace& ws) {
  const std::size_t need = splitk_workspace_bytes(s, splits);
  if (ws.data == nullptr || ws.bytes < need)
    return InvalidArgument("workspace: split-K over " + std::to_string(splits) + " slices needs " +
                           std::to_string(need) + " bytes, got " + std::to_string(ws.bytes) +
                           " (ask pingpong_workspace_bytes)");
  return Status::Ok();
}

// The split count launch() really uses (common/kernel_registry.h: the row choice counts
// work units with the same arithmetic).
int effective_splits(const GemmShape& s, int bk, int splits) { return simt_effective_splits(s, bk, splits); }

template <class Cfg, bool kVectorized, bool kAKMajor>
Status launch_cluster_reduce(const GemmArgs& g, cudaStream_t stream, dim3 grid, int per_split) {
  static std::atomic<uint64_t> smem_raised{0};
  auto kernel = pingpong::pingpong_sgemm_kernel<Cfg, kVectorized, true, kAKMajor>;
  constexpr int kSmem = kAKMajor ? Cfg::AKM_SMEM_BYTES : Cfg::SMEM_BYTES;
  SGEMM_RETURN_IF_ERROR(ensure_smem_limit(kernel, kSmem, smem_raised));
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(Cfg::THREADS);
  cfg.dynamicSmemBytes = kSmem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 1;
  attr[0].val.clusterDim.y = grid.y;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  const int m = int(g.shape.m), n = int(g.shape.n), k = int(g.shape.k);
  float* no_workspace = nullptr;
  return SGEMM_CUDA_STATUS(cudaLaunchKernelEx(&cfg, kernel, m, n, k, g.alpha, g.a, g.lda, g.b, g.ldb, g.beta, g.c,
                                              g.ldc, per_split, no_workspace, int64_t{0}));
}

template <class Cfg, bool kVectorized, bool kAKMajor = false>
Status launch(const GemmArgs& g, Workspace ws, cudaStream_t stream, int splits,
              SplitReduce reduce = SplitReduce::kWorkspace) {
  static std::atomic<uint64_t> smem_raised{0};
  auto kernel = pingpong::pingpong_sgemm_kernel<Cfg, kVectorized, false, kAKMajor>;
  constexpr int kSmem = kAKMajor ? Cfg::AKM_SMEM_BYTES : Cfg::SMEM_BYTES;
  SGEMM_RETURN_IF_ERROR(ensure_smem_limit(kernel, kSmem, smem_raised));
  const int64_t tiles = ((g.shape.m + Cfg::BM - 1) / Cfg::BM) * ((g.shape.n + Cfg::BN - 1) / Cfg::BN);
  if (tiles > INT_MAX) return InvalidArgument("shape: too many tiles for one launch");
  const int k_tiles = int((g.shape.k + Cfg::BK - 1) / Cfg::BK);
  if (reduce == SplitReduce::kCluster) splits = std::min(splits, kMaxClusterSplits);
  splits = effective_splits(g.shape, Cfg::BK, splits);
  const int per_split = (k_tiles + splits - 1) / splits;
  const dim3 grid{unsigned(tiles), unsigned(splits)};
  const int m = int(g.shape.m), n = int(g.shape.n), k = int(g.shape.k);
  if (splits > 1 && reduce == SplitReduce::kCluster) {
    if constexpr (Cfg::TM * Cfg::TN * Cfg::THREADS * int(sizeof(float)) <= Cfg::SMEM_BYTES)
      return launch_cluster_reduce<Cfg, kVectorized, kAKMajor>(g, stream, grid, per_split);
    else
      return InvalidArgument("variant: this tile's accumulators do not fit its shared memory for a cluster reduction");
  }
  if (splits > 1 && reduce == SplitReduce::kWorkspace) {
    const int64_t ldw = (g.shape.n + 3) / 4 * 4;
    SGEMM_RETURN_IF_ERROR(check_splitk_workspace(g.shape, splits, ws));
    float* w = static_cast<float*>(ws.data);
    kernel<<<grid, dim3(Cfg::THREADS), kSmem, stream>>>(m, n, k, g.alpha, g.a, g.lda, g.b, g.ldb, g.beta, g.c, g.ldc,
                                                        per_split, w, ldw);
    SGEMM_CUDA_TRY(cudaGetLastError());
    return launch_splitk_reduce(g, splits, w, ldw, stream);
  }
  if (splits > 1) SGEMM_RETURN_IF_ERROR(prescale_c(g, stream));
  kernel<<<grid, dim3(Cfg::THREADS), kSmem, stream>>>(m, n, k, g.alpha, g.a, g.lda, g.b, g.ldb, g.beta, g.c, g.ldc,
                                                      per_split, nullptr, 0);
  return SGEMM_CUDA_STATUS(cudaGetLastError());
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// B and C are touched 16 bytes at a time only when their pointers and leading
// dimensions keep every row 16-byte aligned. A is always copied 4 bytes at a time.
bool vectorizable(const GemmArgs& g) { return aligned16(g.b) && aligned16(g.c) && g.ldb % 4 == 0 && g.ldc % 4 == 0; }

// A can be copied 16 bytes at a time into the K-major layout (kAKMajor) when every
// row of A is 16-byte aligned.
bool a_rows_aligned(const GemmArgs& g) { return aligned16(g.a) && g.lda % 4 == 0; }

// How A is laid out in shared memory: always transposed (4-byte copies), or K-major
// (16-byte copies) when A's rows allow it.
enum class ALayout { kTransposed, kKMajorWhenAligned };

template <class Cfg, ALayout kLayout>
Status launch_by_alignment(const GemmArgs& g, Workspace ws, cudaStream_t stream, int splits, SplitReduce reduce) {
  const bool vec = vectorizable(g);
  if constexpr (kLayout == ALayout::kKMajorWhenAligned) {
    if (a_rows_aligned(g))
      return vec ? launch<Cfg, true, true>(g, ws, stream, splits, reduce)
                 : launch<Cfg, false, true>(g, ws, stream, splits, reduce);
  }
  return vec ? launch<Cfg, true>(g, ws, stream, splits, reduce) : launch<Cfg, false>(g, ws, stream, splits, reduce);
}

#ifdef SGEMM_KERNEL_TUNING
template <class Cfg>
Status run_config(const GemmArgs& g, Workspace ws, cudaStream_t stream) {
  return vectorizable(g) ? launch<Cfg, true>(g, ws, stream, 1) : launch<Cfg, false>(g, ws, stream, 1);
}
#endif

// One tile, stage count by alignment: the 4-byte-copy (unaligned) instantiation
// of the 4-stage ring measured 7% slower than the 3-stage one (v5, docs/kernels.md).
template <class CfgAligned, class CfgUnaligned, ALayout kLayout = ALayout::kTransposed>
Status run_config_by_alignment(const GemmArgs& g, Workspace ws, cudaStream_t stream) {
  return vectorizable(g) ? launch_by_alignment<CfgAligned, kLayout>(g, ws, stream, 1, SplitReduce::kWorkspace)
                         : launch_by_alignment<CfgUnaligned, kLayout>(g, ws, stream, 1, SplitReduce::kWorkspace);
}

int sm_count_of_current_device();

// Split-K count for a shape (common/kernel_registry.h, simt_split_k_count: the row
// choice reads the same count).
int pick_splits(const GemmShape& s, int64_t bm, int64_t bn, int sm_count, int per_sm, int64_t min_k = 1024) {
  return simt_split_k_count(s, bm, bn, sm_count, per_sm, min_k);
}

// Thin tiles split K down to 512 per split: with m or n <= 128 there are few tiles
// even for K = 1024 to 2048, and their slices are small to reduce.
constexpr int64_t kThinMinK = 512;

template <class Cfg, SplitReduce kReduce = SplitReduce::kWorkspace, int64_t kMinK = 1024,
          ALayout kLayout = ALayout::kTransposed>
Status run_config_split_k(const GemmArgs& g, Workspace ws, cudaStream_t stream) {
  const int splits = pick_splits(g.shape, Cfg::BM, Cfg::BN, sm_count_of_current_device(), Cfg::MIN_BLOCKS, kMinK);
  return launch_by_alignment<Cfg, kLayout>(g, ws, stream, splits, kReduce);
}

template <class Cfg, int64_t kMinK = 1024>
std::size_t split_k_workspace(const GemmShape& s) {
  const int splits = pick_splits(s, Cfg::BM, Cfg::BN, sm_count_of_current_device(), Cfg::MIN_BLOCKS, kMinK);
  return splitk_workspace_bytes(s, effective_splits(s, Cfg::BK, splits));
}
std::size_t no_workspace(const GemmShape&) { return 0; }

// A single row or column of C: the memory-bound GEMV kernels (gemv_sgemm.h).
template <GemvRowBlock kBlock>
Status run_gemv(const GemmArgs& g, Workspace ws, cudaStream_t stream) {
  SGEMM_RETURN_IF_ERROR(gemv_can_implement(g));
  return gemv_sgemm(g, sm_count_of_current_device(), ws.data, ws.bytes, stream, kBlock);
}
template <GemvRowBlock kBlock>
std::size_t gemv_workspace(const GemmShape& s) {
  return gemv_workspace_bytes(s, sm_count_of_current_device(), kBlock);
}

bool any_shape(const GemmShape&) { return true; }
constexpr ALayout kAKM = ALayout::kKMajorWhenAligned;

// Thin C with a long K (n <= 32, n <= 64): the K-major BK-32 tile when A's rows are
// 16-byte aligned (its 16-byte copies of A are what wins there: 107-110% of cuBLAS at
// n = 32 against 82-89% for the transposed tile), else the transposed tile measured
// best before it. The workspace covers either.
template <class CfgKMajor, class CfgTransposed>
Status run_split_k_by_a_layout(const GemmArgs& g, Workspace ws, cudaStream_t stream) {
  if (a_rows_aligned(g)) return run_config_split_k<CfgKMajor, SplitReduce::kWorkspace, kThinMinK, kAKM>(g, ws, stream);
  return run_config_split_k<CfgTransposed, SplitReduce::kWorkspace, kThinMinK>(g, ws, stream);
}
template <class CfgKMajor, class CfgTransposed>
std::size_t split_k_workspace_either(const GemmShape& s) {
  return std::max(split_k_workspace<CfgKMajor, kThinMinK>(s), split_k_workspace<CfgTransposed, kThinMinK>(s));
}
bool gemv_shape(const GemmShape& s) { return one_row_or_column(s); }

// The TMA-fed warp-specialized SIMT kernel (tma_simt_sgemm.h) where TMA can read A and B
// on this device, else the 64x128 tiles above (the same results: every unsplit kernel
// here sums K in order with FMA).
template <TmaSimtTile kTile>
Status run_tma_simt(const GemmArgs& g, Workspace ws, cudaStream_t stream) {
  if (tma_simt_can_run(g)) return tma_simt_sgemm(g, kTile, 1, nullptr, stream);
  return run_config_by_alignment<SmallWide4, SmallWide>(g, ws, stream);
}

// ... with split-K for few tiles and a long K: one CTA per SM, so splits fill #SMs units,
// each keeping at least 1024 of K; the slices are reduced as for the ping-pong tiles.
template <TmaSimtTile kTile>
int tma_simt_splits(const GemmShape& s) {
  const TmaSimtTileShape t = tma_simt_tile_shape(kTile);
  return effective_splits(s, 32, pick_splits(s, t.bm, t.bn, sm_count_of_current_device(), 1));
}
template <TmaSimtTile kTile>
Status run_tma_simt_split_k(const GemmArgs& g, Workspace ws, cudaStream_t stream) {
  if (!tma_simt_can_run(g)) return run_config_split_k<SmallWide4>(g, ws, stream);
  const int splits = tma_simt_splits<kTile>(g.shape);
  if (splits <= 1) return tma_simt_sgemm(g, kTile, 1, nullptr, stream);
  SGEMM_RETURN_IF_ERROR(check_splitk_workspace(g.shape, splits, ws));
  float* w = static_cast<float*>(ws.data);
  SGEMM_RETURN_IF_ERROR(tma_simt_sgemm(g, kTile, splits, w, stream));
  return launch_splitk_reduce(g, splits, w, (g.shape.n + 3) / 4 * 4, stream);
}
template <TmaSimtTile kTile>
std::size_t tma_simt_split_k_workspace(const GemmShape& s) {
  return std::max(splitk_workspace_bytes(s, tma_simt_splits<kTile>(s)), split_k_workspace<SmallWide4>(s));
}

// ... with stream-K for the last partial wave (tma_simt_sgemm.h): a fixed schedule per shape
// and device, partials added in a fixed order.
template <TmaSimtTile kTile>
std::size_t tma_simt_stream_k_workspace(const GemmShape& s) {
  return tma_simt_stream_k_workspace_bytes(s, kTile, sm_count_of_current_device());
}
template <TmaSimtTile kTile>
Status run_tma_simt_stream_k(const GemmArgs& g, Workspace ws, cudaStream_t stream) {
  if (tma_simt_can_run(g)) return tma_simt_sgemm_stream_k(g, kTile, ws.data, ws.bytes, stream);
  return run_config_by_alignment<SmallWide4, SmallWide>(g, ws, stream);
}

// ... with its stages filled by cp.async instead of TMA: any alignment
// and leading dimension of A and B (the shapes TMA cannot read); the 64x128 tiles where the
// GPU is not an sm_90 one.
template <TmaSimtTile kTile, CpAsyncFeed kFeed = CpAsyncFeed::k4Byte>
Status run_cp_async_simt(const GemmArgs& g, Workspace ws, cudaStream_t stream) {
  Status st = tma_simt_sgemm_cp_async(g, kTile, kFeed, stream);
  // The 16-byte and TMA-A forms where A and B allow them, else the 4-byte one.
  if (kFeed != CpAsyncFeed::k4Byte && st.code() == StatusCode::kFailedPrecondition)
    (void)(st = tma_simt_sgemm_cp_async(g, kTile, CpAsyncFeed::k4Byte, stream));
  if (st.code() != StatusCode::kFailedPrecondition) return st;
  return run_config_by_alignment<SmallWide4, SmallWide>(g, ws, stream);
}

struct Variant {
  const char* name;
  Status (*run)(const GemmArgs&, Workspace, cudaStream_t);
  std::size_t (*workspace_bytes)(const GemmShape&);
  bool (*accepts)(const GemmShape&);  // shapes it runs; run() refuses the others
};

// Production builds carry the variants the registry has rows for (common/kernel_registry.cc);
// the tile configurations measured against them (docs/kernels.md) and the
// atomic split-K compile only with -DSGEMM_KERNEL_TUNING=ON.
constexpr Variant kVariants[] = {
    {"64x128x16_w32x64_t8x8_s4-aligned_s3-unaligned", run_config_by_alignment<SmallWide4, SmallWide>, no_workspace,
     any_shape},
    {"64x128x16_w32x64_t8x8_s4_splitk", run_config_split_k<SmallWide4>, split_k_workspace<SmallWide4>, any_shape},
    {"gemv", run_gemv<GemvRowBlock::k8Warps>, gemv_workspace<GemvRowBlock::k8Warps>, gemv_shape},
    {"128x32x32_w32x32_t4x8_s3_akm_splitk512_or_256x32x16", run_split_k_by_a_layout<TallK32, Tall>,
     split_k_workspace_either<TallK32, Tall>, any_shape},
    {"64x64x32_w32x32_t4x8_s3_akm_splitk512_or_128x64x16", run_split_k_by_a_layout<Small32, Medium>,
     split_k_workspace_either<Small32, Medium>, any_shape},
    {"128x64x16_w64x32_t8x8_s3_splitk512_cluster", run_config_split_k<Medium, SplitReduce::kCluster, kThinMinK>,
     no_workspace, any_shape},
    {"32x128x16_w16x64_t4x8_s4_splitk512", run_config_split_k<Flat, SplitReduce::kWorkspace, kThinMinK>,
     split_k_workspace<Flat, kThinMinK>, any_shape},
    // The TMA producer / LDS+FFMA consumer kernel (tma_simt_sgemm.cuh),
    // falling back to the two variants above where TMA cannot read A and B.
    {"tma_128x256x32_w64x64_t8x16_s4", run_tma_simt<TmaSimtTile::k128x256T8x16>, no_workspace, any_shape},
    {"tma_192x128x32_w64x32_t8x8_s5", run_tma_simt<TmaSimtTile::k192x128T8x8>, no_workspace, any_shape},
    {"tma_128x256x32_w64x64_t8x16_s4_splitk", run_tma_simt_split_k<TmaSimtTile::k128x256T8x16>,
     tma_simt_split_k_workspace<TmaSimtTile::k128x256T8x16>, any_shape},
    // Stream-K for the last partial wave (the 128x256 one picked where every whole-tile
    // schedule fills the last wave poorly), and two consumer warp groups each on its own
    // tile and ring.
    {"tma_128x256x32_w64x64_t8x16_s4_streamk", run_tma_simt_stream_k<TmaSimtTile::k128x256T8x16>,
     tma_simt_stream_k_workspace<TmaSimtTile::k128x256T8x16>, any_shape},
    {"tma_192x128x32_w64x32_t8x8_s5_streamk", run_tma_simt_stream_k<TmaSimtTile::k192x128T8x8>,
     tma_simt_stream_k_workspace<TmaSimtTile::k192x128T8x8>, any_shape},
    {"tma_2x128x128x32_w64x64_t8x16_s3_rings", run_tma_simt<TmaSimtTile::kRings2x128x128T8x16>, no_workspace,
     any_shape},
    {"tma_2x128x128x32_w64x64_t8x16_s3_rings_streamk", run_tma_simt_stream_k<TmaSimtTile::kRings2x128x128T8x16>,
     tma_simt_stream_k_workspace<TmaSimtTile::kRings2x128x128T8x16>, any_shape},
#ifdef SGEMM_KERNEL_TUNING
    // The ring and 192x128 tiles fed by cp.async (any A, B layout):
    // correct, 60-70% of cuBLAS where the 64x128 tile runs 81-95%
    // (bench/results/2026-11-23_h100_cpasync-warp-specialized/).
    {"cpasync_2x128x128x32_w64x64_t8x16_s3_rings", run_cp_async_simt<TmaSimtTile::kRings2x128x128T8x16>, no_workspace,
     any_shape},
    {"cpasync_192x128x32_w64x32_t8x8_s5", run_cp_async_simt<TmaSimtTile::k192x128T8x8>, no_workspace, any_shape},
    // ... the ring tile with 16-byte copies where A and B are 16-byte aligned (else 4-byte).
    {"cpasync16_2x128x128x32_w64x64_t8x16_s3_rings",
     run_cp_async_simt<TmaSimtTile::kRings2x128x128T8x16, CpAsyncFeed::k16Byte>, no_workspace, any_shape},
    {"cpasync1w_2x128x128x32_w64x64_t8x16_s3_rings",
     run_cp_async_simt<TmaSimtTile::kRings2x128x128T8x16, CpAsyncFeed::k4ByteOneWarpPerRing>, no_workspace, any_shape},
    // ... A by TMA where it can read A, B by 4-byte copies (else both by copies).
    {"cpasyncb_2x128x128x32_w64x64_t8x16_s3_rings",
     run_cp_async_simt<TmaSimtTile::kRings2x128x128T8x16, CpAsyncFeed::kTmaA4ByteB>, no_workspace, any_shape},
    // The TMA tiles' measured alternatives (bench/results/2026-11-22_h100_tma-warp-specialized/).
    {"tma_192x128x32_w64x32_t8x8_s5_splitk", run_tma_simt_split_k<TmaSimtTile::k192x128T8x8>,
     tma_simt_split_k_workspace<TmaSimtTile::k192x128T8x8>, any_shape},
    {"tma_128x192x32_w64x32_t8x8_s5_splitk", run_tma_simt_split_k<TmaSimtTile::k128x192T8x8>,
     tma_simt_split_k_workspace<TmaSimtTile::k128x192T8x8>, any_shape},
    {"tma_256x128x32_w64x64_t8x16_s4", run_tma_simt<TmaSimtTile::k256x128T8x16>, no_workspace, any_shape},
    {"tma_128x256x32_w32x128_t8x16_s4", run_tma_simt<TmaSimtTile::k128x256T8x16W32x128>, no_workspace, any_shape},
    {"tma_192x128x32_w32x64_t8x8_s5", run_tma_simt<TmaSimtTile::k192x128T8x8W32x64>, no_workspace, any_shape},
    {"tma_128x256x32_w64x64_t8x16_s4_u2", run_tma_simt<TmaSimtTile::k128x256T8x16U2>, no_workspace, any_shape},
    {"tma_192x128x32_w64x32_t8x8_s5_u2", run_tma_simt<TmaSimtTile::k192x128T8x8U2>, no_workspace, any_shape},
    {"tma_256x128x32_w64x32_t8x8_s4_16warps", run_tma_simt<TmaSimtTile::k256x128T8x8W16>, no_workspace, any_shape},
    {"tma_256x128x32_w32x64_t8x8_s4_16warps", run_tma_simt<TmaSimtTile::k256x128T8x8W16W32x64>, no_workspace,
     any_shape},
    {"tma_256x128x32_w64x64_t8x16_s4_splitk", run_tma_simt_split_k<TmaSimtTile::k256x128T8x16>,
     tma_simt_split_k_workspace<TmaSimtTile::k256x128T8x16>, any_shape},
    // K-major A (16-byte copies of A) candidates (bench/results/2026-11-22_h100_thin-kmajor-a/) and the
    // transposed thin tiles the picker used before them.
    {"64x128x16_w32x64_t8x8_s4_b3_akm-aligned_s3-unaligned", run_config_by_alignment<SmallWide4B3, SmallWide, kAKM>,
     no_workspace, any_shape},
    {"64x128x16_w32x64_t8x8_s4_b3_akm_splitk", run_config_split_k<SmallWide4B3, SplitReduce::kWorkspace, 1024, kAKM>,
     split_k_workspace<SmallWide4B3>, any_shape},
    {"64x128x16_w32x64_t8x8_s4_akm-aligned_s3-unaligned", run_config_by_alignment<SmallWide4, SmallWide, kAKM>,
     no_workspace, any_shape},
    {"64x128x16_w32x64_t8x8_s4_akm_splitk", run_config_split_k<SmallWide4, SplitReduce::kWorkspace, 1024, kAKM>,
     split_k_workspace<SmallWide4>, any_shape},
    {"256x32x16_w64x32_t8x8_s3_akm_splitk512", run_config_split_k<Tall, SplitReduce::kWorkspace, kThinMinK, kAKM>,
     split_k_workspace<Tall, kThinMinK>, any_shape},
    {"128x32x32_w32x32_t4x8_s3_akm_splitk512", run_config_split_k<TallK32, SplitReduce::kWorkspace, kThinMinK, kAKM>,
     split_k_workspace<TallK32, kThinMinK>, any_shape},
    {"128x64x16_w64x32_t8x8_s3_akm_splitk512", run_config_split_k<Medium, SplitReduce::kWorkspace, kThinMinK, kAKM>,
     split_k_workspace<Medium, kThinMinK>, any_shape},
    {"128x64x16_w64x32_t8x8_s3_akm_splitk512_cluster",
     run_config_split_k<Medium, SplitReduce::kCluster, kThinMinK, kAKM>, no_workspace, any_shape},
    {"32x128x16_w16x64_t4x8_s4_akm_splitk512", run_config_split_k<Flat, SplitReduce::kWorkspace, kThinMinK, kAKM>,
     split_k_workspace<Flat, kThinMinK>, any_shape},
    {"64x128x16_w32x64_t8x8_s4_akm_splitk512", run_config_split_k<SmallWide4, SplitReduce::kWorkspace, kThinMinK, kAKM>,
     split_k_workspace<SmallWide4, kThinMinK>, any_shape},
    {"64x64x32_w32x32_t4x8_s3_akm_splitk512", run_config_split_k<Small32, SplitReduce::kWorkspace, kThinMinK, kAKM>,
     split_k_workspace<Small32, kThinMinK>, any_shape},
    {"128x64x32_w32x32_t4x8_s3_akm_splitk512", run_config_split_k<Medium32, SplitReduce::kWorkspace, kThinMinK, kAKM>,
     split_k_workspace<Medium32, kThinMinK>, any_shape},
    {"64x128x32_w32x32_t4x8_s3_akm", run_config_by_alignment<Wide32, Wide32, kAKM>, no_workspace, any_shape},
    {"64x128x32_w32x32_t4x8_s3_akm_splitk", run_config_split_k<Wide32, SplitReduce::kWorkspace, 1024, kAKM>,
     split_k_workspace<Wide32>, any_shape},
    {"64x128x32_w32x32_t4x8_s3_akm_splitk512", run_config_split_k<Wide32, SplitReduce::kWorkspace, kThinMinK, kAKM>,
     split_k_workspace<Wide32, kThinMinK>, any_shape},
    {"32x128x32_w16x64_t4x8_s3_akm_splitk512", run_config_split_k<Flat32, SplitReduce::kWorkspace, kThinMinK, kAKM>,
     split_k_workspace<Flat32, kThinMinK>, any_shape},
    {"256x32x16_w64x32_t8x8_s3_splitk512", run_config_split_k<Tall, SplitReduce::kWorkspace, kThinMinK>,
     split_k_workspace<Tall, kThinMinK>, any_shape},
    {"128x64x16_w64x32_t8x8_s3_splitk512", run_config_split_k<Medium, SplitReduce::kWorkspace, kThinMinK>,
     split_k_workspace<Medium, kThinMinK>, any_shape},
    {"128x128x16_w32x64_t8x8_s3", run_config<Large>, no_workspace, any_shape},
    {"128x128x8_w64x64_t8x16_s4", run_config<Wide>, no_workspace, any_shape},
    {"128x256x8_w64x64_t8x16_s4", run_config<Huge>, no_workspace, any_shape},
    {"128x64x16_w64x32_t8x8_s3", run_config<Medium>, no_workspace, any_shape},
    {"64x64x16_w32x32_t8x4_s4", run_config<Small>, no_workspace, any_shape},
    {"64x128x16_w32x64_t8x8_s3", run_config<SmallWide>, no_workspace, any_shape},
    {"64x128x16_w32x64_t8x8_s4", run_config<SmallWide4>, no_workspace, any_shape},
    {"64x128x8_w32x64_t8x8_s4", run_config<SmallWideK8>, no_workspace, any_shape},
    {"64x64x16_w32x64_t8x8_s4_64thr", run_config<Mini>, no_workspace, any_shape},
    {"64x128x16_w32x64_t8x8_s4_splitk_atomic", run_config_split_k<SmallWide4, SplitReduce::kAtomic>, no_workspace,
     any_shape},
    // Measured alternatives (bench/results/2026-11-22_h100_thin-gemv-tiles/, calls 2-4).
    {"gemv_row32warps", run_gemv<GemvRowBlock::k32Warps>, gemv_workspace<GemvRowBlock::k32Warps>, gemv_shape},
    {"64x64x16_w32x32_t8x4_s4_splitk512", run_config_split_k<Small, SplitReduce::kWorkspace, kThinMinK>,
     split_k_workspace<Small, kThinMinK>, any_shape},
    {"64x128x16_w32x64_t8x8_s4_splitk512", run_config_split_k<SmallWide4, SplitReduce::kWorkspace, kThinMinK>,
     split_k_workspace<SmallWide4, kThinMinK>, any_shape},
    {"128x32x32_w32x32_t4x8_s3_splitk512", run_config_split_k<TallK32, SplitReduce::kWorkspace, kThinMinK>,
     split_k_workspace<TallK32, kThinMinK>, any_shape},
    {"128x64x32_w64x32_t8x8_s3_splitk512", run_config_split_k<MediumK32, SplitReduce::kWorkspace, kThinMinK>,
     split_k_workspace<MediumK32, kThinMinK>, any_shape},
    {"64x128x16_w32x64_t8x8_s4_splitk_cluster", run_config_split_k<SmallWide4, SplitReduce::kCluster>, no_workspace,
     any_shape},
    {"256x32x16_w64x32_t8x8_s3_splitk512_cluster", run_config_split_k<Tall, SplitReduce::kCluster, kThinMinK>,
     no_workspace, any_shape},
    {"32x128x16_w16x64_t4x8_s4_splitk512_cluster", run_config_split_k<Flat, SplitReduce::kCluster, kThinMinK>,
     no_workspace, any_shape},
    {"128x128x16_w32x64_t8x8_s3_splitk512", run_config_split_k<Large, SplitReduce::kWorkspace, kThinMinK>,
     split_k_workspace<Large, kThinMinK>, any_shape},
#endif
};
constexpr int kNumVariants = int(sizeof(kVariants) / sizeof(kVariants[0]));

// The registry's rows (common/kernel_registry.cc) describe these tiles.
static_assert(SmallWide4::BM == 64 && SmallWide4::BN == 128 && SmallWide4::BK == 16 && SmallWide4::MIN_BLOCKS == 4,
              "the registry's SIMT 64x128 tile (kernel_registry.cc, kSmallWide4) must match SmallWide4");
static_assert(Small32::BM == 64 && Small32::BN == 64 && Small32::BK == 32 && Small32::MIN_BLOCKS == 4,
              "the registry's K-major 64x64 tile (kernel_registry.cc, kSmall32) must match Small32");
static_assert(TallK32::BM == 128 && TallK32::BN == 32 && TallK32::BK == 32 && TallK32::MIN_BLOCKS == 3,
              "the registry's K-major 128x32 tile (kernel_registry.cc, kTallK32) must match TallK32");
static_assert(Medium::BM == 128 && Medium::BN == 64 && Medium::BK == 16 && Medium::MIN_BLOCKS == 4,
              "the registry's 128x64 tile (kernel_registry.cc, kMedium) must match Medium");
static_assert(Flat::BM == 32 && Flat::BN == 128 && Flat::BK == 16 && Flat::MIN_BLOCKS == 4,
              "the registry's 32x128 tile (kernel_registry.cc, kFlat) must match Flat");

// The row the registry chooses for `args` in the SIMT family (its variant indexes kVariants).
int chosen_variant(const GemmArgs& args, int sm_count) {
  return select_kernel_row_of(KernelKind::kPingpong, args.shape, kernel_layout(args), sm_count).row->variant;
}

int sm_count_of_current_device() {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return 132;  // an H100 SXM; only the choice of tile shape depends on it
  }
  return sms;
}

}  // namespace

Status pingpong_can_implement(const GemmArgs& g) {
  const GemmShape& s = g.shape;
  SGEMM_RETURN_IF_ERROR(check_gemm_args(g));
  // The smallest tile is 64 x 64: the 1-D grid of tiles must fit a launch.
  const int64_t tiles = ((s.m + 63) / 64) * ((s.n + 63) / 64);
  if (tiles > INT_MAX) return InvalidArgument("shape: m x n needs more than 2^31-1 thread blocks");
  return Status::Ok();
}

int pingpong_variant_count() { return kNumVariants; }

std::string_view pingpong_variant_name(int variant) {
  if (variant < 0 || variant >= kNumVariants) return "unknown";
  return kVariants[variant].name;
}

int pingpong_pick_variant(const GemmShape& shape, int sm_count) {
  return select_kernel_row_of(KernelKind::kPingpong, shape, KernelLayout{}, sm_count).row->variant;
}

bool pingpong_variant_accepts(const GemmShape& shape, int variant) {
  return variant >= 0 && variant < kNumVariants && kVariants[variant].accepts(shape);
}

std::size_t pingpong_variant_workspace_bytes(const GemmShape& shape, int variant) {
  if (variant < 0 || variant >= kNumVariants) return 0;
  return kVariants[variant].workspace_bytes(shape);
}

std::size_t pingpong_workspace_bytes(const GemmArgs& args) {
  return pingpong_variant_workspace_bytes(args.shape, chosen_variant(args, sm_count_of_current_device()));
}

Status pingpong_sgemm_variant(const GemmArgs& args, int variant, void* workspace, std::size_t workspace_bytes,
                              cudaStream_t stream) {
  SGEMM_RETURN_IF_ERROR(pingpong_can_implement(args));
  if (variant < 0 || variant >= kNumVariants)
    return InvalidArgument("variant: must be in [0, " + std::to_string(kNumVariants) + "), got " +
                           std::to_string(variant));
  if (!kVariants[variant].accepts(args.shape))
    return InvalidArgument("variant: " + std::string(kVariants[variant].name) + " does not run this shape");
  return kVariants[variant].run(args, Workspace{workspace, workspace_bytes}, stream);
}

Status pingpong_sgemm(const GemmArgs& args, void* workspace, std::size_t workspace_bytes, cudaStream_t stream) {
  SGEMM_RETURN_IF_ERROR(pingpong_can_implement(args));
  return kVariants[chosen_variant(args, sm_count_of_current_device())].run(args, Workspace{workspace, workspace_bytes},
                                                                           stream);
}

}  // namespace sgemm
