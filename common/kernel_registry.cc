#include "common/kernel_registry.h"

#include <algorithm>
#include <climits>
#include <string>

#include "common/fp32x3_slices.h"

namespace sgemm {
namespace {

// Rows by position in kRows (the choice below names them).
enum RowId {
  kSimtSmallWideByAlignment,
  kSimtSmallWide4SplitK,
  kGemv,
  kSimtThinN32SplitK,
  kSimtThinN64SplitK,
  kSimtMediumSplitKCluster,
  kSimtFlatSplitK,
  kTma128x256,
  kTma192x128,
  kTma128x256SplitK,
  kTma128x256StreamK,
  kTma192x128StreamK,
  kTmaRings2x128x128,
  kTmaRings2x128x128StreamK,
  kFp32x3SplitA,
  kFp32x3Planes,
  kCublasSgemm,
  kCublasTf32,
  kOpenblas,
  kRowCount
};

using A = ArithmeticClass;
using W = KernelWorkspace;
constexpr KernelKind kSimt = KernelKind::kPingpong;
// Tiles the choice reads (the launchers static_assert theirs against these).
constexpr KernelTile kSmallWide4{64, 128, 16, 4};  // the SIMT cp.async 64x128 tile, 4 blocks per SM
constexpr KernelTile kSmall32{64, 64, 32, 4};      // the SIMT K-major 64x64 tile
constexpr KernelTile kTallK32{128, 32, 32, 3};     // the SIMT K-major 128x32 tile
constexpr KernelTile kMedium{128, 64, 16, 4};      // the SIMT 128x64 tile
constexpr KernelTile kFlat{32, 128, 16, 4};        // the SIMT 32x128 tile
constexpr KernelTile kTma128x256Tile{128, 256, 32, 1};
constexpr KernelTile kTma192x128Tile{192, 128, 32, 1};
constexpr KernelTile kTmaRingsTile{128, 128, 32, 2};  // two rings (consumer warp groups) per CTA, one CTA per SM
// fp32x3's tile and k-block are common/fp32x3_slices.h's (its cut of K counts them).
constexpr KernelTile kFp32x3Tile{int(kFp32x3TileEdge), int(kFp32x3TileEdge), int(kFp32x3KBlock), 1};
constexpr KernelTile kNoTile{};

// `variant` indexes the family's launcher table: kVariants of kernels/pingpong_sgemm.cu
// (SIMT, GEMV) and of kernels/fp32x3_sgemm.cu (tests/kernels/kernel_decisions_test.cc
// checks that each index names this row).
constexpr KernelRow kRows[] = {
    {"simt_cpasync_64x128x16_w32x64_t8x8_s4-aligned_s3-unaligned", kSimt, KernelArch::kSm90, A::kFfma, kSmallWide4,
     W::kNone, false, 0},
    {"simt_cpasync_64x128x16_w32x64_t8x8_s4_splitk", kSimt, KernelArch::kSm90, A::kFfma, kSmallWide4, W::kSplitKSlices,
     false, 1},
    {"gemv", kSimt, KernelArch::kSm90, A::kFfma, kNoTile, W::kGemvSlices, true, 2},
    {"simt_cpasync_128x32x32_w32x32_t4x8_s3_akm_splitk512_or_256x32x16", kSimt, KernelArch::kSm90, A::kFfma, kTallK32,
     W::kSplitKSlices, false, 3},
    {"simt_cpasync_64x64x32_w32x32_t4x8_s3_akm_splitk512_or_128x64x16", kSimt, KernelArch::kSm90, A::kFfma, kSmall32,
     W::kSplitKSlices, false, 4},
    {"simt_cpasync_128x64x16_w64x32_t8x8_s3_splitk512_cluster", kSimt, KernelArch::kSm90, A::kFfma, kMedium, W::kNone,
     false, 5},
    {"simt_cpasync_32x128x16_w16x64_t4x8_s4_splitk512", kSimt, KernelArch::kSm90, A::kFfma, kFlat, W::kSplitKSlices,
     false, 6},
    {"simt_tma_128x256x32_w64x64_t8x16_s4", kSimt, KernelArch::kSm90a, A::kFfma, kTma128x256Tile, W::kNone, false, 7},
    {"simt_tma_192x128x32_w64x32_t8x8_s5", kSimt, KernelArch::kSm90a, A::kFfma, kTma192x128Tile, W::kNone, false, 8},
    {"simt_tma_128x256x32_w64x64_t8x16_s4_splitk", kSimt, KernelArch::kSm90a, A::kFfma, kTma128x256Tile,
     W::kSplitKSlices, false, 9},
    {"simt_tma_128x256x32_w64x64_t8x16_s4_streamk", kSimt, KernelArch::kSm90a, A::kFfma, kTma128x256Tile, W::kStreamK,
     false, 10},
    {"simt_tma_192x128x32_w64x32_t8x8_s5_streamk", kSimt, KernelArch::kSm90a, A::kFfma, kTma192x128Tile, W::kStreamK,
     false, 11},
    {"simt_tma_2x128x128x32_w64x64_t8x16_s3_rings", kSimt, KernelArch::kSm90a, A::kFfma, kTmaRingsTile, W::kNone, false,
     12},
    {"simt_tma_2x128x128x32_w64x64_t8x16_s3_rings_streamk", kSimt, KernelArch::kSm90a, A::kFfma, kTmaRingsTile,
     W::kStreamK, false, 13},
    {"fp32x3_wgmma_coop_128x128_s4_promote1_splitA_group16", KernelKind::kFp32x3, KernelArch::kSm90a, A::kFp32x3,
     kFp32x3Tile, W::kFp32x3Planes, false, 7},
    {"fp32x3_wgmma_coop_128x128_s3_promote1", KernelKind::kFp32x3, KernelArch::kSm90a, A::kFp32x3, kFp32x3Tile,
     W::kFp32x3Planes, false, 2},
    {"cublas_sgemm", KernelKind::kCublas, KernelArch::kCublas, A::kFfma, kNoTile, W::kLibraryInternal, false, -1},
    {"cublas_tf32", KernelKind::kTf32, KernelArch::kCublas, A::kTf32, kNoTile, W::kLibraryInternal, false, -1},
    {"openblas", KernelKind::kOpenblas, KernelArch::kHost, A::kFfma, kNoTile, W::kLibraryInternal, false, -1},
};
static_assert(sizeof(kRows) / sizeof(kRows[0]) == kRowCount, "RowId must list kRows in order");

const KernelRow* row(RowId id) { return &kRows[id]; }

int64_t tiles_of(const GemmShape& s, int64_t bm, int64_t bn) { return ((s.m + bm - 1) / bm) * ((s.n + bn - 1) / bn); }

// The SIMT family's row for `s` (ping-pong tiles, the TMA-fed kernel, GEMV).
RowId select_simt(const GemmShape& s, int sm_count) {
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
  if (one_row_or_column(s)) return kGemv;
  // The K-major thin tiles also from 256 rows when K >= 2048 (the engine's 512-row
  // blocks of thin products; bench/results/2026-11-23_h100_thin-kmajor-256-rows/):
  // 512x32x8192 135% of cuBLAS, 512x64x8192 138%, 512x32x2048 71%,
  // where the 64x128 split-K tile ran 29-58% (few tiles, K split no finer than 1024).
  const bool thin_from_256 = s.m >= 256 && s.k >= 2048;
  if (s.n <= 32 && (s.m >= 1024 || thin_from_256)) return kSimtThinN32SplitK;
  // With K < 2048 the 128x64 tile splits K at most 3 ways: its splits meet in a
  // cluster (no workspace pass): 8192x64x1024 114.5% of cuBLAS against 99.6% with
  // the workspace; with more splits the cluster reduction lost (73.6% at 8192x64x8192).
  if (s.n <= 64 && s.m >= 1024) return s.k < 2048 ? kSimtMediumSplitKCluster : kSimtThinN64SplitK;
  if (s.n <= 64 && thin_from_256) return kSimtThinN64SplitK;
  if (s.m <= 32 && s.n >= 1024) return kSimtFlatSplitK;
  // C 65 to 96 columns wide: the 128x32 K-major tile (three column tiles) split down to 512 of
  // K; 104.5% of cuBLAS at 4096x96x4096 and 99.6% at 8192x96x8192, where the 64x128 split-K
  // tile ran 94.0% and 88.0% (bench/results/2026-11-23_h100_picker-splitk/).
  if (s.n <= 96 && s.m >= 1024 && s.k >= 2048) return kSimtThinN32SplitK;
  const KernelTile w = kSmallWide4, t256 = kTma128x256Tile;
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
  if (simt_split_k_count(s, w.bm, w.bn, sm_count, w.per_sm) > 1) {
    const auto units = [&](const KernelTile& t) {  // as the launchers split
      return tiles_of(s, t.bm, t.bn) *
             simt_effective_splits(s, t.bk, simt_split_k_count(s, t.bm, t.bn, sm_count, t.per_sm));
    };
    const auto used = [&](int64_t bm, int64_t bn) {  // C's share of the tiles' area
      const int64_t padded_m = (s.m + bm - 1) / bm * bm, padded_n = (s.n + bn - 1) / bn * bn;
      return double(s.m) / double(padded_m) * double(s.n) / double(padded_n);
    };
    const double used_k = used(kSmall32.bm, kSmall32.bn), used_w = used(w.bm, w.bn);
    if (s.n > 128 && s.m > 64 && units(t256) * 10 >= int64_t(sm_count) * 9 &&
        used(t256.bm, t256.bn) + 0.05 >= std::max(used_w, used_k))
      return kTma128x256SplitK;
    const int64_t slots = int64_t(sm_count) * w.per_sm;
    if (s.n <= 64 || (units(w) * 10 >= slots * 9 && used_w + 0.05 >= used_k)) return kSimtSmallWide4SplitK;
    return kSimtThinN64SplitK;
  }
  // Few tiles and a short K (K < 2048: the 64x128 tile does not split it), C more than 64
  // columns wide and A's rows 16-byte multiples: where the 64x128 tiles fill less than 60% of
  // a wave of 4 per SM, the 64x64 K-major tile (twice the tiles; K split down to 512 from
  // K = 1024). Measured in the same directory, two rounds against the previous pick: 256^3
  // 120-146% of cuBLAS against 90-91%, 512^3 113-114% against 69-74%, 1024x512x1024 101-102%
  // against 64%, 768x1536x1024 92-95% against 70-71%, 1536^3 95-104% against 88-90%; it lost
  // at 768^3 (83-90% against 91-92%) and 896^3 (85-90% against 90-95%), and at 777x555x333
  // (77% against 92-93%: A's rows not 16-byte multiples, the tile's transposed fallback).
  if (s.n > 64 && s.k % 4 == 0 && tiles_of(s, w.bm, w.bn) * 10 < int64_t(sm_count) * w.per_sm * 6)
    return kSimtThinN64SplitK;
  // Otherwise, with K >= 2048 (at K = 1024 the 64x128 tile measured 2-3 points better), the
  // TMA-fed kernel's per-SM rate was 1-3% above the 64x128 tile's; it runs one CTA per SM,
  // so the last wave decides: take its 128x256 tile, its 128x128-per-ring tile (two consumer
  // warp groups, each its own tile and ring: 2 x #SMs tiles at once) or its 192x128 tile,
  // whichever fills the last wave best (128x256 where it fills it as well as the rings: for
  // n % 256 == 0 they fill it alike), when that fill is at least the 64x128 tile's (4 blocks
  // per SM). With the whole-tile kernel compiled from its own source, 128x256 ran above the
  // rings (2.914 vs 2.945-2.960 ms at 4096, 0.375 vs 0.379-0.382 ms at 2048, 3.141-3.154 vs
  // 3.143-3.146 ms at 4095; bench/results/2026-11-23_h100_whole-tile-regression/).
  if (s.k >= 2048) {
    const auto fill = [&](const KernelTile& t) {
      const int64_t tiles = tiles_of(s, t.bm, t.bn), slots = int64_t(sm_count) * t.per_sm;
      const int64_t padded = (tiles + slots - 1) / slots * slots;  // whole waves
      return double(tiles) / double(padded);
    };
    const double f256 = fill(t256), f_rings = fill(kTmaRingsTile), f192 = fill(kTma192x128Tile), f64 = fill(w);
    // Where every whole-tile schedule leaves the last wave poorly filled (best fill below
    // 0.92) and the 128x256 tile's stream-K schedule runs (its last wave at most 60% full),
    // that tile with stream-K (measured in the same run: 98.5% vs 79.3% for the rings at
    // 2560, 100.9% vs 94.4% for 192x128 at 5120).
    if (std::max({f_rings, f192, f64}) < 0.92 && tma_simt_stream_k_applies(s, t256, sm_count))
      return kTma128x256StreamK;
    if (std::max({f256, f_rings, f192}) >= f64) {
      if (f192 > std::max(f256, f_rings)) return kTma192x128;
      return f_rings > f256 ? kTmaRings2x128x128 : kTma128x256;
    }
  }
  return kSimtSmallWideByAlignment;
}

// fp32x3's row: promoted every k-block only (accuracy for any K). Measured on H100
// (docs/kernels.md, bench/results/2026-11-22_h100_fp32x3*): splitting A in the kernel saves
// the split pass's A share; with the integer rounding of its fragments it is the fastest
// promoted kernel at every measured shape, 8192 included (118-121 vs 114-118 TFLOP/s for
// all-shared-memory). Where TMA cannot read A in place (A not 16-byte aligned, lda % 4 != 0,
// or a row stride of 2^40 bytes or more), both operands go through the split pass.
RowId select_fp32x3(const GemmShape& s, const KernelLayout& layout) {
  return a_tma_readable(s, layout) ? kFp32x3SplitA : kFp32x3Planes;
}

}  // namespace

bool one_row_or_column(const GemmShape& s) { return s.m == 1 || s.n == 1; }

bool a_tma_readable(const GemmShape& s, const KernelLayout& layout) {
  const int64_t lda = layout.lda > 0 ? layout.lda : (s.k + 3) / 4 * 4;
  return layout.a_16byte_aligned && lda % 4 == 0 && lda * 4 < (int64_t{1} << 40);
}

std::string_view kernel_arch_name(KernelArch arch) {
  switch (arch) {
    case KernelArch::kSm90:
      return "sm_90";
    case KernelArch::kSm90a:
      return "sm_90a";
    case KernelArch::kCublas:
      return "cublas";
    case KernelArch::kHost:
      return "host";
  }
  return "unknown";
}

std::span<const KernelRow> kernel_registry() { return kRows; }

const KernelRow* find_kernel_row(std::string_view name) {
  for (const KernelRow& r : kRows)
    if (r.name == name) return &r;
  return nullptr;
}

bool kernel_row_accepts(const KernelRow& r, const GemmShape& s) {
  if (s.m < 1 || s.n < 1 || s.k < 1) return false;
  return !r.one_row_or_column_only || one_row_or_column(s);
}

std::string KernelPick::name() const {
  if (row == nullptr) return "";
  std::string out(row->name);
  if (k_slices > 1) out += "_splitk" + std::to_string(k_slices);
  return out;
}

KernelPick select_kernel_row_of(KernelKind family, const GemmShape& shape, const KernelLayout& layout, int sm_count) {
  KernelPick pick;
  switch (family) {
    case KernelKind::kPingpong:
      pick.row = row(select_simt(shape, sm_count));
      break;
    case KernelKind::kFp32x3:
      pick.row = row(select_fp32x3(shape, layout));
      if (shape.m >= 1 && shape.n >= 1 && shape.k >= 1) pick.k_slices = fp32x3_slices(shape, sm_count).count;
      break;
    case KernelKind::kCublas:
      pick.row = row(kCublasSgemm);
      break;
    case KernelKind::kTf32:
      pick.row = row(kCublasTf32);
      break;
    case KernelKind::kOpenblas:
      pick.row = row(kOpenblas);
      break;
  }
  return pick;
}

int simt_split_k_count(const GemmShape& s, int64_t bm, int64_t bn, int sm_count, int per_sm, int64_t min_k) {
  const int64_t tiles = tiles_of(s, bm, bn);
  const int64_t slots = int64_t(sm_count) * per_sm;
  if (tiles >= slots || s.k < 2 * min_k) return 1;
  const int64_t by_slots = slots / tiles;
  const int64_t by_k = s.k / min_k;
  return int(std::max<int64_t>(1, std::min(by_slots, by_k)));
}

int simt_effective_splits(const GemmShape& s, int bk, int splits) {
  const int k_tiles = int((s.k + bk - 1) / bk);
  splits = std::clamp(splits, 1, std::max(1, std::min(k_tiles, 64)));
  const int per_split = (k_tiles + splits - 1) / splits;
  return (k_tiles + per_split - 1) / per_split;
}

bool tma_simt_stream_k_applies(const GemmShape& s, const KernelTile& t, int sm_count) {
  const int64_t tiles = tiles_of(s, t.bm, t.bn);
  const int64_t k_blocks = (s.k + t.bk - 1) / t.bk;
  const int64_t vctas = int64_t(sm_count) * t.per_sm;
  const int64_t left = tiles - tiles / vctas * vctas;
  const int64_t head = (left * k_blocks + vctas - 1) / vctas;
  // Whole tiles when they fill whole waves, when the last wave is more than 60% full, or the
  // owners would run whole tiles anyway (and when the tails' iterations would pass 2^31: the
  // kernel counts them in int). The 60%: on one H100 stream-K gained where the last wave was
  // 33-52% full and lost 1-6 points where it was 64-97% full (its owners wait for helpers
  // that cut the tails into short pieces, each with a partial store).
  return !(left == 0 || left * 5 > vctas * 3 || head >= k_blocks || left * k_blocks > INT_MAX / 2);
}

}  // namespace sgemm
