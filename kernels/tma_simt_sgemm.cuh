// TMA-fed SIMT SGEMM (issue 14): fp32 FFMA, no tensor cores, C = alpha*A*B + beta*C for
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
// Tiles in use (tma_simt_sgemm.cu): 128x256 / warp 64x64 / thread 8x16, 4 stages of 48 KB,
//   1 producer + 2 consumer warp groups (consumers at 232 registers); 192x128 / 64x32 / 8x8,
//   5 stages of 40 KB, 1 + 3 warp groups (consumers at 160). A_VEC and UNROLL_Q exist for the
//   measured alternatives (docs/kernels.md).
#pragma once

#include <cuda.h>  // CUtensorMap (type only)
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/hopper_pipeline.cuh"

namespace sgemm::tma_simt {

constexpr int kBK = 32;                // k per stage: one 128-byte swizzle row of A
constexpr int kProducerThreads = 128;  // one warp group: setmaxnreg acts on whole warp groups

template <int WARPS_M_, int WARPS_N_, int TWM_, int TWN_, int TM_, int TN_, int STAGES_, int CONSUMER_REGS_,
          int PRODUCER_REGS_, int GROUP_M_ = 8, int UNROLL_Q_ = 8, int A_VEC_ = 4>
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
  static constexpr int CONSUMER_WARPS = WARPS_M * WARPS_N;
  static constexpr int CONSUMER_THREADS = 32 * CONSUMER_WARPS;
  static constexpr int THREADS = kProducerThreads + CONSUMER_THREADS;
  static constexpr int WM = TWM * TM, WN = TWN * TN;
  static constexpr int BM = WARPS_M * WM, BN = WARPS_N * WN;
  static constexpr int A_BYTES = BM * kBK * 4;  // BM rows of 128 bytes, swizzled
  static constexpr int B_BYTES = kBK * BN * 4;  // 32 rows of BN floats
  static constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
  // 1024 bytes of slack to align the ring to the 128-byte swizzle's 1024-byte period.
  static constexpr int SMEM_BYTES = STAGES * STAGE_BYTES + 2 * STAGES * 8 + 1024;
  // Registers ptxas may give every thread at launch (__launch_bounds__(THREADS, 1)).
  static constexpr int LAUNCH_REGS = (65536 / THREADS) / 8 * 8;

  static_assert(TWM * TWN == 32, "a warp's lanes must form a TWM x TWN grid of 32");
  static_assert(TWM == 1 || TWM == 2 || TWM == 4 || TWM == 8 || TWM == 16 || TWM == 32,
                "the swizzle of a thread's rows is computed for a power-of-two TWM");
  static_assert(TN % 4 == 0, "B fragments are read as float4");
  static_assert(WM % 8 == 0, "warp tiles must start on a swizzle atom (8 rows)");
  static_assert(CONSUMER_WARPS % 4 == 0, "consumers must be whole warp groups (setmaxnreg)");
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

template <class Cfg>
__global__ void __launch_bounds__(Cfg::THREADS, 1)
    tma_simt_sgemm_kernel(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b, int m,
                          int n, int k, float alpha, float beta, float* __restrict__ c, int64_t ldc, bool c_vec,
                          int splits, int k_blocks_per_split, float* __restrict__ workspace, int64_t ldw) {
  using namespace hopper;
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
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
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

    for (int kb = kb_begin; kb < kb_end; ++kb) {
      mbar_wait(full_bar + 8 * s, phase);
      const float* as = ring_f + s * (Cfg::STAGE_BYTES / 4) + a_thread;
      const float* bs = ring_f + s * (Cfg::STAGE_BYTES / 4) + Cfg::A_BYTES / 4 + b_thread;
      constexpr int kChunks = kBK / 4;
      constexpr bool kFullUnroll = Cfg::UNROLL_Q == kChunks;
      constexpr int AV = Cfg::A_VEC;
      float a_piece[TM][AV];  // AV consecutive k of each of the thread's rows
      // Piece p of a row: k = p*AV .. p*AV+AV-1, inside 16-byte chunk q = p*AV/4.
      auto load_a_piece = [&](int i, int p) {
        const int q = (p * AV) / 4;
        const int col = (((q ^ ((i * TWM) & 7)) * 4) ^ lane_swz) + (p * AV) % 4;
        if constexpr (AV == 4) {
          const float4 v = *reinterpret_cast<const float4*>(as + i * TWM * kBK + col);
          a_piece[i][0] = v.x;
          a_piece[i][1] = v.y;
          a_piece[i][2] = v.z;
          a_piece[i][3] = v.w;
        } else {
          const float2 v = *reinterpret_cast<const float2*>(as + i * TWM * kBK + col);
          a_piece[i][0] = v.x;
          a_piece[i][1] = v.y;
        }
      };
      float b_frag[2][TN];
      auto load_b_frag = [&](int kk, int buf) {
#pragma unroll
        for (int j = 0; j < TN / 4; ++j) {
          const float4 v = *reinterpret_cast<const float4*>(bs + kk * BN + j * TWN * 4);
          b_frag[buf][4 * j + 0] = v.x;
          b_frag[buf][4 * j + 1] = v.y;
          b_frag[buf][4 * j + 2] = v.z;
          b_frag[buf][4 * j + 3] = v.w;
        }
      };
#pragma unroll
      for (int i = 0; i < TM; ++i) load_a_piece(i, 0);
      load_b_frag(0, 0);
      // 4 k per chunk; UNROLL_Q chunks per loop iteration (all 8 when UNROLL_Q == 8: no
      // loop). A rolled loop loads past the stage's last k (B row 0, A piece 0 again: a few
      // harmless loads) instead of testing for it.
#pragma unroll 1
      for (int q0 = 0; q0 < kChunks; q0 += Cfg::UNROLL_Q) {
#pragma unroll
        for (int kq = 0; kq < 4 * Cfg::UNROLL_Q; ++kq) {
          const int q = q0 + kq / 4, kk = kq % 4, kx = 4 * q + kk;
          const bool last = kFullUnroll && kx == kBK - 1;
          if (!last) load_b_frag((kx + 1) % kBK, (kk + 1) & 1);
#pragma unroll
          for (int i = 0; i < TM; ++i) {
#pragma unroll
            for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a_piece[i][kk % AV], b_frag[kk & 1][j], acc[i][j]);
            if (kk % AV == AV - 1 && !last) load_a_piece(i, ((kx + 1) / AV) % (kBK / AV));
          }
        }
      }
      // Every load of this stage has been consumed: hand it back to the producer.
      __syncwarp();
      if (lane == 0) mbar_arrive(empty_bar + 8 * s);
      if (++s == STAGES) {
        s = 0;
        phase ^= 1u;
      }
    }

    const int m0 = tm * BM, n0 = tn * BN;
    if (splits > 1) {
      // Split K: alpha * partial into this split's m x ldw workspace slice (ldw a multiple
      // of 4, slices 16-byte aligned: whole float4 stores; columns in [n, ldw) get zeros,
      // never read back); the launcher's reduction adds the slices in order.
      float* slice = workspace + int64_t(u / tiles) * m * ldw;
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        const int row = m0 + row0 + i * TWM;
        if (row >= m) continue;
        float* wrow = slice + int64_t(row) * ldw;
#pragma unroll
        for (int j4 = 0; j4 < TN / 4; ++j4) {
          const int col = n0 + warp_n * Cfg::WN + j4 * TWN * 4 + lane_n * 4;
          if (col < ldw)
            *reinterpret_cast<float4*>(wrow + col) =
                make_float4(alpha * acc[i][4 * j4 + 0], alpha * acc[i][4 * j4 + 1], alpha * acc[i][4 * j4 + 2],
                            alpha * acc[i][4 * j4 + 3]);
        }
      }
      continue;
    }
    // ---- epilogue: C = alpha*acc + beta*C, float4 where C allows ----
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const int row = m0 + row0 + i * TWM;
      if (row >= m) continue;
      float* crow = c + int64_t(row) * ldc;
#pragma unroll
      for (int j4 = 0; j4 < TN / 4; ++j4) {
        const int col = n0 + warp_n * Cfg::WN + j4 * TWN * 4 + lane_n * 4;
        float4 r = make_float4(alpha * acc[i][4 * j4 + 0], alpha * acc[i][4 * j4 + 1], alpha * acc[i][4 * j4 + 2],
                               alpha * acc[i][4 * j4 + 3]);
        if (c_vec && col + 3 < n) {
          float4* p = reinterpret_cast<float4*>(crow + col);
          if (beta != 0.0f) {
            const float4 old = *p;
            r.x = fmaf(beta, old.x, r.x);
            r.y = fmaf(beta, old.y, r.y);
            r.z = fmaf(beta, old.z, r.z);
            r.w = fmaf(beta, old.w, r.w);
          }
          *p = r;
        } else {
          const float v[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            if (col + q < n) {
              float out = v[q];
              if (beta != 0.0f) out = fmaf(beta, crow[col + q], out);
              crow[col + q] = out;
            }
          }
        }
      }
    }
  }
}

}  // namespace sgemm::tma_simt
