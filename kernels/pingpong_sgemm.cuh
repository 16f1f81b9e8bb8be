// Ping-pong SGEMM: fp32 SIMT (FFMA, no tensor cores) C = alpha*A*B + beta*C for
// row-major A (m x k), B (k x n), C (m x n) with leading dimensions.
//
// Tiling (all compile-time, see PingpongConfig):
//   block tile  BM x BN, walked along K in steps of BK;
//   warp tile   WM x WN = (TWM*TM) x (TWN*TN): a warp's 32 lanes form a TWM x TWN grid;
//   thread tile TM x TN accumulators in registers, made of (TM/4) x (TN/4) 4x4 sub-tiles
//               spaced TWM*4 rows / TWN*4 columns apart, so that every shared-memory
//               fragment load is one 16-byte LDS that a warp reads as contiguous or
//               broadcast addresses (no bank conflicts).
// Stages: STAGES shared-memory buffers (a ring) fed by cp.async; tile kt+STAGES-1 is
//   in flight while tile kt is multiplied, one __syncthreads per K tile. Inside a tile
//   the register fragments of A and B are double-buffered ("ping-pong"): step k+1 is
//   loaded from shared memory while step k's TM*TN FFMAs issue.
// Shared layout: A is stored transposed, As[k][m], row stride BM+4: each thread copies
//   single floats with 4-byte cp.async (A needs no alignment at all), lanes covering
//   8 consecutive k x 4 consecutive m, which the +4 padding spreads over all 32 banks.
//   B is stored as is, Bs[k][n], copied 16 bytes at a time (kVectorized) or 4 bytes.
//   kAKMajor (A 16-byte aligned with lda % 4 == 0): A is stored as it lies, As[m][k]
//   with row stride BK+4 (an odd number of 16-byte units), copied 16 bytes at a time;
//   a thread's rows are lane_m + i*TWM, each read one 16-byte chunk (4 k) at a time:
//   any 8 consecutive rows hit distinct bank groups, so a warp's TWM rows are read
//   without conflicts. A thread multiplies 4 k steps from TM chunk loads (the same LDS
//   count as the transposed layout) and copies a quarter as many A pieces.
// Edges: out-of-range elements of A and B are zero-filled by cp.async's src-size
//   operand, so any M, N, K >= 1 run in the same kernel; the epilogue stores only
//   in-range elements (float4 stores where a whole aligned group is in range).
// Accepted shapes: m, n, k in [1, 2^31); lda >= k, ldb >= n, ldc >= n. kVectorized
//   needs b and c 16-byte aligned and ldb, ldc multiples of 4; otherwise the launcher
//   picks kVectorized = false (4-byte loads and stores). C is not read when beta == 0.
// Split-K: with gridDim.y = S > 1, block (x, y) multiplies only the y-th run of
//   k_tiles_per_split K tiles. Deterministic mode (workspace != nullptr): it stores
//   alpha * partial into slice y of an S x m x ldw workspace and splitk_reduce_kernel
//   then writes C = (slice 0 + ... + slice S-1) + beta*C in that fixed order, so
//   results are bitwise reproducible run to run. Atomic mode (workspace == nullptr,
//   kept for comparison): it adds alpha * partial into C with atomics after the
//   launcher made C = beta*C (results then vary in the last bits run to run).
//   Used for shapes with few output tiles and a long K.
// Block order: blocks are rasterized in groups of GROUP_M tile rows so that blocks
//   running together share A and B panels in L2.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/epilogue.cuh"
#include "kernels/ptx_sm80.cuh"

namespace sgemm::pingpong {

template <int BM_, int BN_, int BK_, int WARPS_M_, int WARPS_N_, int TWM_, int TWN_, int TM_, int TN_, int STAGES_,
          int MIN_BLOCKS_, int GROUP_M_ = 8>
struct PingpongConfig {
  static constexpr int BM = BM_, BN = BN_, BK = BK_;
  static constexpr int WARPS_M = WARPS_M_, WARPS_N = WARPS_N_;
  static constexpr int TWM = TWM_, TWN = TWN_;  // lanes of a warp along M and N
  static constexpr int TM = TM_, TN = TN_;      // accumulators per thread along M and N
  static constexpr int STAGES = STAGES_;
  static constexpr int MIN_BLOCKS = MIN_BLOCKS_;  // __launch_bounds__ occupancy target
  static constexpr int GROUP_M = GROUP_M_;        // tile rows per rasterization group
  static constexpr int THREADS = 32 * WARPS_M * WARPS_N;
  static constexpr int WM = TWM * TM, WN = TWN * TN;
  static constexpr int A_STRIDE = BM + 4;  // floats per k row of the transposed A tile
  static constexpr int B_STRIDE = BN;
  static constexpr int A_STAGE = BK * A_STRIDE;  // floats
  static constexpr int B_STAGE = BK * B_STRIDE;
  static constexpr int SMEM_BYTES = STAGES * (A_STAGE + B_STAGE) * int(sizeof(float));

  static_assert(TWM * TWN == 32, "a warp's lanes must form a TWM x TWN grid of 32");
  static_assert(TM % 4 == 0 && TN % 4 == 0, "thread tiles are made of 4x4 sub-tiles read as float4");
  static_assert(BM == WARPS_M * WM, "the warps must tile the block exactly along M");
  static_assert(BN == WARPS_N * WN, "the warps must tile the block exactly along N");
  static_assert(BK % 8 == 0, "A copies cover 8 consecutive k per lane group, so BK must be a multiple of 8");
  static_assert(BM % 32 == 0, "the transposed A tile's bank spreading needs BM to be a multiple of 32");
  static_assert((BM * BK) % THREADS == 0, "every thread must copy the same number of A elements");
  static_assert((BK * BN / 4) % THREADS == 0, "every thread must copy the same number of B float4s");
  static_assert(STAGES >= 2, "the cp.async pipeline needs at least two stages");
  static_assert(GROUP_M >= 1, "a rasterization group holds at least one tile row");
  // The K-major A layout (kAKMajor): BM rows of BK+4 floats per stage.
  static constexpr int AKM_CHUNKS = BK / 4;  // 16-byte chunks per A row
  static constexpr int AKM_STRIDE = BK + 4;  // an odd number of 16-byte units when BK % 8 == 0
  static constexpr int AKM_A_STAGE = BM * AKM_STRIDE;
  static constexpr int AKM_SMEM_BYTES = STAGES * (AKM_A_STAGE + B_STAGE) * int(sizeof(float));
  static constexpr bool AKM_OK = BK % 8 == 0 && TWM <= 8 && THREADS % AKM_CHUNKS == 0 &&
                                 (BM * AKM_CHUNKS) % THREADS == 0 && BM % (THREADS / AKM_CHUNKS) == 0;
};

using ptx::cp_async_commit;
using ptx::cp_async_wait;
using ptx::smem_u32;
// cp.async.wait_group and __syncthreads order every access to a stage: no memory clobber.
constexpr auto kCpFence = ptx::CpAsyncFence::kNone;

template <class Cfg, bool kVectorized, bool kClusterReduce = false, bool kAKMajor = false>
__global__ void __launch_bounds__(Cfg::THREADS, Cfg::MIN_BLOCKS)
    pingpong_sgemm_kernel(int m, int n, int k, float alpha, const float* __restrict__ a, int64_t lda,
                          const float* __restrict__ b, int64_t ldb, float beta, float* __restrict__ c, int64_t ldc,
                          int k_tiles_per_split, float* __restrict__ workspace, int64_t ldw) {
  constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK;
  constexpr int TM = Cfg::TM, TN = Cfg::TN, TWM = Cfg::TWM, TWN = Cfg::TWN;
  constexpr int THREADS = Cfg::THREADS, STAGES = Cfg::STAGES;
  static_assert(!kAKMajor || Cfg::AKM_OK,
                "the K-major A layout needs BK % 8 == 0, at most 8 lanes along M and whole A chunks per thread");
  constexpr int A_STAGE = kAKMajor ? Cfg::AKM_A_STAGE : Cfg::A_STAGE;  // floats
  extern __shared__ __align__(16) float smem[];
  float* const As = smem;                     // STAGES x [BK][A_STRIDE], or [BM][AKM_STRIDE] (kAKMajor)
  float* const Bs = smem + STAGES * A_STAGE;  // STAGES x [BK][B_STRIDE]

  // ---- which tile: grouped rasterization for L2 reuse ----
  const int tiles_m = (m + BM - 1) / BM;
  const int tiles_n = (n + BN - 1) / BN;
  const int bid = blockIdx.x;
  const int per_group = Cfg::GROUP_M * tiles_n;
  const int group = bid / per_group;
  const int first_m = group * Cfg::GROUP_M;
  const int group_rows = min(tiles_m - first_m, Cfg::GROUP_M);
  const int in_group = bid - group * per_group;
  const int tile_m = first_m + in_group % group_rows;
  const int tile_n = in_group / group_rows;
  const int m0 = tile_m * BM;
  const int n0 = tile_n * BN;

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int warp_m = warp / Cfg::WARPS_N;
  const int warp_n = warp % Cfg::WARPS_N;
  const int lane_m = lane / TWN;
  const int lane_n = lane % TWN;

  // ---- copy assignments (fixed per thread; only the K offset moves) ----
  // A: A_PER_THREAD single floats per tile. Lanes take 8 consecutive k of 4
  //    consecutive rows; copy i of a thread is row a_row + (i*A_RSTEP) % BM and
  //    k a_col + 8*((i*A_RSTEP) / BM) of the tile.
  //    kAKMajor: A_PER_THREAD 16-byte chunks; BK/4 lanes cover a row's BK k, copy i
  //    of a thread is row a_row + i*A_RSTEP, k a_col..a_col+3.
  constexpr int A_PER_THREAD = kAKMajor ? BM * BK / 4 / THREADS : BM * BK / THREADS;
  constexpr int A_RSTEP = kAKMajor ? THREADS / Cfg::AKM_CHUNKS : THREADS / 8;
  static_assert(BM % A_RSTEP == 0, "a thread's A rows must repeat with the block's row count");
  static_assert(A_PER_THREAD <= 32, "the A row-validity mask holds 32 bits");
  // B: vectorized, float4 pieces; else single floats. Copy i is row b_row + i*B_RSTEP, column b_col.
  constexpr int B_VEC = kVectorized ? 4 : 1;
  constexpr int B_PER_ROW = BN / B_VEC;
  static_assert(THREADS % B_PER_ROW == 0, "a whole number of B tile rows must be copied per step");
  constexpr int B_RSTEP = THREADS / B_PER_ROW;
  constexpr int B_PER_THREAD = BK / B_RSTEP;
  static_assert(BK % B_RSTEP == 0, "every thread must copy the same number of B pieces");

  const int a_row = kAKMajor ? tid / Cfg::AKM_CHUNKS : tid >> 3;
  const int a_col = kAKMajor ? (tid % Cfg::AKM_CHUNKS) * 4 : tid & 7;
  const int b_row = tid / B_PER_ROW, b_col = (tid % B_PER_ROW) * B_VEC;
  uint32_t a_row_ok = 0;  // bit i: copy i's row is inside A
#pragma unroll
  for (int i = 0; i < A_PER_THREAD; ++i)
    if (m0 + (i * A_RSTEP) % BM + a_row < m) a_row_ok |= 1u << i;
  const int b_cols_valid = max(0, min(B_VEC, n - (n0 + b_col)));  // of this thread's B piece
  const int64_t a_rstep = int64_t(A_RSTEP) * lda;
  const int64_t b_rstep = int64_t(B_RSTEP) * ldb;
  // Running sources of the next tile to copy (advanced by one tile per load_tile).
  // Split-K (gridDim.y > 1): this block multiplies K tiles [kt_begin, kt_end) only.
  const int k_tiles_all = (k + BK - 1) / BK;
  const int kt_begin = blockIdx.y * k_tiles_per_split;
  const int kt_end = min(k_tiles_all, kt_begin + k_tiles_per_split);
  const float* a_next = a + int64_t(m0 + a_row) * lda + a_col + int64_t(kt_begin) * BK;
  const float* b_next = b + int64_t(b_row + int64_t(kt_begin) * BK) * ldb + n0 + b_col;
  const bool rows_inside = m0 + BM <= m;
  const bool cols_inside = n0 + BN <= n;

  const uint32_t as_base =
      smem_u32(As) + 4u * uint32_t(kAKMajor ? a_row * Cfg::AKM_STRIDE + a_col : a_col * Cfg::A_STRIDE + a_row);
  const uint32_t bs_base = smem_u32(Bs) + 4u * uint32_t(b_row * Cfg::B_STRIDE + b_col);

  auto load_tile = [&](int k0, int stage) {
    const uint32_t as_stage = as_base + 4u * uint32_t(stage * A_STAGE);
    const uint32_t bs_stage = bs_base + 4u * uint32_t(stage * Cfg::B_STAGE);
    const bool k_inside = k0 + BK <= k;
    if constexpr (kAKMajor) {
      if (rows_inside && k_inside) {
#pragma unroll
        for (int i = 0; i < A_PER_THREAD; ++i)
          ptx::cp_async_16<kCpFence>(as_stage + 4u * uint32_t(i * A_RSTEP * Cfg::AKM_STRIDE), a_next + i * a_rstep, 16);
      } else {
        const int k_valid = max(0, min(4, k - (k0 + a_col)));  // of this thread's chunk
#pragma unroll
        for (int i = 0; i < A_PER_THREAD; ++i) {
          const bool ok = ((a_row_ok >> i) & 1u) && k_valid > 0;
          ptx::cp_async_16<kCpFence>(as_stage + 4u * uint32_t(i * A_RSTEP * Cfg::AKM_STRIDE),
                                     ok ? a_next + i * a_rstep : a, ok ? 4 * k_valid : 0);
        }
      }
    } else if (rows_inside && k_inside) {  // interior: no predicates
#pragma unroll
      for (int i = 0; i < A_PER_THREAD; ++i) {
        const int r = (i * A_RSTEP) % BM, kh = 8 * ((i * A_RSTEP) / BM);
        ptx::cp_async_4<kCpFence>(as_stage + 4u * uint32_t(kh * Cfg::A_STRIDE + r),
                                  a_next + (r / A_RSTEP) * a_rstep + kh, 4);
      }
    } else {
#pragma unroll
      for (int i = 0; i < A_PER_THREAD; ++i) {
        const int r = (i * A_RSTEP) % BM, kh = 8 * ((i * A_RSTEP) / BM);
        const bool ok = ((a_row_ok >> i) & 1u) && (k0 + kh + a_col < k);
        const float* src = ok ? a_next + (r / A_RSTEP) * a_rstep + kh : a;
        ptx::cp_async_4<kCpFence>(as_stage + 4u * uint32_t(kh * Cfg::A_STRIDE + r), src, ok ? 4 : 0);
      }
    }
    if (cols_inside && k_inside) {
#pragma unroll
      for (int i = 0; i < B_PER_THREAD; ++i) {
        const uint32_t dst = bs_stage + 4u * uint32_t(i * B_RSTEP * Cfg::B_STRIDE);
        if constexpr (kVectorized)
          ptx::cp_async_16<kCpFence>(dst, b_next + i * b_rstep, 16);
        else
          ptx::cp_async_4<kCpFence>(dst, b_next + i * b_rstep, 4);
      }
    } else {
#pragma unroll
      for (int i = 0; i < B_PER_THREAD; ++i) {
        const uint32_t dst = bs_stage + 4u * uint32_t(i * B_RSTEP * Cfg::B_STRIDE);
        const int valid = (k0 + i * B_RSTEP + b_row < k) ? b_cols_valid : 0;
        const float* src = valid > 0 ? b_next + i * b_rstep : b;
        if constexpr (kVectorized)
          ptx::cp_async_16<kCpFence>(dst, src, 4 * valid);
        else
          ptx::cp_async_4<kCpFence>(dst, src, 4 * valid);
      }
    }
    a_next += BK;
    b_next += int64_t(BK) * ldb;
  };

  float acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

  const int k_tiles = max(0, kt_end - kt_begin);

  // ---- prologue: fill STAGES-1 stages ----
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < k_tiles) load_tile((kt_begin + s) * BK, s);
    cp_async_commit();
  }

  // Offsets (floats) of this thread's fragments inside a stage.
  const int a_frag_off = kAKMajor ? (warp_m * Cfg::WM + lane_m) * Cfg::AKM_STRIDE : warp_m * Cfg::WM + lane_m * 4;
  const int b_frag_off = warp_n * Cfg::WN + lane_n * 4;

  float b_frag[2][TN];

  for (int kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();  // tile kt is visible to all; stage (kt-1)%STAGES is free for reuse
    {
      const int next = kt + STAGES - 1;
      if (next < k_tiles) load_tile((kt_begin + next) * BK, next % STAGES);
      cp_async_commit();
    }
    const int stage = kt % STAGES;
    const float* as = As + stage * A_STAGE + a_frag_off;
    const float* bs = Bs + stage * Cfg::B_STAGE + b_frag_off;
    // B's fragment of step kk into buffer buf: TN floats in TN / 4 16-byte loads.
    auto load_b_frag = [&](int kk, int buf) {
#pragma unroll
      for (int j = 0; j < TN / 4; ++j) {
        const float4 v = *reinterpret_cast<const float4*>(bs + kk * Cfg::B_STRIDE + j * TWN * 4);
        b_frag[buf][4 * j + 0] = v.x;
        b_frag[buf][4 * j + 1] = v.y;
        b_frag[buf][4 * j + 2] = v.z;
        b_frag[buf][4 * j + 3] = v.w;
      }
    };

    if constexpr (kAKMajor) {
      // A: one 16-byte chunk (4 k) per row, reloaded row by row as the 4th k of a chunk
      // finishes with it; B: ping-pong per k as below.
      float a_chunk[TM][4];
      auto load_a_chunk = [&](int i, int q) {
        const float4 v = *reinterpret_cast<const float4*>(as + i * TWM * Cfg::AKM_STRIDE + q * 4);
        a_chunk[i][0] = v.x;
        a_chunk[i][1] = v.y;
        a_chunk[i][2] = v.z;
        a_chunk[i][3] = v.w;
      };
#pragma unroll
      for (int i = 0; i < TM; ++i) load_a_chunk(i, 0);
      load_b_frag(0, 0);
#pragma unroll
      for (int kk = 0; kk < BK; ++kk) {
        if (kk + 1 < BK) load_b_frag(kk + 1, (kk + 1) & 1);
#pragma unroll
        for (int i = 0; i < TM; ++i) {
#pragma unroll
          for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a_chunk[i][kk & 3], b_frag[kk & 1][j], acc[i][j]);
          if ((kk & 3) == 3 && kk + 1 < BK) load_a_chunk(i, (kk + 1) / 4);
        }
      }
    } else {
      float a_frag[2][TM];
      auto load_frag = [&](int kk, int buf) {
#pragma unroll
        for (int i = 0; i < TM / 4; ++i) {
          const float4 v = *reinterpret_cast<const float4*>(as + kk * Cfg::A_STRIDE + i * TWM * 4);
          a_frag[buf][4 * i + 0] = v.x;
          a_frag[buf][4 * i + 1] = v.y;
          a_frag[buf][4 * i + 2] = v.z;
          a_frag[buf][4 * i + 3] = v.w;
        }
        load_b_frag(kk, buf);
      };
      load_frag(0, 0);
#pragma unroll
      for (int kk = 0; kk < BK; ++kk) {
        if (kk + 1 < BK) load_frag(kk + 1, (kk + 1) & 1);  // ping-pong: next step's fragments
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
          for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a_frag[kk & 1][i], b_frag[kk & 1][j], acc[i][j]);
      }
    }
  }
  cp_async_wait<0>();  // nothing useful is left in flight, but leave no copy behind

  if constexpr (kClusterReduce) {
    // Split-K reduced inside a thread-block cluster of the gridDim.y splits of one
    // tile (launched with cluster dims (1, gridDim.y, 1)): splits 1..S-1 leave their
    // accumulators in their own shared memory, split 0 adds them in split order
    // through distributed shared memory and runs the normal epilogue. No workspace,
    // no second launch, bitwise reproducible.
    static_assert(Cfg::TM * Cfg::TN * Cfg::THREADS * int(sizeof(float)) <= Cfg::SMEM_BYTES,
                  "the cluster reduction keeps a block's accumulators in its pipeline's shared memory");
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    const unsigned rank = cluster.block_rank();
    __syncthreads();  // every warp is done with the pipeline's stages
    if (rank != 0) {
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) smem[(i * TN + j) * THREADS + tid] = acc[i][j];
    }
    cluster.sync();
    if (rank == 0) {
      for (unsigned r = 1; r < cluster.num_blocks(); ++r) {
        const float* remote = cluster.map_shared_rank(smem, r);
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
          for (int j = 0; j < TN; ++j) acc[i][j] += remote[(i * TN + j) * THREADS + tid];
      }
    }
    cluster.sync();  // the other splits' shared memory stays alive until split 0 has read it
    if (rank != 0) return;
  }

  // ---- epilogue: C = alpha*acc + beta*C, float4 where possible ----
  // Row of accumulator row i inside the block tile.
  auto row_in_tile = [&](int i) {
    return kAKMajor ? warp_m * Cfg::WM + i * TWM + lane_m : warp_m * Cfg::WM + (i / 4) * TWM * 4 + lane_m * 4 + (i % 4);
  };
  const bool full_block = (m0 + BM <= m) && (n0 + BN <= n);
  if (!kClusterReduce && gridDim.y > 1 && workspace != nullptr) {
    // Deterministic split-K: alpha * partial into this split's workspace slice
    // (ldw is a multiple of 4 and the slice 16-byte aligned: whole float4 stores;
    // columns in [n, ldw) receive zeros, never read back).
    float* slice = workspace + int64_t(blockIdx.y) * m * ldw;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const int row = m0 + row_in_tile(i);
      if (row >= m) continue;
      float* wrow = slice + int64_t(row) * ldw;
#pragma unroll
      for (int j4 = 0; j4 < TN / 4; ++j4) {
        const int col = n0 + warp_n * Cfg::WN + j4 * TWN * 4 + lane_n * 4;
        if (col < ldw)
          *reinterpret_cast<float4*>(wrow + col) = make_float4(alpha * acc[i][4 * j4 + 0], alpha * acc[i][4 * j4 + 1],
                                                               alpha * acc[i][4 * j4 + 2], alpha * acc[i][4 * j4 + 3]);
      }
    }
    return;
  }
  if (!kClusterReduce && gridDim.y > 1) {
    // Atomic split-K: the launcher has already made C = beta*C; each split adds its part.
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const int row = m0 + row_in_tile(i);
      if (row >= m) continue;
      float* crow = c + int64_t(row) * ldc;
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        const int col = n0 + warp_n * Cfg::WN + (j / 4) * TWN * 4 + lane_n * 4 + (j % 4);
        if (col < n) atomicAdd(crow + col, alpha * acc[i][j]);
      }
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int row = m0 + row_in_tile(i);
    if (!full_block && row >= m) continue;
    float* crow = c + int64_t(row) * ldc;
#pragma unroll
    for (int j4 = 0; j4 < TN / 4; ++j4) {
      const int col = n0 + warp_n * Cfg::WN + j4 * TWN * 4 + lane_n * 4;
      float4 r = make_float4(alpha * acc[i][4 * j4 + 0], alpha * acc[i][4 * j4 + 1], alpha * acc[i][4 * j4 + 2],
                             alpha * acc[i][4 * j4 + 3]);
      SGEMM_EPILOGUE_STORE4(crow, col, n, r, beta, kVectorized && (full_block || col + 3 < n));
    }
  }
}

// C = beta * C over an m x n row-major matrix (ldc), before split-K partial sums
// are added into it. One thread per element; grid-stride over rows.
__global__ void scale_matrix_kernel(int m, int n, float beta, float* __restrict__ c, int64_t ldc) {
  for (int64_t row = blockIdx.y; row < m; row += gridDim.y) {
    for (int col = blockIdx.x * blockDim.x + threadIdx.x; col < n; col += gridDim.x * blockDim.x) {
      c[row * ldc + col] *= beta;
    }
  }
}

// Deterministic split-K reduction: C = (w[0] + w[1] + ... + w[S-1]) + beta*C, with
// w[s] the m x ldw slices of the workspace (already scaled by alpha), summed in
// slice order. kVectorized: 4 columns per thread with float4 (C 16-byte aligned,
// ldc % 4 == 0); else 1. Threads stride over columns (x) and rows (y).
template <bool kVectorized>
__global__ void splitk_reduce_kernel(int m, int n, int splits, const float* __restrict__ workspace, int64_t ldw,
                                     float beta, float* __restrict__ c, int64_t ldc) {
  constexpr int V = kVectorized ? 4 : 1;
  const int64_t slice = int64_t(m) * ldw;
  for (int64_t row = blockIdx.y; row < m; row += gridDim.y) {
    for (int col = (blockIdx.x * blockDim.x + threadIdx.x) * V; col < n; col += gridDim.x * blockDim.x * V) {
      const float* w = workspace + row * ldw + col;
      float* crow = c + row * ldc + col;
      if constexpr (kVectorized) {
        float4 sum = *reinterpret_cast<const float4*>(w);
        for (int s = 1; s < splits; ++s) {
          const float4 v = *reinterpret_cast<const float4*>(w + s * slice);
          sum.x += v.x;
          sum.y += v.y;
          sum.z += v.z;
          sum.w += v.w;
        }
        if (col + 3 < n) {
          if (beta != 0.0f) {
            const float4 old = *reinterpret_cast<const float4*>(crow);
            sum.x = fmaf(beta, old.x, sum.x);
            sum.y = fmaf(beta, old.y, sum.y);
            sum.z = fmaf(beta, old.z, sum.z);
            sum.w = fmaf(beta, old.w, sum.w);
          }
          *reinterpret_cast<float4*>(crow) = sum;
        } else {
          const float v[4] = {sum.x, sum.y, sum.z, sum.w};
          for (int q = 0; q < 4 && col + q < n; ++q) crow[q] = beta != 0.0f ? fmaf(beta, crow[q], v[q]) : v[q];
        }
      } else {
        float sum = w[0];
        for (int s = 1; s < splits; ++s) sum += w[s * slice];
        crow[0] = beta != 0.0f ? fmaf(beta, crow[0], sum) : sum;
      }
    }
  }
}

}  // namespace sgemm::pingpong
