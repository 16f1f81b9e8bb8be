// Launchers of the TMA-fed SIMT SGEMM (kernels/tma_simt_sgemm.cuh): the only place its
// kernel is launched. Built for sm_90a alone (kernels/CMakeLists.txt).
#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <string>

#include "common/kernel_registry.h"
#include "kernels/cuda_status.h"
#include "kernels/launch_util.h"
#include "kernels/tensor_map.h"
#include "kernels/tma_simt_sgemm.cuh"
#include "kernels/tma_simt_sgemm.h"

namespace sgemm {
namespace {

using tma_simt::TmaSimtConfig;

//                                WARPS_M WARPS_N TWM TWN TM TN STAGES CONSUMER_REGS PRODUCER_REGS GROUP_M
using Tile128x256 = TmaSimtConfig<2, 4, 8, 4, 8, 16, 4, 232, 40, 16>;  // 384 threads, 192 KB ring
using Tile192x128 = TmaSimtConfig<3, 4, 8, 4, 8, 8, 5, 160, 24, 8>;    // 512 threads, 200 KB ring
// Two consumer warp groups, each with its own 128x128 tile (4 warps of
// 64x64, 8x16 per thread) and its own ring of 3 stages of 32 KB, one producer thread each.
using Rings2x128x128 = TmaSimtConfig<2, 2, 8, 4, 8, 16, 3, 232, 40, 16, 8, 4, 2>;  // 384 threads, 2 x 96 KB
#ifdef SGEMM_KERNEL_TUNING
// Measured alternatives (docs/kernels.md).
using Tile128x192 = TmaSimtConfig<2, 6, 8, 4, 8, 8, 5, 160, 24, 8>;
using Tile256x128 = TmaSimtConfig<4, 2, 8, 4, 8, 16, 4, 232, 40, 8>;
using Tile128x256W32x128 = TmaSimtConfig<4, 2, 4, 8, 8, 16, 4, 232, 40, 16>;  // warp 32x128
using Tile192x128W32x64 = TmaSimtConfig<6, 2, 4, 8, 8, 8, 5, 160, 24, 8>;     // warp 32x64
using Tile128x256U2 = TmaSimtConfig<2, 4, 8, 4, 8, 16, 4, 232, 40, 16, 2>;    // 8 k per loop iteration
using Tile192x128U2 = TmaSimtConfig<3, 4, 8, 4, 8, 8, 5, 160, 24, 8, 2>;
// 16 consumer warps (4 per scheduler, as many as the ping-pong tile's 4 blocks of 4) at 112
// registers: A read 8 bytes at a time to fit (ptxas still spills 24-52 bytes).
using Tile256x128W16 = TmaSimtConfig<4, 4, 8, 4, 8, 8, 4, 112, 24, 8, 8, 2>;
using Tile256x128W16W32x64 = TmaSimtConfig<8, 2, 4, 8, 8, 8, 4, 112, 24, 8, 8, 2>;
#endif

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

struct Device {
  int sm_count = 0;
  bool sm90 = false;
};

Status current_device(Device* d) {
  int device = 0, major = 0, minor = 0;
  SGEMM_CUDA_TRY(cudaGetDevice(&device));
  SGEMM_CUDA_TRY(cudaDeviceGetAttribute(&d->sm_count, cudaDevAttrMultiProcessorCount, device));
  SGEMM_CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  SGEMM_CUDA_TRY(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  d->sm90 = major == 9 && minor == 0;
  return Status::Ok();
}

// The tiles the registry's row choice reasons about (common/kernel_registry.cc) are these.
static_assert(Tile128x256::BM == 128 && Tile128x256::BN == 256 && Tile128x256::RINGS == 1 && tma_simt::kBK == 32,
              "the registry's TMA 128x256 tile (kernel_registry.cc, kTma128x256Tile) must match Tile128x256");
static_assert(Tile192x128::BM == 192 && Tile192x128::BN == 128 && Tile192x128::RINGS == 1,
              "the registry's TMA 192x128 tile (kernel_registry.cc, kTma192x128Tile) must match Tile192x128");
static_assert(Rings2x128x128::BM == 128 && Rings2x128x128::BN == 128 && Rings2x128x128::RINGS == 2,
              "the registry's ring tile (kernel_registry.cc, kTmaRingsTile) must match Rings2x128x128");

// Stream-K never cuts a segment shorter than this many k-blocks (128 of K) when it can help it.
constexpr int64_t kMinStreamKIters = 4;

// How one launch deals out its work: its grid and its tiles, whole or in stream-K segments.
struct Schedule {
  unsigned grid = 0;
  tma_simt::StreamK sk;  // without the workspace pointers
};

int64_t tiles_of(const GemmShape& s, int bm, int bn) { return ((s.m + bm - 1) / bm) * ((s.n + bn - 1) / bn); }

template <class Cfg>
Schedule whole_tiles(int64_t units, int sm_count) {
  Schedule sc;
  sc.grid = unsigned(std::min<int64_t>((units + Cfg::RINGS - 1) / Cfg::RINGS, sm_count));
  sc.sk.dp_units = int(units);
  return sc;
}

// Stream-K: whole waves of tiles, then the last wave's tiles' first `head` k-blocks on one
// virtual CTA each and their tails cut evenly over the others (tma_simt_sgemm.cuh).
template <class Cfg>
Schedule stream_k_schedule(const GemmShape& s, int sm_count) {
  const int64_t tiles = tiles_of(s, Cfg::BM, Cfg::BN);
  const int64_t k_blocks = (s.k + tma_simt::kBK - 1) / tma_simt::kBK;
  const int64_t vctas = int64_t(sm_count) * Cfg::RINGS;
  const int64_t dp_tiles = tiles / vctas * vctas;
  const int64_t left = tiles - dp_tiles;
  const int64_t head = (left * k_blocks + vctas - 1) / vctas;
  // Whole tiles unless the rule the registry's row choice also reads says stream-K
  // (common/kernel_registry.h, tma_simt_stream_k_applies).
  if (!tma_simt_stream_k_applies(s, KernelTile{Cfg::BM, Cfg::BN, tma_simt::kBK, Cfg::RINGS}, sm_count))
    return whole_tiles<Cfg>(tiles, sm_count);
  Schedule sc;
  sc.sk.dp_units = int(dp_tiles);
  sc.sk.owners = int(left);
  sc.sk.head = int(head);
  sc.sk.tail = int(k_blocks - head);
  const int64_t tail_iters = left * sc.sk.tail;
  sc.sk.helpers = int(std::min(vctas - left, std::max<int64_t>(1, tail_iters / kMinStreamKIters)));
  sc.sk.per_helper = int(tail_iters / sc.sk.helpers);  // >= 1: helpers <= tail_iters
  sc.sk.longer_helpers = int(tail_iters % sc.sk.helpers);
  const int64_t used = left + sc.sk.helpers;
  sc.grid = dp_tiles > 0 ? unsigned(sm_count) : unsigned((used + Cfg::RINGS - 1) / Cfg::RINGS);
  return sc;
}

// The stream-K workspace: a BM x BN partial slot per helper and per left tile, then one int
// flag per slot.
template <class Cfg>
std::size_t stream_k_bytes(const Schedule& sc, std::size_t* flags_offset) {
  const std::size_t slots = std::size_t(sc.sk.helpers + sc.sk.owners);
  if (flags_offset != nullptr) *flags_offset = slots * Cfg::BM * Cfg::BN * sizeof(float);
  return sc.sk.owners == 0 ? 0 : slots * Cfg::BM * Cfg::BN * sizeof(float) + (slots * sizeof(int) + 15) / 16 * 16;
}

template <class Cfg, bool kCpAsync = false, int kCpBytes = 4>
Status launch(const GemmArgs& g, const Schedule& sc, int splits, int per_split, float* workspace, cudaStream_t stream) {
  static std::atomic<uint64_t> smem_raised{0};
  static std::atomic<uint64_t> smem_raised_sk{0};
  // One ring fed by TMA: whole tiles (and split K) run tma_simt_whole_tile_kernel
  // (tma_simt_sgemm.cuh says why), stream-K the general kernel.
  constexpr bool kWholeTileKernel = !kCpAsync && Cfg::RINGS == 1;
  CUtensorMap map_a{}, map_b{};
  if constexpr (kCpAsync && kCpBytes == 1) {
    SGEMM_RETURN_IF_ERROR(make_tensor_map_2d(&map_a, g.a, g.shape.m, g.shape.k, g.lda, Cfg::BM, tma_simt::kBK,
                                             CU_TENSOR_MAP_SWIZZLE_128B, "A"));
  }
  if constexpr (!kCpAsync) {
    // A: BM rows x 32 k, 128-byte swizzle (its rows are exactly 128 bytes); B: 32 k x BN, as is.
    SGEMM_RETURN_IF_ERROR(make_tensor_map_2d(&map_a, g.a, g.shape.m, g.shape.k, g.lda, Cfg::BM, tma_simt::kBK,
                                             CU_TENSOR_MAP_SWIZZLE_128B, "A"));
    SGEMM_RETURN_IF_ERROR(make_tensor_map_2d(&map_b, g.b, g.shape.k, g.shape.n, g.ldb, tma_simt::kBK, Cfg::BN,
                                             CU_TENSOR_MAP_SWIZZLE_NONE, "B"));
  }
  const bool c_vec = aligned16(g.c) && g.ldc % 4 == 0;
  const int64_t ldw = (g.shape.n + 3) / 4 * 4;
  if constexpr (kWholeTileKernel) {
    if (sc.sk.owners == 0) {
      auto kernel = tma_simt::tma_simt_whole_tile_kernel<Cfg>;
      SGEMM_RETURN_IF_ERROR(ensure_smem_limit(kernel, Cfg::SMEM_BYTES, smem_raised));
      kernel<<<sc.grid, Cfg::THREADS, Cfg::SMEM_BYTES, stream>>>(map_a, map_b, int(g.shape.m), int(g.shape.n),
                                                                 int(g.shape.k), g.alpha, g.beta, g.c, g.ldc, c_vec,
                                                                 splits, per_split, workspace, ldw);
      return SGEMM_CUDA_STATUS(cudaGetLastError());
    }
  }
  // The general kernel: stream-K where the schedule has it (always, past the branch above,
  // for one ring), the ring tiles' whole tiles, the cp.async-fed kernels.
  auto kernel = tma_simt::tma_simt_sgemm_kernel<Cfg, kWholeTileKernel, kCpAsync, kCpBytes>;
  if constexpr (!kCpAsync && !kWholeTileKernel) {
    if (sc.sk.owners > 0) kernel = tma_simt::tma_simt_sgemm_kernel<Cfg, true>;
  }
  SGEMM_RETURN_IF_ERROR(ensure_smem_limit(kernel, Cfg::SMEM_BYTES, sc.sk.owners > 0 ? smem_raised_sk : smem_raised));
  kernel<<<sc.grid, Cfg::THREADS, Cfg::SMEM_BYTES, stream>>>(map_a, map_b, g.a, g.lda, g.b, g.ldb, int(g.shape.m),
                                                             int(g.shape.n), int(g.shape.k), g.alpha, g.beta, g.c,
                                                             g.ldc, c_vec, splits, per_split, workspace, ldw, sc.sk);
  return SGEMM_CUDA_STATUS(cudaGetLastError());
}

template <class Cfg>
Status run(const GemmArgs& g, const Device& dev, int splits, float* workspace, cudaStream_t stream) {
  const int64_t tiles = tiles_of(g.shape, Cfg::BM, Cfg::BN);
  const int k_blocks = int((g.shape.k + tma_simt::kBK - 1) / tma_simt::kBK);
  splits = std::clamp(splits, 1, k_blocks);
  const int per_split = (k_blocks + splits - 1) / splits;
  splits = (k_blocks + per_split - 1) / per_split;  // no empty split
  if (tiles * splits > INT_MAX / 2) return InvalidArgument("shape: m x n has too many tiles for the TMA-fed kernel");
  if (splits > 1 && (workspace == nullptr || (reinterpret_cast<uintptr_t>(workspace) & 15u) != 0))
    return InvalidArgument("workspace: split K needs a 16-byte aligned workspace");
  return launch<Cfg>(g, whole_tiles<Cfg>(tiles * splits, dev.sm_count), splits, per_split, workspace, stream);
}

template <class Cfg>
Status run_stream_k(const GemmArgs& g, const Device& dev, void* workspace, std::size_t workspace_bytes,
                    cudaStream_t stream) {
  const int64_t tiles = tiles_of(g.shape, Cfg::BM, Cfg::BN);
  if (tiles > INT_MAX / 2) return InvalidArgument("shape: m x n has too many tiles for the TMA-fed kernel");
  Schedule sc = stream_k_schedule<Cfg>(g.shape, dev.sm_count);
  const int k_blocks = int((g.shape.k + tma_simt::kBK - 1) / tma_simt::kBK);
  if (sc.sk.owners > 0) {
    std::size_t flags_offset = 0;
    const std::size_t need = stream_k_bytes<Cfg>(sc, &flags_offset);
    if (workspace == nullptr || workspace_bytes < need || (reinterpret_cast<uintptr_t>(workspace) & 15u) != 0)
      return InvalidArgument("workspace: stream-K over " + std::to_string(sc.sk.owners) + " tiles needs " +
                             std::to_string(need) + " bytes, 16-byte aligned, got " + std::to_string(workspace_bytes));
    sc.sk.partials = static_cast<float*>(workspace);
    sc.sk.flags = reinterpret_cast<int*>(static_cast<char*>(workspace) + flags_offset);
    SGEMM_CUDA_TRY(cudaMemsetAsync(sc.sk.flags, 0, std::size_t(sc.sk.helpers + sc.sk.owners) * sizeof(int), stream));
  }
  return launch<Cfg>(g, sc, 1, k_blocks, nullptr, stream);
}

bool layout_ok(const GemmArgs& g) {
  constexpr int64_t kMaxStride = int64_t{1} << 40;  // a tensor map's byte strides stay below 2^40
  return aligned16(g.a) && aligned16(g.b) && g.lda % 4 == 0 && g.ldb % 4 == 0 && g.lda * 4 < kMaxStride &&
         g.ldb * 4 < kMaxStride;
}

// What every TMA-fed launch needs: A and B laid out for TMA, and an sm_90 device (`dev`).
Status tma_preconditions(const GemmArgs& args, Device* dev) {
  if (!layout_ok(args))
    return FailedPrecondition(
        "a, b: the TMA-fed kernel needs A and B 16-byte aligned with lda % 4 == 0 and "
        "ldb % 4 == 0");
  SGEMM_RETURN_IF_ERROR(current_device(dev));
  if (!dev->sm90) return FailedPrecondition("device: the TMA-fed kernel needs an sm_90 GPU (Hopper)");
  return Status::Ok();
}

}  // namespace

bool tma_simt_can_run(const GemmArgs& args) {
  if (!layout_ok(args)) return false;
  Device dev;
  if (!current_device(&dev).ok()) {
    (void)cudaGetLastError();
    return false;
  }
  return dev.sm90;
}

// Calls f.template operator()<Cfg>() with the configuration of `tile`; false when this
// build lacks it (the measured alternatives exist only with -DSGEMM_KERNEL_TUNING=ON).
template <class F>
bool with_config(TmaSimtTile tile, F&& f) {
  switch (tile) {
    case TmaSimtTile::k128x256T8x16:
      f.template operator()<Tile128x256>();
      return true;
    case TmaSimtTile::k192x128T8x8:
      f.template operator()<Tile192x128>();
      return true;
    case TmaSimtTile::kRings2x128x128T8x16:
      f.template operator()<Rings2x128x128>();
      return true;
#ifdef SGEMM_KERNEL_TUNING
    case TmaSimtTile::k128x192T8x8:
      f.template operator()<Tile128x192>();
      return true;
    case TmaSimtTile::k256x128T8x16:
      f.template operator()<Tile256x128>();
      return true;
    case TmaSimtTile::k128x256T8x16W32x128:
      f.template operator()<Tile128x256W32x128>();
      return true;
    case TmaSimtTile::k192x128T8x8W32x64:
      f.template operator()<Tile192x128W32x64>();
      return true;
    case TmaSimtTile::k128x256T8x16U2:
      f.template operator()<Tile128x256U2>();
      return true;
    case TmaSimtTile::k192x128T8x8U2:
      f.template operator()<Tile192x128U2>();
      return true;
    case TmaSimtTile::k256x128T8x8W16:
      f.template operator()<Tile256x128W16>();
      return true;
    case TmaSimtTile::k256x128T8x8W16W32x64:
      f.template operator()<Tile256x128W16W32x64>();
      return true;
#endif
    default:
      return false;
  }
}

TmaSimtTileShape tma_simt_tile_shape(TmaSimtTile tile) {
  TmaSimtTileShape shape;
  with_config(tile, [&]<class Cfg>() { shape = {Cfg::BM, Cfg::BN}; });
  return shape;
}

Status tma_simt_sgemm(const GemmArgs& args, TmaSimtTile tile, int splits, float* workspace, cudaStream_t stream) {
  Device dev;
  SGEMM_RETURN_IF_ERROR(tma_preconditions(args, &dev));
  Status st = InvalidArgument("tile: this build has no such TMA-fed tile (tuning builds only)");
  with_config(tile, [&]<class Cfg>() { (void)(st = run<Cfg>(args, dev, splits, workspace, stream)); });
  return st;
}

Status tma_simt_sgemm_cp_async(const GemmArgs& args, TmaSimtTile tile, CpAsyncFeed feed, cudaStream_t stream) {
  if (feed == CpAsyncFeed::k16Byte && !layout_ok(args))
    return FailedPrecondition("a, b: 16-byte copies need A and B 16-byte aligned with lda % 4 == 0 and ldb % 4 == 0");
  if (feed == CpAsyncFeed::kTmaA4ByteB && !(aligned16(args.a) && args.lda % 4 == 0))
    return FailedPrecondition("a: TMA reads A only 16-byte aligned with lda % 4 == 0");
  Device dev;
  SGEMM_RETURN_IF_ERROR(current_device(&dev));
  if (!dev.sm90) return FailedPrecondition("device: the warp-specialized kernel needs an sm_90 GPU (Hopper)");
  if (args.shape.m > INT_MAX || args.shape.n > INT_MAX || args.shape.k > INT_MAX)
    return InvalidArgument("shape: m, n and k must be below 2^31");
#ifndef SGEMM_KERNEL_TUNING
  // Measured slower than the 64x128 tile on every shape: built for tuning only.
  (void)tile;
  (void)stream;
  return FailedPrecondition("tile: the cp.async-fed kernel is built only with -DSGEMM_KERNEL_TUNING=ON");
#else
  const auto run_cp_async = [&]<class Cfg, int kCpBytes>() {
    const int64_t tiles = tiles_of(args.shape, Cfg::BM, Cfg::BN);
    if (tiles > INT_MAX / 2) return InvalidArgument("shape: m x n has too many tiles for the warp-specialized kernel");
    const int k_blocks = int((args.shape.k + tma_simt::kBK - 1) / tma_simt::kBK);
    return launch<Cfg, true, kCpBytes>(args, whole_tiles<Cfg>(tiles, dev.sm_count), 1, k_blocks, nullptr, stream);
  };
  // Only the tiles the picker uses for the aligned neighbours of these shapes are built (the
  // 16-byte and TMA-A forms on the ring tile only).
  if (tile == TmaSimtTile::kRings2x128x128T8x16) {
    switch (feed) {
      case CpAsyncFeed::k4Byte:
        return run_cp_async.template operator()<Rings2x128x128, 4>();
      case CpAsyncFeed::k16Byte:
        return run_cp_async.template operator()<Rings2x128x128, 16>();
      case CpAsyncFeed::kTmaA4ByteB:
        return run_cp_async.template operator()<Rings2x128x128, 1>();
      case CpAsyncFeed::k4ByteOneWarpPerRing:
        return run_cp_async.template operator()<Rings2x128x128, 2>();
    }
  }
  if (tile == TmaSimtTile::k192x128T8x8 && feed == CpAsyncFeed::k4Byte)
    return run_cp_async.template operator()<Tile192x128, 4>();
  return InvalidArgument("tile: the cp.async-fed kernel is built for the ring and 192x128 tiles only");
#endif
}

std::size_t tma_simt_stream_k_workspace_bytes(const GemmShape& shape, TmaSimtTile tile, int sm_count) {
  std::size_t bytes = 0;
  with_config(tile,
              [&]<class Cfg>() { bytes = stream_k_bytes<Cfg>(stream_k_schedule<Cfg>(shape, sm_count), nullptr); });
  return bytes;
}

Status tma_simt_sgemm_stream_k(const GemmArgs& args, TmaSimtTile tile, void* workspace, std::size_t workspace_bytes,
                               cudaStream_t stream) {
  Device dev;
  SGEMM_RETURN_IF_ERROR(tma_preconditions(args, &dev));
  Status st = InvalidArgument("tile: this build has no such TMA-fed tile (tuning builds only)");
  with_config(tile,
              [&]<class Cfg>() { (void)(st = run_stream_k<Cfg>(args, dev, workspace, workspace_bytes, stream)); });
  return st;
}

}  // namespace sgemm
