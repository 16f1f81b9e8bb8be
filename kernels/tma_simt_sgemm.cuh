// TMA-fed SIMT SGEMM: fp32 FFMA, no tensor cores, C = alpha*A*B + beta*C for
// row-major A (m x k), B (k x n), C (m x n) with leading dimensions, the same product as
// the ping-pong kernel (pingpong_sgemm.cuh) with the copies taken off the math warps.
//
// Warp-specialized and persistent (grid = min(#tiles, #SMs), one CTA per SM):
//   warp group 0   producer: setmaxnreg down to PRODUCER_REGS; one thread walks the CTA's
//                  tiles and k-blocks, waits for a stage's "empty" mbarrier, arms its
//                  "full" mbarrier with the stage's byte count and issues two bulk tensor
//                  copies (TMA): A's BM x 32 box and B's 32 x BN box;
//   warp groups 1+ consumers: setmaxnreg up to CONSUMER_REGS; wait for "full", multiply
//                  the stage with LDS.128 + FFMA only, and release it (one arrive per
//                  warp on "empty"). No cp.async, no address arithmetic for copies, no
//                  __syncthreads in the mainloop.
// Stage = BK = 32 of K: A as it lies in memory (K-major, BM rows of 128 bytes) in the
//   TMA's 128-byte swizzle (16-byte chunk q of row r stored at chunk q ^ (r % 8)), and B
//   as it lies (32 rows of BN floats, no swizzle). STAGES stages in a ring.
// Tiling: block tile BM x BN = (WARPS_M*WM) x (WARPS_N*WN), warp tile WM x WN =
//   (TWM*TM) x (TWN*TN), a warp's lanes a TWM x TWN grid. A thread's rows are
//   lane_m + i*TWM (i < TM) of its warp tile, its columns 4-wide groups lane_n*4 + j*TWN*4
//   (j < TN/4). Per 4 k a thread loads one 16-byte chunk of each of its TM rows (the TWM
//   rows a warp reads at once fall in distinct swizzled chunks: no bank conflicts, each
//   address broadcast to TWN lanes) and per k TN/4 16-byte pieces of B (contiguous
//   across lanes); B's fragments are double-buffered ("ping-pong"), A's chunk of a row is
//   reloaded right after the row's last FFMA of the chunk.
// Edges: the TMA zero-fills the parts of a box outside A or B (rows >= m, columns >= n,
//   k >= K), so any m, n, k >= 1 run; the epilogue stores in-range elements only (float4
//   where C allows) and reads C only when beta != 0.
// Needs (checked by the launcher, tma_simt_sgemm.cu): A and B 16-byte aligned with
//   lda % 4 == 0 and ldb % 4 == 0 (TMA strides), an sm_90 GPU (setmaxnreg: sm_90a).
// Tile order: grouped rasterization, GROUP_M tile rows per group; CTA b takes work units
//   b, b + #CTAs, ... (the producer runs ahead into the next unit during the epilogue).
// Split-K (splits > 1, for few tiles and a long K): a unit is one run of
//   k_blocks_per_split k-blocks of one tile; it stores alpha * partial into its slice of a
//   splits x m x ldw workspace, and the launcher's reduction kernel adds the slices in
//   slice order (bitwise reproducible run to run).
// Rings (RINGS > 1, CUTLASS's "pingpong" idea for SIMT): each
//   consumer warp group owns its own output tiles and its own ring of STAGES stages with
//   its own full/empty mbarriers, fed by its own producer thread (lane 0 of producer warp
//   r): a group never waits for another group's warps, and one group's epilogue overlaps
//   the other's mainloop. Ring r of CTA b is "virtual CTA" v = b * RINGS + r of
//   gridDim.x * RINGS; block tile BM x BN is then one ring's tile.
// Stream-K (sk.owners > 0, for a partial last wave), in a form that keeps the CTAs reading
//   the same k together: the first sk.dp_units tiles are dealt out as above (whole waves);
//   of the T tiles left, virtual CTA v < T (the tile's "owner") runs k-blocks [0, head) of
//   tile v, all owners in step as in a whole wave; the remaining virtual CTAs ("helpers")
//   cut the T tails [head, k_blocks) evenly, tile after tile, store each piece's raw sum in
//   a partial slot and raise its flag (release). The owner waits for its tail's flags and
//   adds the pieces in tail order before the epilogue: the same sums in the same order every
//   run (bitwise reproducible). head = ceil(T x k_blocks / virtual CTAs), so the helpers'
//   share is at most the owners'. (Plain stream-K, equal contiguous runs over all T x
//   k_blocks iterations, measured 12% slower at 2048: its CTAs read different k at once.)
//   Needs every CTA resident or able to become so (persistent grid <= #SMs; only owners
//   wait, and only for helpers).
// Tiles in use (tma_simt_sgemm.cu): 128x256 / warp 64x64 / thread 8x16, 4 stages of 48 KB,
//   1 producer + 2 consumer warp groups (consumers at 232 registers); 192x128 / 64x32 / 8x8,
//   5 stages of 40 KB, 1 + 3 warp groups (consumers at 160); 2 rings of 128x128 / 64x64 / 8x16,
//   3 stages of 32 KB each, 1 + 2 warp groups (consumers at 232). A_VEC and UNROLL_Q exist for
//   the measured alternatives (docs/kernels.md).
#pragma once

#include <cuda.h>  // CUtensorMap (type only)
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/epilogue.cuh"
#include "kernels/ptx_sm90.cuh"

namespace sgemm::tma_simt {

constexpr int kBK = 32;                // k per stage: one 128-byte swizzle row of A
constexpr int kProducerThreads = 128;  // one warp group: setmaxnreg acts on whole warp groups

template <int WARPS_M_, int WARPS_N_, int TWM_, int TWN_, int TM_, int TN_, int STAGES_, int CONSUMER_REGS_,
          int PRODUCER_REGS_, int GROUP_M_ = 8, int UNROLL_Q_ = 8, int A_VEC_ = 4, int RINGS_ = 1>
struct TmaSimtConfig {
  static constexpr int WARPS_M = WARPS_M_, WARPS_N = WARPS_N_;
  static constexpr int TWM = TWM_, TWN = TWN_;  // lanes of a warp along M and N
  static constexpr int TM = TM_, TN = TN_;      // accumulators per thread along M and N
  static constexpr int STAGES = STAGES_;
  static constexpr int CONSUMER_REGS = CONSUMER_REGS_, PRODUCER_REGS = PRODUCER_REGS_;
  static constexpr int GROUP_M = GROUP_M_;
  // 16-byte chunks of A (4 k each) per unrolled loop iteration of a stage: 8 unrolls the
  // stage (32 k x TM x TN FFMAs of straight code); fewer keep the loop body small.
  static constexpr int UNROLL_Q = UNROLL_Q_;
  // k per shared-memory load of A: 4 (16-byte loads) or 2 (8-byte loads: half the A
  // registers, twice the A loads; for consumers with few registers).
  static constexpr int A_VEC = A_VEC_;
  // Consumer warp groups with their own tiles and rings (1: all consumers on one tile).
  static constexpr int RINGS = RINGS_;
  static constexpr int RING_WARPS = WARPS_M * WARPS_N;  // consumer warps on one ring's tile
  static constexpr int RING_THREADS = 32 * RING_WARPS;
  static constexpr int CONSUMER_WARPS = RING_WARPS * RINGS;
  static constexpr int CONSUMER_THREADS = 32 * CONSUMER_WARPS;
  static constexpr int THREADS = kProducerThreads + CONSUMER_THREADS;
  static constexpr int WM = TWM * TM, WN = TWN * TN;
  static constexpr int BM = WARPS_M * WM, BN = WARPS_N * WN;
  static constexpr int A_BYTES = BM * kBK * 4;  // BM rows of 128 bytes, swizzled
  static constexpr int B_BYTES = kBK * BN * 4;  // 32 rows of BN floats
  static constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
  // 1024 bytes of slack to align the ring to the 128-byte swizzle's 1024-byte period.
  static constexpr int RING_BYTES = STAGES * STAGE_BYTES;
  static constexpr int SMEM_BYTES = RINGS * RING_BYTES + 2 * RINGS * STAGES * 8 + 1024;
  // Registers ptxas may give every thread at launch (__launch_bounds__(THREADS, 1)).
  static constexpr int LAUNCH_REGS = (65536 / THREADS) / 8 * 8;

  static_assert(TWM * TWN == 32, "a warp's lanes must form a TWM x TWN grid of 32");
  static_assert(TWM == 1 || TWM == 2 || TWM == 4 || TWM == 8 || TWM == 16 || TWM == 32,
                "the swizzle of a thread's rows is computed for a power-of-two TWM");
  static_assert(TN % 4 == 0, "B fragments are read as float4");
  static_assert(WM % 8 == 0, "warp tiles must start on a swizzle atom (8 rows)");
  static_assert(CONSUMER_WARPS % 4 == 0, "consumers must be whole warp groups (setmaxnreg)");
  static_assert(RINGS == 1 || RING_WARPS % 4 == 0, "each ring's consumers must be whole warp groups");
  static_assert(RINGS >= 1 && RINGS <= 4, "one producer warp of the producer warp group per ring");
  static_assert(BM <= 256 && BN <= 256, "a TMA box dimension is at most 256 elements");
  static_assert(STAGE_BYTES % 1024 == 0 && A_BYTES % 1024 == 0,
                "every A tile must start on the 1024-byte period of the 128-byte swizzle");
  static_assert(STAGES >= 2, "the ring needs two stages to overlap copies with math");
  static_assert(SMEM_BYTES <= 227 * 1024, "the ring must fit an SM's 227 KB of shared memory");
  static_assert(PRODUCER_REGS % 8 == 0 && CONSUMER_REGS % 8 == 0 && PRODUCER_REGS >= 24 && CONSUMER_REGS <= 256,
                "setmaxnreg takes multiples of 8 in [24, 256]");
  static_assert(kProducerThreads * PRODUCER_REGS + CONSUMER_THREADS * CONSUMER_REGS <= LAUNCH_REGS * THREADS,
                "the warp groups' registers after setmaxnreg must fit what the CTA was launched with");
  static_assert(GROUP_M >= 1, "a rasterization group holds at least one tile row");
  static_assert(UNROLL_Q == 1 || UNROLL_Q == 2 || UNROLL_Q == 4 || UNROLL_Q == 8,
                "the chunks of a stage (8) must split into whole loop iterations");
  static_assert(A_VEC == 4 || (A_VEC == 2 && UNROLL_Q == 8), "A is read 16 bytes at a time, or 8 in a whole stage");
};

// Stream-K's split of a launch (all zero but dp_units: whole tiles only).
struct StreamK {
  int dp_units = 0;        // work units dealt out whole (tiles x splits; with stream-K the first whole waves of tiles)
  int owners = 0;          // tiles left after them: virtual CTA v < owners runs k-blocks [0, head) of tile dp_units + v
  int head = 0;            // k-blocks of a left tile its owner runs
  int tail = 0;            // the rest (k_blocks - head), run by the helpers
  int helpers = 0;         // virtual CTAs owners + h, h < helpers, cut the owners x tail tail iterations evenly:
  int per_helper = 0;      // (owners x tail) / helpers iterations each,
  int longer_helpers = 0;  // and one more for the first (owners x tail) % helpers of them
  float* partials = nullptr;  // helpers + owners slots of BM x BN floats (in the consumers' register order):
                              // slot h: helper h's first piece; slot helpers + j: tile j's tail from its start
  int* flags = nullptr;       // one per slot, zero at launch; 1 once the slot holds its partial
};

// The first tail iteration of helper h (32-bit arithmetic only: the producer runs this at
// 24-40 registers, where a 64-bit division spilled).
__device__ __forceinline__ int sk_helper_begin(int h, const StreamK& sk) {
  return h * sk.per_helper + min(h, sk.longer_helpers);
}

// One piece of work: k-blocks [kb_begin, kb_end) of tile `tile`; `split` is the split-K
// slice (0 without split-K); `sk` marks a stream-K piece, `slot` the partial slot of a
// helper's piece (-1 for an owner's).
struct Piece {
  int tile, split, kb_begin, kb_end, slot;
  bool sk;
};

// Piece i (i = 0, 1, ...) of virtual CTA v; false past its last. Whole units v, v + V, ...
// < dp_units first, then (kStreamK) its stream-K work: an owner's head, or a helper's run of
// tails, tile by tile. The producer and the consumers of a ring ask for the same pieces.
// Stateless on purpose: the consumers keep only i live across the mainloop and ask again
// for the epilogue, so the stream-K and whole-tile instantiations carry the same registers
// through the FFMA stream (a walker object that kept its cursor, tile, slot and flags live
// there made the stream-K kernel's mainloop ~4% slower).
template <bool kStreamK>
__device__ __forceinline__ bool piece_at(int v, int i, int vctas, int tiles, int k_blocks, int k_blocks_per_split,
                                         const StreamK& sk, Piece& p) {
  const int whole = v < sk.dp_units ? (sk.dp_units - 1 - v) / vctas + 1 : 0;
  if (i < whole) {
    const int u = v + i * vctas;
    p.split = u / tiles;
    p.tile = u - p.split * tiles;
    p.kb_begin = p.split * k_blocks_per_split;
    p.kb_end = min(k_blocks, p.kb_begin + k_blocks_per_split);
    p.slot = -1;
    p.sk = false;
    return true;
  }
  if constexpr (!kStreamK) {
    return false;
  } else {
    i -= whole;
    p.split = 0;
    p.sk = true;
    if (v < sk.owners) {
      p.tile = sk.dp_units + v;
      p.kb_begin = 0;
      p.kb_end = sk.head;
      p.slot = -1;
      return i == 0;
    }
    const int h = v - sk.owners;
    if (h >= sk.helpers) return false;
    // Helper h runs tail iterations [b, e): piece i is its part of tail j = b / tail + i.
    const int b = sk_helper_begin(h, sk), e = sk_helper_begin(h + 1, sk);
    const int j = b / sk.tail + i;
    const int lo = max(b, j * sk.tail), hi = min(e, j * sk.tail + sk.tail);
    if (lo >= hi) return false;
    p.tile = sk.dp_units + j;
    p.kb_begin = sk.head + (lo - j * sk.tail);
    p.kb_end = sk.head + (hi - j * sk.tail);
    p.slot = i == 0 ? h : sk.helpers + j;  // a helper's first piece, else a tail's start
    return true;
  }
}

// An int the compiler cannot see through: the consumers ask for their piece again after
// the mainloop instead of keeping it in registers through it.
__device__ __forceinline__ int opaque(int x) {
  asm volatile("" : "+r"(x));
  return x;
}

// The whole-tile (and split-K) kernel, one ring. tma_simt_sgemm_kernel below does the same
// work for RINGS == 1 and !kStreamK, but ptxas compiles that more general kernel 1.5-2.5%
// slower on one H100 (bench/results/2026-11-23_h100_whole-tile-regression/), so whole tiles
// run this one. Both take their mainloop from tma_simt_mainloop.inc and the store of a unit
// (split-K slice or C) from tma_simt_store_tile.inc. Change either only with a side-by-side
// run against the previous build (scripts/gpu-check.sh compare-builds): its SASS is what was
// measured.
template <class Cfg>
__global__ void __launch_bounds__(Cfg::THREADS, 1)
    tma_simt_whole_tile_kernel(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,
                               int m, int n, int k, float alpha, float beta, float* __restrict__ c, int64_t ldc,
                               bool c_vec, int splits, int k_blocks_per_split, float* __restrict__ workspace,
                               int64_t ldw) {
  static_assert(Cfg::RINGS == 1, "one ring: the ring tiles run tma_simt_sgemm_kernel");
  using namespace ptx;
  constexpr int BM = Cfg::BM, BN = Cfg::BN, TM = Cfg::TM, TN = Cfg::TN, TWM = Cfg::TWM, TWN = Cfg::TWN;
  constexpr int STAGES = Cfg::STAGES;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t ring = (raw + 1023u) & ~1023u;  // stage s at ring + s * STAGE_BYTES
  const uint32_t full_bar = ring + STAGES * Cfg::STAGE_BYTES;
  const uint32_t empty_bar = full_bar + STAGES * 8;
  const float* const ring_f = reinterpret_cast<const float*>(smem_raw + (ring - raw));

  const int tiles_m = (m + BM - 1) / BM;
  const int tiles_n = (n + BN - 1) / BN;
  const int tiles = tiles_m * tiles_n;
  const int units = tiles * splits;  // unit u: tile u % tiles, K run u / tiles
  const int k_blocks = (k + kBK - 1) / kBK;

  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full_bar + 8 * s, 1);
      mbar_init(empty_bar + 8 * s, Cfg::CONSUMER_WARPS);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    fence_proxy_async_shared();
  }
  __syncthreads();

  // Unit u -> (tile row, tile column, first and end k-block). Tiles are rasterized in
  // groups of GROUP_M tile rows; the splits of K are the outer index, so the CTAs running
  // together read the same K range of neighbouring tiles.
  auto unit_coords = [&](int u, int& tm, int& tn, int& kb_begin, int& kb_end) {
    const int split = u / tiles, t = u - split * tiles;
    kb_begin = split * k_blocks_per_split;
    kb_end = min(k_blocks, kb_begin + k_blocks_per_split);
    const int per_group = Cfg::GROUP_M * tiles_n;
    const int first_m = (t / per_group) * Cfg::GROUP_M;
    const int group_rows = min(tiles_m - first_m, Cfg::GROUP_M);
    const int in_group = t % per_group;
    tm = first_m + in_group % group_rows;
    tn = in_group / group_rows;
  };

  if (threadIdx.x < kProducerThreads) {
    // ---------------- producer ----------------
    setmaxnreg_dec<Cfg::PRODUCER_REGS>();
    if (threadIdx.x == 0) {
      tma_prefetch_descriptor(&tmap_a);
      tma_prefetch_descriptor(&tmap_b);
      uint32_t s = 0, phase = 0;
      for (int u = blockIdx.x; u < units; u += gridDim.x) {
        int tm, tn, kb_begin, kb_end;
        unit_coords(u, tm, tn, kb_begin, kb_end);
        for (int kb = kb_begin; kb < kb_end; ++kb) {
          mbar_wait(empty_bar + 8 * s, phase ^ 1u);  // a fresh barrier passes parity 1 at once
          const uint32_t stage = ring + s * Cfg::STAGE_BYTES;
          mbar_arrive_expect_tx(full_bar + 8 * s, Cfg::STAGE_BYTES);  // zero-filled bytes count too
          tma_load_2d(stage, &tmap_a, full_bar + 8 * s, kb * kBK, tm * BM);
          tma_load_2d(stage + Cfg::A_BYTES, &tmap_b, full_bar + 8 * s, tn * BN, kb * kBK);
          if (++s == STAGES) {
            s = 0;
            phase ^= 1u;
          }
        }
      }
    }
    return;
  }

  // ---------------- consumers ----------------
  setmaxnreg_inc<Cfg::CONSUMER_REGS>();
  const int ctid = threadIdx.x - kProducerThreads;
  const int warp = ctid / 32, lane = ctid % 32;
  const int warp_m = warp / Cfg::WARPS_N, warp_n = warp % Cfg::WARPS_N;
  const int lane_m = lane / TWN, lane_n = lane % TWN;
  const int row0 = warp_m * Cfg::WM + lane_m;  // this thread's rows: row0 + i*TWM
  // Row r = row0 + i*TWM keeps chunk q at chunk q ^ (r % 8) = (q ^ (i*TWM % 8)) ^ (lane_m % 8):
  // the warp tile starts on an 8-row atom and lane_m < TWM adds no carry (TWM a power of two).
  const int lane_swz = (lane_m & 7) * 4;  // floats
  const int a_thread = row0 * kBK;
  const int b_thread = warp_n * Cfg::WN + lane_n * 4;

  uint32_t s = 0, phase = 0;
  for (int u = blockIdx.x; u < units; u += gridDim.x) {
    int tm, tn, kb_begin, kb_end;
    unit_coords(u, tm, tn, kb_begin, kb_end);
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

#include "kernels/tma_simt_mainloop.inc"

    const int split = u / tiles;
#include "kernels/tma_simt_store_tile.inc"
  }
}

// Fills stage `stage` (A rows [m0, m0 + BM) and B columns [n0, n0 + BN), k [k0, k0 + 32)) with
// 4-byte cp.async in the layout the TMA writes (A K-major in the 128-byte swizzle, B as it
// lies), zero-filling outside A and B; thread `pt` of the ring's kPt producer threads (whole
// warps: lane = k for A, a 32-column run of a B row per copy). Any alignment and leading
// dimension. Stages wholly inside A or B take a branch without predicates.
template <class Cfg, int kPt, bool kCopyA = true>
__device__ __forceinline__ void cp_async_fill_stage(uint32_t stage, const float* __restrict__ a, int64_t lda,
                                                    const float* __restrict__ b, int64_t ldb, int m, int n, int k,
                                                    int m0, int n0, int k0, int pt) {
  using ptx::cp_async_4;
  constexpr int BM = Cfg::BM, BN = Cfg::BN, WP = kPt / 32;  // producer warps of the ring
  constexpr int RPG = 8 / WP;                               // a warp's rows in an 8-row swizzle atom
  static_assert(kPt % 32 == 0 && 8 % WP == 0 && kBK % WP == 0, "a ring's producers are 1, 2, 4 or 8 warps");
  static_assert(BN % 32 == 0, "B's rows are copied in runs of 32 columns");
  const int wr = pt / 32, lane = pt % 32;
  // ---- A: warp wr copies rows wr + WP*j; lane = k; row r's 16-byte chunk q at q ^ (r % 8) ----
  if constexpr (kCopyA) {
    const float* src = a + int64_t(m0 + wr) * lda + (k0 + lane);
    const int64_t step = int64_t(WP) * lda;
    const uint32_t dst = stage + uint32_t(wr * 128 + (lane % 4) * 4);
    const int chunk = lane / 4;
    if (m0 + BM <= m && k0 + kBK <= k) {
#pragma unroll 1
      for (int g = 0; g < BM / 8; ++g) {
#pragma unroll
        for (int j = 0; j < RPG; ++j) {
          const int r8 = wr + WP * j;  // row within the atom
          cp_async_4(dst + g * 1024 + WP * j * 128 + ((chunk ^ r8) * 16), src);
          src += step;
        }
      }
    } else {
      const uint32_t kbytes = k0 + lane < k ? 4u : 0u;
#pragma unroll 1
      for (int g = 0; g < BM / 8; ++g) {
#pragma unroll
        for (int j = 0; j < RPG; ++j) {
          const int r8 = wr + WP * j;
          const uint32_t bytes = m0 + g * 8 + r8 < m ? kbytes : 0u;
          cp_async_4(dst + g * 1024 + WP * j * 128 + ((chunk ^ r8) * 16), bytes != 0 ? src : a, bytes);
          src += step;
        }
      }
    }
  }
  // ---- B: warp wr copies k rows wr + WP*j, 32 columns per copy ----
  {
    const float* src = b + int64_t(k0 + wr) * ldb + (n0 + lane);
    const int64_t step = int64_t(WP) * ldb;
    const uint32_t dst = stage + Cfg::A_BYTES + uint32_t(wr * BN * 4 + lane * 4);
    if (n0 + BN <= n && k0 + kBK <= k) {
#pragma unroll 1
      for (int j = 0; j < kBK / WP; ++j) {
#pragma unroll
        for (int c = 0; c < BN / 32; ++c) cp_async_4(dst + j * WP * BN * 4 + c * 128, src + c * 32);
        src += step;
      }
    } else {
#pragma unroll 1
      for (int j = 0; j < kBK / WP; ++j) {
        const bool k_in = k0 + wr + WP * j < k;
#pragma unroll
        for (int c = 0; c < BN / 32; ++c) {
          const uint32_t bytes = k_in && n0 + c * 32 + lane < n ? 4u : 0u;
          cp_async_4(dst + j * WP * BN * 4 + c * 128, bytes != 0 ? src + c * 32 : b, bytes);
        }
        src += step;
      }
    }
  }
}

// The same stage with 16-byte cp.async.cg (L1 bypassed), for A and B 16-byte aligned with
// lda % 4 == 0 and ldb % 4 == 0 (the layouts TMA reads too: the measured alternative that
// tells the copies' count from their kind). A: a warp copies 4 rows x 8 chunks per copy; B:
// one row of 32 chunks per copy per 128 columns. src-size = the bytes inside A or B.
template <class Cfg, int kPt>
__device__ __forceinline__ void cp_async16_fill_stage(uint32_t stage, const float* __restrict__ a, int64_t lda,
                                                      const float* __restrict__ b, int64_t ldb, int m, int n, int k,
                                                      int m0, int n0, int k0, int pt) {
  using ptx::cp_async_16;
  constexpr int BM = Cfg::BM, BN = Cfg::BN, WP = kPt / 32;
  static_assert(BM % (4 * WP) == 0 && BN % 128 == 0 && kBK % WP == 0, "whole copies per producer warp");
  const int wr = pt / 32, lane = pt % 32;
  {
    const int q = lane % 8, kk = k0 + 4 * q;
    const uint32_t kbytes = uint32_t(min(max(k - kk, 0), 4) * 4);
#pragma unroll 4
    for (int rr = wr * 4 + lane / 8; rr < BM; rr += 4 * WP) {
      const int row = m0 + rr;
      const uint32_t bytes = row < m ? kbytes : 0u;
      cp_async_16(stage + rr * 128 + ((q ^ (rr % 8)) * 16), bytes != 0 ? a + int64_t(row) * lda + kk : a, bytes);
    }
  }
  {
#pragma unroll 4
    for (int kr = wr; kr < kBK; kr += WP) {
      const bool k_in = k0 + kr < k;
#pragma unroll
      for (int c = 0; c < BN / 128; ++c) {
        const int col = n0 + c * 128 + lane * 4;
        const uint32_t bytes = k_in ? uint32_t(min(max(n - col, 0), 4) * 4) : 0u;
        cp_async_16(stage + Cfg::A_BYTES + (kr * BN + c * 128 + lane * 4) * 4,
                    bytes != 0 ? b + int64_t(k0 + kr) * ldb + col : b, bytes);
      }
    }
  }
}

// kStreamK: whether the launch may carry stream-K work (sk.owners > 0); without it (and
// without kCpAsync) the kernel does what tma_simt_whole_tile_kernel does, which is launched
// instead for one ring.
// kCpAsync: the producer warp group fills the stages with 4-byte
// cp.async from a, lda and b, ldb instead of TMA (any alignment and leading dimension; the
// tensor maps are then unused): all of its 128 / RINGS threads per ring copy, and each
// signals the stage's full barrier with cp.async.mbarrier.arrive.noinc (the barrier expects
// that many arrivals instead of one arrive.expect_tx). The consumers are the same.
//   kCpBytes: 4 (4-byte copies of A and B; 2: the same by one producer warp per ring, the
//   others idle: a measured alternative), 16 (16-byte copies, for layouts TMA could read:
//   a measured alternative) or 1 (A by TMA as without kCpAsync, B by 4-byte copies: for A
//   that TMA reads and B that it cannot; the full barrier then also takes the expect-tx
//   arrival of producer thread 0).
template <class Cfg, bool kStreamK, bool kCpAsync = false, int kCpBytes = 4>
__global__ void __launch_bounds__(Cfg::THREADS, 1)
    tma_simt_sgemm_kernel(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,
                          const float* __restrict__ a, int64_t lda, const float* __restrict__ b, int64_t ldb, int m,
                          int n, int k, float alpha, float beta, float* __restrict__ c, int64_t ldc, bool c_vec,
                          int splits, int k_blocks_per_split, float* __restrict__ workspace, int64_t ldw, StreamK sk) {
  using namespace ptx;
  constexpr int BM = Cfg::BM, BN = Cfg::BN, TM = Cfg::TM, TN = Cfg::TN, TWM = Cfg::TWM, TWN = Cfg::TWN;
  constexpr int STAGES = Cfg::STAGES, RINGS = Cfg::RINGS;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t ring0 = (raw + 1023u) & ~1023u;  // ring r, stage s at ring0 + r * RING_BYTES + s * STAGE_BYTES
  const uint32_t full_bar0 = ring0 + RINGS * Cfg::RING_BYTES;  // ring r, stage s at + 8 * (r * STAGES + s)
  const uint32_t empty_bar0 = full_bar0 + RINGS * STAGES * 8;
  const float* const ring_f0 = reinterpret_cast<const float*>(smem_raw + (ring0 - raw));

  const int tiles_m = (m + BM - 1) / BM;
  const int tiles_n = (n + BN - 1) / BN;
  const int tiles = tiles_m * tiles_n;
  const int k_blocks = (k + kBK - 1) / kBK;
  const int vctas = gridDim.x * RINGS;

  if (threadIdx.x == 0) {
    for (int s = 0; s < RINGS * STAGES; ++s) {
      mbar_init(full_bar0 + 8 * s,
                kCpAsync ? (kCpBytes == 2 ? 32 : kProducerThreads / RINGS) + (kCpBytes == 1 ? 1 : 0) : 1);
      mbar_init(empty_bar0 + 8 * s, Cfg::RING_WARPS);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    fence_proxy_async_shared();
  }
  __syncthreads();

  // Tile t -> (tile row, tile column), rasterized in groups of GROUP_M tile rows; the splits
  // of K are the outer index of a unit, so the CTAs running together read the same K range
  // of neighbouring tiles.
  auto tile_coords = [&](int t, int& tm, int& tn) {
    const int per_group = Cfg::GROUP_M * tiles_n;
    const int first_m = (t / per_group) * Cfg::GROUP_M;
    const int group_rows = min(tiles_m - first_m, Cfg::GROUP_M);
    const int in_group = t % per_group;
    tm = first_m + in_group % group_rows;
    tn = in_group / group_rows;
  };

  if (threadIdx.x < kProducerThreads) {
    // ---------------- producers: lane 0 of warp r feeds ring r ----------------
    // The stream-K walk and the cp.async copies need 32 registers (at 24 a division spilled).
    constexpr int kProducerRegs = (kStreamK || kCpAsync) && Cfg::PRODUCER_REGS < 32 ? 32 : Cfg::PRODUCER_REGS;
    static_assert(kProducerThreads * kProducerRegs + Cfg::CONSUMER_THREADS * Cfg::CONSUMER_REGS <=
                      Cfg::LAUNCH_REGS * Cfg::THREADS,
                  "the producers' 32 registers leave the consumers too few");
    setmaxnreg_dec<kProducerRegs>();
    if constexpr (kCpAsync) {
      // All producer threads copy: threads [r * kPt, (r + 1) * kPt) feed ring r.
      constexpr int kPt = kCpBytes == 2 ? 32 : kProducerThreads / RINGS;
      static_assert(kProducerThreads % (32 * RINGS) == 0, "each ring's producers must be whole warps");
      const int r = threadIdx.x / kPt, pt = threadIdx.x % kPt;
      if (r >= RINGS) return;  // kCpBytes == 2: one producer warp per ring
      const uint32_t ring = ring0 + r * Cfg::RING_BYTES;
      const uint32_t full_bar = full_bar0 + 8 * r * STAGES, empty_bar = empty_bar0 + 8 * r * STAGES;
      const int v = blockIdx.x * RINGS + r;
      if (kCpBytes == 1 && pt == 0) tma_prefetch_descriptor(&tmap_a);
      uint32_t s = 0, phase = 0;
      Piece p;
      for (int pi = 0; piece_at<kStreamK>(v, pi, vctas, tiles, k_blocks, k_blocks_per_split, sk, p); ++pi) {
        int tm, tn;
        tile_coords(p.tile, tm, tn);
        for (int kb = p.kb_begin; kb < p.kb_end; ++kb) {
          mbar_wait(empty_bar + 8 * s, phase ^ 1u);
          if constexpr (kCpBytes == 1) {
            if (pt == 0) {
              mbar_arrive_expect_tx(full_bar + 8 * s, Cfg::A_BYTES);
              tma_load_2d(ring + s * Cfg::STAGE_BYTES, &tmap_a, full_bar + 8 * s, kb * kBK, tm * BM);
            }
            cp_async_fill_stage<Cfg, kPt, false>(ring + s * Cfg::STAGE_BYTES, a, lda, b, ldb, m, n, k, tm * BM, tn * BN,
                                                 kb * kBK, pt);
          } else if constexpr (kCpBytes == 16)
            cp_async16_fill_stage<Cfg, kPt>(ring + s * Cfg::STAGE_BYTES, a, lda, b, ldb, m, n, k, tm * BM, tn * BN,
                                            kb * kBK, pt);
          else
            cp_async_fill_stage<Cfg, kPt>(ring + s * Cfg::STAGE_BYTES, a, lda, b, ldb, m, n, k, tm * BM, tn * BN,
                                          kb * kBK, pt);
          cp_async_mbar_arrive_noinc(full_bar + 8 * s);
          if (++s == STAGES) {
            s = 0;
            phase ^= 1u;
          }
        }
      }
      return;
    }
    const int r = threadIdx.x / 32;  // warp r < RINGS feeds ring r
    if (threadIdx.x % 32 == 0 && r < RINGS) {
      tma_prefetch_descriptor(&tmap_a);
      tma_prefetch_descriptor(&tmap_b);
      const uint32_t ring = ring0 + r * Cfg::RING_BYTES;
      const uint32_t full_bar = full_bar0 + 8 * r * STAGES, empty_bar = empty_bar0 + 8 * r * STAGES;
      const int v = blockIdx.x * RINGS + r;
      uint32_t s = 0, phase = 0;
      Piece p;
      for (int pi = 0; piece_at<kStreamK>(v, pi, vctas, tiles, k_blocks, k_blocks_per_split, sk, p); ++pi) {
        int tm, tn;
        tile_coords(p.tile, tm, tn);
        for (int kb = p.kb_begin; kb < p.kb_end; ++kb) {
          mbar_wait(empty_bar + 8 * s, phase ^ 1u);  // a fresh barrier passes parity 1 at once
          const uint32_t stage = ring + s * Cfg::STAGE_BYTES;
          mbar_arrive_expect_tx(full_bar + 8 * s, Cfg::STAGE_BYTES);  // zero-filled bytes count too
          tma_load_2d(stage, &tmap_a, full_bar + 8 * s, kb * kBK, tm * BM);
          tma_load_2d(stage + Cfg::A_BYTES, &tmap_b, full_bar + 8 * s, tn * BN, kb * kBK);
          if (++s == STAGES) {
            s = 0;
            phase ^= 1u;
          }
        }
      }
    }
    return;
  }

  // ---------------- consumers ----------------
  setmaxnreg_inc<Cfg::CONSUMER_REGS>();
  const int r = RINGS == 1 ? 0 : (threadIdx.x - kProducerThreads) / Cfg::RING_THREADS;  // this thread's ring
  const int ctid = threadIdx.x - kProducerThreads - r * Cfg::RING_THREADS;
  const int v = blockIdx.x * RINGS + r;
  const int warp = ctid / 32, lane = ctid % 32;
  const int warp_m = warp / Cfg::WARPS_N, warp_n = warp % Cfg::WARPS_N;
  const int lane_m = lane / TWN, lane_n = lane % TWN;
  const int row0 = warp_m * Cfg::WM + lane_m;  // this thread's rows: row0 + i*TWM
  // Row r = row0 + i*TWM keeps chunk q at chunk q ^ (r % 8) = (q ^ (i*TWM % 8)) ^ (lane_m % 8):
  // the warp tile starts on an 8-row atom and lane_m < TWM adds no carry (TWM a power of two).
  const int lane_swz = (lane_m & 7) * 4;  // floats
  const int a_thread = row0 * kBK;
  const int b_thread = warp_n * Cfg::WN + lane_n * 4;
  const float* const ring_f = ring_f0 + r * (Cfg::RING_BYTES / 4);
  const uint32_t full_bar = full_bar0 + 8 * r * STAGES, empty_bar = empty_bar0 + 8 * r * STAGES;
  const int ring_barrier = 1 + r;  // named barrier of this ring's consumers (0 is __syncthreads)

  uint32_t s = 0, phase = 0;
  for (int pi = 0;; ++pi) {
    int kb_begin, kb_end;
    {
      Piece p;
      if (!piece_at<kStreamK>(v, pi, vctas, tiles, k_blocks, k_blocks_per_split, sk, p)) break;
      kb_begin = p.kb_begin;
      kb_end = p.kb_end;
    }
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

#include "kernels/tma_simt_mainloop.inc"

    // The piece again (it exists: it did above), for the epilogue.
    Piece p;
    piece_at<kStreamK>(v, opaque(pi), vctas, tiles, k_blocks, k_blocks_per_split, sk, p);
    int tm, tn;
    tile_coords(p.tile, tm, tn);
    if (kStreamK && p.sk) {
      // Stream-K, a left tile: partial slots hold the accumulators in the consumers'
      // register order: float4 (i, j4) of thread ctid at (i * TN/4 + j4) * threads + ctid.
      constexpr int kSlot = BM * BN;
      if (p.slot >= 0) {
        // A helper's piece of a tail: hand the raw sum to the tile's owner.
        float4* slot = reinterpret_cast<float4*>(sk.partials + int64_t(p.slot) * kSlot) + ctid;
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
          for (int j4 = 0; j4 < TN / 4; ++j4)
            __stcg(slot + (i * (TN / 4) + j4) * Cfg::RING_THREADS,
                   make_float4(acc[i][4 * j4 + 0], acc[i][4 * j4 + 1], acc[i][4 * j4 + 2], acc[i][4 * j4 + 3]));
        named_barrier_sync(ring_barrier, Cfg::RING_THREADS);
        if (ctid == 0) {
          __threadfence();
          asm volatile("st.release.gpu.global.b32 [%0], %1;" ::"l"(sk.flags + p.slot), "r"(1) : "memory");
        }
        continue;
      }
      // The owner: add the tail's pieces in tail order. Tail j is iterations [x, x + tail) of
      // the tail space; its first piece belongs to the helper h0 whose run contains x (slot h0
      // when that run starts at x, else the tail-start slot), the others are first pieces of
      // the helpers after h0 whose runs start inside the tail.
      const int j = p.tile - sk.dp_units, x = j * sk.tail;
      const int x_long = (sk.per_helper + 1) * sk.longer_helpers;  // where the longer runs end
      int h0 = x < x_long ? x / (sk.per_helper + 1) : sk.longer_helpers + (x - x_long) / sk.per_helper;
      while (h0 + 1 < sk.helpers && sk_helper_begin(h0 + 1, sk) <= x) ++h0;
      while (h0 > 0 && sk_helper_begin(h0, sk) > x) --h0;
      int h_end = h0 + 1;
      while (h_end < sk.helpers && sk_helper_begin(h_end, sk) < x + sk.tail) ++h_end;
      const int first_slot = sk_helper_begin(h0, sk) == x ? h0 : sk.helpers + j;
      if (ctid == 0) {
        for (int h = h0; h < h_end; ++h) {
          const int* flag = sk.flags + (h == h0 ? first_slot : h);
          int ready = 0;
          do {
            asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(ready) : "l"(flag) : "memory");
          } while (ready == 0);
        }
      }
      named_barrier_sync(ring_barrier, Cfg::RING_THREADS);
      for (int h = h0; h < h_end; ++h) {
        const float4* slot =
            reinterpret_cast<const float4*>(sk.partials + int64_t(h == h0 ? first_slot : h) * kSlot) + ctid;
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
          for (int j4 = 0; j4 < TN / 4; ++j4) {
            const float4 y = __ldcg(slot + (i * (TN / 4) + j4) * Cfg::RING_THREADS);
            acc[i][4 * j4 + 0] += y.x;
            acc[i][4 * j4 + 1] += y.y;
            acc[i][4 * j4 + 2] += y.z;
            acc[i][4 * j4 + 3] += y.w;
          }
      }
    }

    const int split = p.split;
#include "kernels/tma_simt_store_tile.inc"
  }
}

}  // namespace sgemm::tma_simt
