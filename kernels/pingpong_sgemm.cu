// Launchers of the ping-pong SGEMM (kernels/pingpong_sgemm.cuh). The only place
// its kernels are launched; each launcher returns the launch's cudaGetLastError()
// as a Status.
#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <string>

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

// The split count launch() really uses: clamped to [1, min(k tiles, 64)], no empty split.
int effective_splits(const GemmShape& s, int bk, int splits) {
  const int k_tiles = int((s.k + bk - 1) / bk);
  splits = std::clamp(splits, 1, std::max(1, std::min(k_tiles, 64)));
  const int per_split = (k_tiles + splits - 1) / splits;
  return (k_tiles + per_split - 1) / per_split;
}

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

// Split-K count for a shape: enough (tile, split) blocks for one full wave of
// `per_sm` resident blocks, each split keeping at least `min_k` of K.
int pick_splits(const GemmShape& s, int64_t bm, int64_t bn, int sm_count, int per_sm, int64_t min_k = 1024) {
  const int64_t tiles = ((s.m + bm - 1) / bm) * ((s.n + bn - 1) / bn);
  const int64_t slots = int64_t(sm_count) * per_sm;
  if (tiles >= slots || s.k < 2 * min_k) return 1;
  const int64_t by_slots = slots / tiles;
  const int64_t by_k = s.k / min_k;
  return int(std::max<int64_t>(1, std::min(by_slots, by_k)));
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
bool gemv_shape(const GemmShape& s) { return s.m == 1 || s.n == 1; }

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

// Production builds carry the variants pingpong_pick_variant() chooses from;
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
// The production variants, in kVariants order (PingpongVariants.PicksNameTheMeasuredTiles checks the names).
enum VariantId {
  kSmallWideByAlignment = 0,
  kSmallWide4SplitK = 1,
  kGemv = 2,
  kThinN32SplitK = 3,
  kThinN64SplitK = 4,
  kMediumSplitKCluster = 5,
  kFlatSplitK = 6,
  kTma128x256 = 7,
  kTma192x128 = 8,
  kTma128x256SplitK = 9,
  kTma128x256StreamK = 10,
  kTmaRings2x128x128 = 12,
};

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

int pingpong_pick_variant(const GemmShape& s, int sm_count) {
  // Measured on H100 (docs/kernels.md, bench/results/): the 64x128x16 tile with 4
  // resident blocks per SM was the best or within 2% of the best on every shape from
  // 1024 to 8192 (before the TMA-fed kernel), with 4 stages when B and C allow 16-byte
  // copies and 3 otherwise; shapes with too few tiles for a wave split K (deterministically)
  // or take smaller tiles (the rules below).
  // Thin C (bench/results/2026-11-22_h100_thin-gemv-tiles/): a single row or
  // column is a memory-bound GEMV; C at most 32 rows high takes the 32x128 tile,
  // splitting K down to 512 per split. C at most 32 or 64 columns wide
  // (bench/results/2026-11-22_h100_thin-kmajor-a/): the 128x32x32 or 64x64x32 tile with A
  // K-major in shared memory (16-byte copies of A, the heavy operand there) when A's
  // rows are 16-byte aligned, else the transposed 256x32x16 or 128x64x16 tile.
  if (gemv_shape(s)) return kGemv;
  const auto tiles_of = [&](int64_t bm, int64_t bn) { return ((s.m + bm - 1) / bm) * ((s.n + bn - 1) / bn); };
  // The K-major thin tiles also from 256 rows when K >= 2048 (the engine's 512-row
  // blocks of thin products; bench/results/2026-11-23_h100_thin-kmajor-256-rows/):
  // 512x32x8192 135% of cuBLAS, 512x64x8192 138%, 512x32x2048 71%,
  // where the 64x128 split-K tile ran 29-58% (few tiles, K split no finer than 1024).
  const bool thin_from_256 = s.m >= 256 && s.k >= 2048;
  if (s.n <= 32 && (s.m >= 1024 || thin_from_256)) return kThinN32SplitK;
  // With K < 2048 the 128x64 tile splits K at most 3 ways: its splits meet in a
  // cluster (no workspace pass): 8192x64x1024 114.5% of cuBLAS against 99.6% with
  // the workspace; with more splits the cluster reduction lost (73.6% at 8192x64x8192).
  if (s.n <= 64 && s.m >= 1024) return s.k < 2048 ? kMediumSplitKCluster : kThinN64SplitK;
  if (s.n <= 64 && thin_from_256) return kThinN64SplitK;
  if (s.m <= 32 && s.n >= 1024) return kFlatSplitK;
  // C 65 to 96 columns wide: the 128x32 K-major tile (three column tiles) split down to 512 of
  // K; 104.5% of cuBLAS at 4096x96x4096 and 99.6% at 8192x96x8192, where the 64x128 split-K
  // tile ran 94.0% and 88.0% (bench/results/2026-11-23_h100_picker-splitk/).
  if (s.n <= 96 && s.m >= 1024 && s.k >= 2048) return kThinN32SplitK;
  // Where the 64x128 tile splits K (few tiles, long K), three tiles, each taken only where it
  // fills its wave (90% of a wave of its (tile, split) units) and pads C no more than the
  // smaller tiles (its share of C's padded area within 0.05 of theirs):
  //   - the TMA-fed kernel's 128x256 tile with split-K, with C more than 64 rows and 128
  //     columns (92.9% vs 90.2% at 1024x1024x16384, 91.7% vs 89.2% at
  //     128x8192x8192);
  //   - the 64x128 tile with split-K (always for C at most 64 columns);
  //   - else the 64x64 K-major tile, whose K splits down to 512.
  // Measured (bench/results/2026-11-23_h100_picker-splitk/): with fewer units
  // the 128x256 tile had run 34-56% (64x4096x4096, 128x4096x4096, 512x512x8192, 256x256x16384),
  // the 64x64 K-major tile 86-116%; half-padded, 64x8192x8192 51.8% against 98.5% (64x128);
  // padded to 256 columns or rows, 8192x192x4096 90.7% against 105.9% (64x64) and 192x4096x8192
  // 79.2% against 95.3% (64x128).
  if (pick_splits(s, SmallWide4::BM, SmallWide4::BN, sm_count, SmallWide4::MIN_BLOCKS) > 1) {
    const auto units = [&](int64_t bm, int64_t bn, int bk, int per_sm) {  // as the launchers split
      return tiles_of(bm, bn) * effective_splits(s, bk, pick_splits(s, bm, bn, sm_count, per_sm));
    };
    const auto used = [&](int64_t bm, int64_t bn) {  // C's share of the tiles' area
      return double(s.m) / double((s.m + bm - 1) / bm * bm) * double(s.n) / double((s.n + bn - 1) / bn * bn);
    };
    const double used_k = used(64, 64), used_w = used(SmallWide4::BM, SmallWide4::BN);
    if (s.n > 128 && s.m > 64 && units(128, 256, 32, 1) * 10 >= int64_t(sm_count) * 9 &&
        used(128, 256) + 0.05 >= std::max(used_w, used_k))
      return kTma128x256SplitK;
    const int64_t slots = int64_t(sm_count) * SmallWide4::MIN_BLOCKS;
    if (s.n <= 64 || (units(SmallWide4::BM, SmallWide4::BN, SmallWide4::BK, SmallWide4::MIN_BLOCKS) * 10 >= slots * 9 &&
                      used_w + 0.05 >= used_k))
      return kSmallWide4SplitK;
    return kThinN64SplitK;
  }
  // Few tiles and a short K (K < 2048: the 64x128 tile does not split it), C more than 64
  // columns wide and A's rows 16-byte multiples: where the 64x128 tiles fill less than 60% of
  // a wave of 4 per SM, the 64x64 K-major tile (twice the tiles; K split down to 512 from
  // K = 1024). Measured in the same directory, two rounds against the previous pick: 256^3
  // 120-146% of cuBLAS against 90-91%, 512^3 113-114% against 69-74%, 1024x512x1024 101-102%
  // against 64%, 768x1536x1024 92-95% against 70-71%, 1536^3 95-104% against 88-90%; it lost
  // at 768^3 (83-90% against 91-92%) and 896^3 (85-90% against 90-95%), and at 777x555x333
  // (77% against 92-93%: A's rows not 16-byte multiples, the tile's transposed fallback).
  if (s.n > 64 && s.k % 4 == 0 &&
      tiles_of(SmallWide4::BM, SmallWide4::BN) * 10 < int64_t(sm_count) * SmallWide4::MIN_BLOCKS * 6)
    return kThinN64SplitK;
  // Otherwise, with K >= 2048 (at K = 1024 the 64x128 tile measured 2-3 points better), the
  // TMA-fed kernel's per-SM rate was 1-3% above the 64x128 tile's; it runs one CTA per SM,
  // so the last wave decides: take its 128x256 tile, its 128x128-per-ring tile (two consumer
  // warp groups, each its own tile and ring: 2 x #SMs tiles at once) or its 192x128 tile,
  // whichever fills the last wave best (128x256 where it fills it as well as the rings: for
  // n % 256 == 0 they fill it alike), when that fill is at least the 64x128 tile's (4 blocks
  // per SM). With the whole-tile kernel compiled from its own source, 128x256 ran above the
  // rings (2.914 vs
  // 2.945-2.960 ms at 4096, 0.375 vs 0.379-0.382 ms at 2048, 3.141-3.154 vs 3.143-3.146 ms at
  // 4095; bench/results/2026-11-23_h100_whole-tile-regression/).
  if (s.k >= 2048) {
    const auto fill = [&](int64_t bm, int64_t bn, int64_t slots) {
      const int64_t tiles = tiles_of(bm, bn);
      return double(tiles) / double((tiles + slots - 1) / slots * slots);
    };
    const double f256 = fill(128, 256, sm_count), f_rings = fill(128, 128, 2 * int64_t(sm_count));
    const double f192 = fill(192, 128, sm_count);
    const double f64 = fill(SmallWide4::BM, SmallWide4::BN, int64_t(sm_count) * SmallWide4::MIN_BLOCKS);
    // Where every whole-tile schedule leaves the last wave poorly filled (best fill below
    // 0.92) and the 128x256 tile's stream-K schedule runs (its last wave at most 60% full;
    // a workspace is then needed), that tile with stream-K (measured in the same run:
    // 98.5% vs 79.3% for the rings at 2560, 100.9% vs 94.4% for 192x128 at 5120).
    if (std::max({f_rings, f192, f64}) < 0.92 &&
        tma_simt_stream_k_workspace_bytes(s, TmaSimtTile::k128x256T8x16, sm_count) > 0)
      return kTma128x256StreamK;
    if (std::max({f256, f_rings, f192}) >= f64) {
      if (f192 > std::max(f256, f_rings)) return kTma192x128;
      return f_rings > f256 ? kTmaRings2x128x128 : kTma128x256;
    }
  }
  return kSmallWideByAlignment;
}

bool pingpong_variant_accepts(const GemmShape& shape, int variant) {
  return variant >= 0 && variant < kNumVariants && kVariants[variant].accepts(shape);
}

std::size_t pingpong_variant_workspace_bytes(const GemmShape& shape, int variant) {
  if (variant < 0 || variant >= kNumVariants) return 0;
  return kVariants[variant].workspace_bytes(shape);
}

std::size_t pingpong_workspace_bytes(const GemmArgs& args) {
  return pingpong_variant_workspace_bytes(args.shape, pingpong_pick_variant(args.shape, sm_count_of_current_device()));
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
  return kVariants[pingpong_pick_variant(args.shape, sm_count_of_current_device())].run(
      args, Workspace{workspace, workspace_bytes}, stream);
}

}  // namespace sgemm
