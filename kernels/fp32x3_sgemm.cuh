// fp32x3 SGEMM: fp32-accurate C = alpha*A*B + beta*C on Hopper tensor cores
// (wgmma, TF32 inputs, fp32 accumulation) by the 3xTF32 scheme:
//   x = hi + lo, hi = rn_tf32(x), lo = rn_tf32(x - hi)      (round to nearest, ties away)
//   A*B ~= A_lo*B_hi + A_hi*B_lo + A_hi*B_hi                 (A_lo*B_lo, ~2^-22, dropped)
// for row-major A (m x k), B (k x n), C (m x n) with leading dimensions.
//
// Two kernels, launched back to back by kernels/fp32x3_sgemm.cu:
//  1. fp32x3_split_kernel: splits B (and A, unless kernel 2 splits A itself, see below)
//     once per element into tf32 hi/lo planes in the caller's workspace, K-major for
//     both (A as is, B transposed, which tf32 wgmma needs: it has no transposed-operand
//     mode for 32-bit types):
//       A planes  [2][m][kp]   (hi, lo), kp = k rounded up to 4 (16-byte rows for TMA)
//       Bt planes [2][n][kp]
//     Any lda/ldb and any alignment of A and B are accepted here, so the GEMM kernel
//     always gets a layout the bulk tensor copy (TMA) can describe.
//  2. fp32x3_gemm_kernel: persistent, warp-specialized, 384 threads (3 warp groups):
//     warp group 0 is the producer (one thread issues TMA bulk tensor copies into a
//     kStages-deep shared-memory ring, completion on mbarriers; the group gives up
//     registers with setmaxnreg), warp groups 1 and 2 are consumers (setmaxnreg up)
//     issuing wgmma.m64nNk8.f32.tf32.tf32 from shared memory (SS, 128-byte swizzle).
//     Stage = one BK = 32 slice of K (one 128-byte swizzle row of fp32) of the hi and
//     lo planes of A's BM rows and of Bt's BN rows (3D TMA box {32, rows, 2}).
//     Per k8 step and m64 block: 3 wgmmas (lo*hi, hi*lo, hi*hi) into one accumulator.
//   Schedules (Cfg::kPingpong):
//     ping-pong   : each consumer owns whole BM x BN tiles, alternating (tile j of this
//                   CTA goes to consumer j % 2); two named barriers order their
//                   mainloops, so one consumer's epilogue overlaps the other's math.
//     cooperative : both consumers share each tile, 64 rows (kWgM) each.
//   Promotion (Cfg::kPromoteEvery = P > 0): the wgmma accumulator restarts every P
//     k-blocks (scale-d = 0) and is added into an fp32 register sum with FADD (round to
//     nearest). The tensor core's own fp32 accumulation is not round-to-nearest; this
//     bounds how many of its additions any partial sum sees (needed for long K).
//   Clusters (Cfg::kClusterM = 2): the two CTAs of a cluster take vertically adjacent
//     tiles with the same B columns; each loads half of B's rows and multicasts it to
//     both, so L2 serves 3/4 of the bytes per stage. A stage is free again only when the
//     consumers of both CTAs released it (they arrive on both CTAs' empty barriers).
//   Tile order: work units (kClusterM tile rows x 1 tile column) rasterized in groups of
//     kGroupM unit rows; cluster c takes units c, c + #clusters, ...
//   Split K (kb_per_split < k_blocks): each tile's K is cut into slices of kb_per_split
//     k-blocks (the last may be shorter) and every (slice, tile) pair is a work unit, slice
//     major, so the CTAs of one wave read the same K range of B. Slice s writes its own
//     partial product, alpha and beta as passed (the launcher passes 1 and 0), to
//     c + s * split_stride; fp32x3_reduce_splits_kernel sums the slices pairwise.
//   Launch chain: kernel 1 starts a product as any kernel does. On short products the
//     launcher (kDependentLaunchMaxFlops) launches the GEMM kernel, the reduction and the
//     fallback (below) as programmatic dependents (ptx_sm90.cuh): each may be placed
//     while its predecessor drains, sets up what needs no memory (barriers), then waits
//     for the predecessor's grid before reading anything, which hides the few
//     microseconds between dependent launches. Every kernel waits whichever way it was
//     launched (the wait is a no-op without the attribute).
//   Edges: TMA zero-fills rows >= m (n) and k >= K, so any m, n, k >= 1 run; the
//     epilogue (straight from registers, float2 where C allows) stores in-range elements
//     only and reads C only when beta != 0.
//   Split of A in the kernel (Cfg::kSplitAInKernel): where TMA can describe A itself
//     (16-byte aligned base, lda a multiple of 4), A is copied raw (one 128-byte-swizzled
//     fp32 plane, half the bytes) and each consumer loads its register fragments of A
//     from shared memory, splits them into hi/lo once per tile and k-block, and issues
//     the register-A form of wgmma; only B goes through kernel 1. Software-pipelined:
//     k-block kb+1's fragments are loaded and split while kb's wgmmas run. The split
//     rounds with integer operations (Cfg::kAluRound, tf32_split_alu; same values as
//     cvt.rna, 7-11% faster kernel). Otherwise (A not TMA-describable) the launcher
//     falls back to splitting A in kernel 1 too.
// Tiling of the picked variants (fp32x3_sgemm.cu): 128 x 128 tiles, cooperative, 64 rows
// per consumer, BK = 32, 3 stages of 64 KB (A planes) or 4 of 48 KB (raw A, raster groups
// of 16 tile rows), promotion every k-block; registers per consumer thread: 64
// accumulators + 64 sums (+ 64 fragment registers when A is split in the kernel).
// Accepted: m, n, k in [1, 2^31), lda >= k, ldb >= n, ldc >= n (fp32x3_can_implement).
// sm_90a only (wgmma, setmaxnreg).
#pragma once

#include <cuda.h>  // CUtensorMap (type only; the driver is reached through the runtime)
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/ptx_sm90.cuh"

namespace sgemm::fp32x3 {

constexpr int kBK = 32;             // k per stage: one 128-byte swizzle row of fp32
constexpr int kRowBytes = kBK * 4;  // 128
// setmaxnreg of the two consumer warp groups and of the producer. The consumers' increase
// waits until the producer's decrease has freed registers, and the pool is what the CTA got
// at launch (384 threads x 168, __launch_bounds__(384, 1)), not the SM's 64K: a sum past it
// leaves the consumers waiting forever.
constexpr int kConsumerRegs = 232;
constexpr int kProducerRegs = 40;
constexpr int kLaunchRegs = 168;
static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= 384 * kLaunchRegs,
              "the consumers' setmaxnreg.inc must be met by what the producer gives up");

template <int kWgM_, int kBN_, int kStages_, bool kPingpong_, int kPromoteEvery_, int kClusterM_ = 1,
          bool kSplitAInKernel_ = false, bool kAluRound_ = true, int kGroupM_ = 8>
struct Fp32x3Config {
  static constexpr int kWgM = kWgM_;  // rows of C per consumer warp group per tile
  static constexpr int kBN = kBN_;    // columns of C per tile
  static constexpr int kStages = kStages_;
  static constexpr bool kPingpong = kPingpong_;
  static constexpr int kPromoteEvery = kPromoteEvery_;  // k-blocks per wgmma accumulation run; 0: whole K
  static constexpr int kClusterM = kClusterM_;          // CTAs of a cluster (consecutive tile rows) sharing B tiles
  // A is copied raw (fp32) and split by the consumers, in registers, for wgmma's
  // register-A form; only B goes through the split pass.
  static constexpr bool kSplitAInKernel = kSplitAInKernel_;
  // The in-kernel split rounds with integer operations (tf32_split_alu), not with
  // cvt.rna.tf32.f32: the same values, measured 7% faster (docs/kernels.md).
  static constexpr bool kAluRound = kAluRound_;
  static constexpr int kGroupM = kGroupM_;
  static constexpr int kBM = kPingpong ? kWgM : 2 * kWgM;  // rows of a tile
  static constexpr int kThreads = 384;
  static constexpr int kMmaM = kWgM / 64;                                      // m64 wgmmas per k8 step
  static constexpr int kAccRegs = kBN / 2;                                     // fp32 per thread per m64 block
  static constexpr int kABytes = (kSplitAInKernel ? 1 : 2) * kBM * kRowBytes;  // raw, or hi + lo planes
  static constexpr int kBBytes = 2 * kBN * kRowBytes;
  static constexpr int kStageBytes = kABytes + kBBytes;
  // Warps releasing a stage: each consuming warp of every CTA of the cluster (B is multicast).
  static constexpr int kConsumerArrivals = (kPingpong ? 4 : 8) * kClusterM;
  static constexpr int kBBoxRows = kBN / kClusterM;  // B rows each CTA of a cluster loads (and multicasts)
  // 1024 bytes of slack to align the ring to the 128-byte swizzle's 1024-byte period.
  static constexpr int kSmemBytes = kStages * kStageBytes + 2 * kStages * 8 + 1024;

  static_assert(kWgM == 64 || kWgM == 128, "a consumer warp group covers one or two m64 wgmma rows");
  static_assert(kBN == 128 || kBN == 256, "wgmma wrappers exist for n = 128 and n = 256");
  static_assert(kBM <= 256 && kBN <= 256, "a TMA box dimension is at most 256 rows");
  static_assert(kStages >= 2, "the ring needs two stages to overlap copies with math");
  static_assert(kSmemBytes <= 227 * 1024, "the ring must fit an SM's 227 KB of shared memory");
  static_assert(kMmaM * kAccRegs * (kPromoteEvery > 0 ? 2 : 1) <= 160,
                "accumulators (twice as many when promoting) must leave registers for addresses");
  static_assert(kStageBytes % 1024 == 0, "each stage must keep the 1024-byte swizzle alignment");
  static_assert(kClusterM == 1 || kClusterM == 2, "clusters of one or two CTAs along M");
  static_assert(!kSplitAInKernel || kPromoteEvery >= 1,
                "the in-kernel split of A is written for promoted accumulation");
  static_assert(!kSplitAInKernel || kBN == 128, "the register-A wgmma wrapper exists for n = 128");
  static_assert(kBBoxRows % 8 == 0, "a multicast share of B must be whole 8-row swizzle atoms");
};

// ---------------------------------------------------------------------------------
// Split into tf32 hi/lo planes (kernel 1).

__device__ __forceinline__ float tf32_round_nearest(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return __uint_as_float(r & 0xffffe000u);
}

// The same split with integer operations: hi = x's bits plus half a tf32 ulp, truncated
// (round to nearest, ties away, as cvt.rna); inf and NaN pass through with lo = 0; x - hi
// is exact and finite, so lo needs no such check. ptxas expands cvt.rna.tf32.f32 into
// about the same operations, but schedules this form better in the fragment loop.
__device__ __forceinline__ void tf32_split_alu(float x, uint32_t& hi, uint32_t& lo) {
  const uint32_t b = __float_as_uint(x);
  const uint32_t h = (b & 0x7f800000u) != 0x7f800000u ? (b + 0x1000u) & 0xffffe000u : b;
  hi = h;
  lo = isfinite(__uint_as_float(h)) ? (__float_as_uint(x - __uint_as_float(h)) + 0x1000u) & 0xffffe000u : 0u;
}

// The split pass walks its operands in tiles of kSplitRows x kSplitCols elements with
// 32 x 8 threads, four float4 per thread: where an operand's rows are 16-byte aligned
// each float4 is one load (else element by element), and a thread issues its four loads
// before it uses any, so that a memory-bound pass has enough bytes in flight per SM.
// 64 x 64 measured best of 32 x 128, 64 x 64 and 128 x 32, tiles numbered along rows or
// down columns (one H200: the pass 16-20% faster than 32 x 32 tiles of one float each).
constexpr int kSplitRows = 64, kSplitCols = 64, kSplitThreads = 256;
constexpr int kSplitQuads = kSplitRows * kSplitCols / 4 / kSplitThreads;  // float4 per thread
static_assert(kSplitThreads % (kSplitCols / 4) == 0 && kSplitThreads % (kSplitRows / 4) == 0,
              "a thread's float4 of a tile share one column (and, transposed, one row) of float4");

__device__ __forceinline__ void split_value(float v, float& hi, float& lo, bool& saw_inf) {
  saw_inf |= isinf(v);
  hi = tf32_round_nearest(v);
  lo = isfinite(hi) ? tf32_round_nearest(v - hi) : 0.0f;
}

// Four elements of row r from column c (c % 4 == 0); outside rows x cols they are 0.
__device__ __forceinline__ float4 load_four(const float* __restrict__ x, int64_t ldx, int rows, int cols, int r, int c,
                                            bool vec) {
  float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (r >= rows) return v;
  const float* p = x + int64_t(r) * ldx + c;
  if (vec && c + 3 < cols) return __ldg(reinterpret_cast<const float4*>(p));
  if (c < cols) v.x = p[0];
  if (c + 1 < cols) v.y = p[1];
  if (c + 2 < cols) v.z = p[2];
  if (c + 3 < cols) v.w = p[3];
  return v;
}

// Stores v[0 .. min(n, 4)) at q, 16-byte aligned.
__device__ __forceinline__ void store_four(float* __restrict__ q, const float (&v)[4], int n) {
  if (n >= 4) {
    *reinterpret_cast<float4*>(q) = make_float4(v[0], v[1], v[2], v[3]);
    return;
  }
  if (n > 0) q[0] = v[0];  // constant indices keep v in registers
  if (n > 1) q[1] = v[1];
  if (n > 2) q[2] = v[2];
}

// Splits the tile of x (rows x cols, ld ldx) at (r0, c0): hi to out[i], lo to
// out[plane + i], where i = r * ldo + c, or c * ldo + r when `transpose` (through a
// padded shared tile, so that both the reads and the writes are whole lines). Where out
// is null it only looks for infinities. ldo and plane are multiples of 4 and out is
// 16-byte aligned; nothing outside rows x cols is written.
__device__ __forceinline__ void split_tile(const float* __restrict__ x, int64_t ldx, int rows, int cols, int r0, int c0,
                                           bool vec, bool transpose, float* __restrict__ out, int64_t ldo,
                                           int64_t plane, float (&tile)[kSplitRows][kSplitCols + 1], bool& saw_inf) {
  // Thread id's float4 i is at row id / kRowQuads + i * kRowStep, column 4 * (id % kRowQuads).
  constexpr int kRowQuads = kSplitCols / 4, kRowStep = kSplitThreads / kRowQuads;
  const int id = threadIdx.x + 32 * threadIdx.y, lr = id / kRowQuads, lc = 4 * (id % kRowQuads), c = c0 + lc;
  float4 v[kSplitQuads];
#pragma unroll
  for (int i = 0; i < kSplitQuads; ++i) v[i] = load_four(x, ldx, rows, cols, r0 + lr + i * kRowStep, c, vec);
  if (!transpose) {
    if (out == nullptr || c >= cols) {  // only looking for infinities (or no column of this thread's)
#pragma unroll
      for (int i = 0; i < kSplitQuads; ++i) saw_inf |= isinf(v[i].x) || isinf(v[i].y) || isinf(v[i].z) || isinf(v[i].w);
      return;
    }
#pragma unroll
    for (int i = 0; i < kSplitQuads; ++i) {
      const float in[4] = {v[i].x, v[i].y, v[i].z, v[i].w};
      float hi[4], lo[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) split_value(in[e], hi[e], lo[e], saw_inf);
      const int r = r0 + lr + i * kRowStep;
      if (r >= rows) continue;
      const int64_t at = int64_t(r) * ldo + c;
      store_four(out + at, hi, cols - c);
      store_four(out + plane + at, lo, cols - c);
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < kSplitQuads; ++i) {
    float* at = &tile[lr + i * kRowStep][lc];
    at[0] = v[i].x, at[1] = v[i].y, at[2] = v[i].z, at[3] = v[i].w;
  }
  __syncthreads();
  // Output row oc (column `col` of the tile) gets the tile's kSplitRows values as float4;
  // consecutive threads take consecutive float4 of a row: thread id's float4 j is
  // at column id / kColQuads + j * kColStep, rows from 4 * (id % kColQuads).
  constexpr int kColQuads = kSplitRows / 4, kColStep = kSplitThreads / kColQuads;
  const int q = 4 * (id % kColQuads), r = r0 + q, oc0 = id / kColQuads;
#pragma unroll
  for (int j = 0; j < kSplitQuads; ++j) {
    const int col = oc0 + j * kColStep, oc = c0 + col;
    float hi[4], lo[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) split_value(tile[q + e][col], hi[e], lo[e], saw_inf);
    if (oc < cols && r < rows) {
      const int64_t at = int64_t(oc) * ldo + r;
      store_four(out + at, hi, rows - r);
      store_four(out + plane + at, lo, rows - r);
    }
  }
  __syncthreads();
}

// Infinities in the operands (see "Infinities" below) are reported through an InfMark:
// a word in the workspace and this launch's value for it. A pass that sees an infinity
// writes the value; a later pass reads "raised" when the word holds it. A word left by an
// earlier launch holds another value, so the word needs no clearing (no extra launch); a
// word that held this value by chance would only send the product to the fallback, which
// computes it correctly.
// Two writers: the split pass writes `value`, which is final before the GEMM kernel starts,
// so every thread of it reads the same answer (raised()); the GEMM kernel itself, looking at
// A's fragments (kCheckA), writes value ^ 1 while other CTAs may be starting, and only the
// kernels after it read that (raised_anywhere()). Values are even, so value ^ 1 is never
// another launch's value.
struct InfMark {
  unsigned long long* word;
  unsigned long long value;
  __device__ __forceinline__ void raise() const { *word = value; }
  __device__ __forceinline__ void raise_in_gemm() const { *word = value ^ 1ull; }
  __device__ __forceinline__ bool raised() const { return *word == value; }
  __device__ __forceinline__ bool raised_anywhere() const {
    const unsigned long long w = *word;
    return w == value || w == (value ^ 1ull);
  }
};

// One launch for both operands: blockIdx.z == 0 splits A (m x k) into [2][m][kp], or where
// a_planes is null (A is split in the GEMM kernel) only looks for infinities in it;
// blockIdx.z == 1 splits B (k x n) into Bt planes [2][n][kp]. first_operand = 1 with one
// z-slice splits B alone (B prepared once for many products); one z-slice with
// first_operand = 0 does A alone, and then raises `inf` also where `b_prepared` (the
// prepared B's mark; word null: none) is raised. Each operand's tiles (split_tile)
// are numbered row by row and walked with a grid stride (one grid serves both operands,
// whatever their shapes).
__global__ void __launch_bounds__(kSplitThreads)
    fp32x3_split_kernel(const float* __restrict__ a, int64_t lda, int m, const float* __restrict__ b, int64_t ldb,
                        int n, int k, float* __restrict__ a_planes, float* __restrict__ b_planes, int64_t kp,
                        InfMark inf, int first_operand, InfMark b_prepared) {
  __shared__ float tile[kSplitRows][kSplitCols + 1];
  ptx::allow_dependents_launch();  // the GEMM kernel's blocks may be placed (they wait for this grid)
  bool saw_inf = false;
  const bool is_b = blockIdx.z + first_operand == 1;
  const float* x = is_b ? b : a;
  const int64_t ldx = is_b ? ldb : lda;
  const bool vec = (reinterpret_cast<uintptr_t>(x) & 15) == 0 && ldx % 4 == 0;
  const int rows = is_b ? k : m, cols = is_b ? n : k;
  float* out = is_b ? b_planes : a_planes;
  const int64_t plane = int64_t(is_b ? n : m) * kp;
  const int64_t tiles_c = (cols + kSplitCols - 1) / kSplitCols, tiles = (rows + kSplitRows - 1) / kSplitRows * tiles_c;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x)
    split_tile(x, ldx, rows, cols, int(t / tiles_c) * kSplitRows, int(t % tiles_c) * kSplitCols, vec, is_b, out, kp,
               plane, tile, saw_inf);
  // B split earlier (fp32x3_prepare_b): its own mark says whether it held an infinity.
  if (b_prepared.word != nullptr && blockIdx.x == 0 && threadIdx.x == 0 && threadIdx.y == 0 && b_prepared.raised())
    saw_inf = true;
  if (saw_inf) inf.raise();
}

// ---------------------------------------------------------------------------------
// Infinities. 3xTF32 multiplies A_lo * B_hi: where B holds an infinity and A a value that
// TF32 represents exactly (A_lo = 0), that term is 0 * inf = NaN, where SGEMM's a * inf is
// an infinity. So the split pass raises the launch's InfMark when either operand holds an
// infinity (it reads all of A and B, also where the GEMM kernel splits A); the GEMM and
// reduction kernels then return at once, leaving C as it was, and
// fp32x3_ffma_fallback_kernel computes the product with fp32 FMAs (IEEE propagation of
// infinities and NaNs, as SGEMM). It returns at once when the mark is not raised.
// NaN inputs need no fallback: every term with a NaN is a NaN in both schemes.
// Where the GEMM kernel splits A and K is split and long (run_config says where: the slices
// go to the workspace, C is untouched until their sum), the split pass does not read A: the
// GEMM kernel, launched with kCheckA, raises the mark (its own value, InfMark) when a
// fragment of A is an infinity or a NaN, and the sum steps aside for the fallback.

// C = alpha * A * B + beta * C in fp32 FMAs, k in order, for inputs holding an infinity
// (see above); 64 x 64 tiles of C, 16 x 16 threads of 4 x 4 elements each.
__global__ void __launch_bounds__(256)
    fp32x3_ffma_fallback_kernel(const float* __restrict__ a, int64_t lda, const float* __restrict__ b, int64_t ldb,
                                float* __restrict__ c, int64_t ldc, int m, int n, int k, float alpha, float beta,
                                InfMark inf) {
  ptx::grid_dependency_wait();  // the kernels before it have finished (the mark is final)
  if (!inf.raised_anywhere()) return;
  __shared__ float as[16][65], bs[16][65];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int tiles_n = (n + 63) / 64, tiles = ((m + 63) / 64) * tiles_n;
  for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int row0 = (t / tiles_n) * 64, col0 = (t % tiles_n) * 64;
    float acc[4][4] = {};
    for (int k0 = 0; k0 < k; k0 += 16) {
      for (int i = threadIdx.x; i < 16 * 64; i += 256) {
        const int kk = i / 64, rc = i % 64;
        const int ar = row0 + rc, bc = col0 + rc, kx = k0 + kk;
        as[kk][rc] = (ar < m && kx < k) ? a[int64_t(ar) * lda + kx] : 0.0f;
        bs[kk][rc] = (bc < n && kx < k) ? b[int64_t(kx) * ldb + bc] : 0.0f;
      }
      __syncthreads();
      const int kn = min(16, k - k0);
      for (int kk = 0; kk < kn; ++kk)
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(as[kk][ty * 4 + i], bs[kk][tx * 4 + j], acc[i][j]);
      __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int r = row0 + ty * 4 + i, col = col0 + tx * 4 + j;
        if (r >= m || col >= n) continue;
        float* out = c + int64_t(r) * ldc + col;
        const float v = alpha * acc[i][j];
        *out = beta != 0.0f ? fmaf(beta, *out, v) : v;
      }
  }
}

// Split K: C = alpha * (P[0] + P[1] + ... + P[splits-1]) + beta * C over the slices'
// partial products P[s] (m x n, leading dimension n, split_stride floats apart), summed
// pairwise (a balanced tree for a power-of-two count: rounding grows with log2 of the
// count, not with the count, and two halves that cancel cancel exactly) in a fixed order,
// so results are identical run to run; C is read only when beta != 0.
__global__ void __launch_bounds__(256)
    fp32x3_reduce_splits_kernel(const float* __restrict__ partials, int splits, int64_t split_stride, int m, int n,
                                float alpha, float beta, float* __restrict__ c, int64_t ldc, InfMark inf) {
  ptx::grid_dependency_wait();  // the slices' partial products are written
  ptx::allow_dependents_launch();
  if (inf.raised_anywhere()) return;  // the fallback computes C (infinities, above)
  constexpr int kMaxLevels = 32;      // a count below 2^32 slices
  const int64_t total = int64_t(m) * n;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    // Binary-counter pairwise sum: after slice s, stack[l] holds the sum of a complete
    // block of 2^l slices for every bit l set in s + 1.
    float stack[kMaxLevels];
    int depth = 0;
    for (int s = 0; s < splits; ++s) {
      float v = partials[s * split_stride + i];
      for (unsigned done = unsigned(s) + 1u; (done & 1u) == 0u; done >>= 1) v = stack[--depth] + v;
      stack[depth++] = v;
    }
    float sum = stack[--depth];
    while (depth > 0) sum = stack[--depth] + sum;
    float* out = c + (i / n) * ldc + i % n;
    const float v = alpha * sum;
    *out = beta != 0.0f ? fmaf(beta, *out, v) : v;
  }
}

// ---------------------------------------------------------------------------------
// PTX wrappers (kernels/ptx_sm80.cuh, kernels/ptx_sm90.cuh).

using ptx::allow_dependents_launch;
using ptx::cluster_cta_rank;
using ptx::cluster_sync;
using ptx::fence_proxy_async_shared;
using ptx::fence_registers;
using ptx::grid_dependency_wait;
using ptx::lds_f32;
using ptx::mbar_arrive;
using ptx::mbar_arrive_cluster;
using ptx::mbar_arrive_expect_tx;
using ptx::mbar_init;
using ptx::mbar_wait;
using ptx::named_barrier_arrive;
using ptx::named_barrier_sync;
using ptx::setmaxnreg_dec;
using ptx::setmaxnreg_inc;
using ptx::smem_desc_sw128;
using ptx::smem_u32;
using ptx::tma_load_2d;
using ptx::tma_load_3d;
using ptx::tma_load_3d_multicast;
using ptx::tma_prefetch_descriptor;
using ptx::wgmma_commit;
using ptx::wgmma_fence;
using ptx::wgmma_m64n128k8_tf32_rs;
using ptx::wgmma_tf32;
using ptx::wgmma_wait;

// ---------------------------------------------------------------------------------
// The GEMM kernel (kernel 2). tmap_a: A planes {k, m, 2}; tmap_b: Bt planes {k, n, 2}.
// kCheckA: the kernel looks for infinities in A's fragments and raises `inf` (see
// "Infinities"), where the split pass did not read A.
template <class Cfg, bool kCheckA = false>
__global__ void __launch_bounds__(384, 1)
    fp32x3_gemm_kernel(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b, int m,
                       int n, int k_blocks, int kb_per_split, int64_t split_stride, float alpha, float beta,
                       float* __restrict__ c, int64_t ldc, bool c_pairs, InfMark inf) {
  static_assert(!kCheckA || (Cfg::kSplitAInKernel && Cfg::kClusterM == 1),
                "A's fragments are seen where the kernel splits A (written and measured without clusters)");
  allow_dependents_launch();  // the next kernel may be placed where this grid leaves room
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t ring = (raw + 1023u) & ~1023u;                      // stage s at ring + s * kStageBytes
  const uint32_t full_bar = ring + Cfg::kStages * Cfg::kStageBytes;  // kStages x 8 bytes
  const uint32_t empty_bar = full_bar + Cfg::kStages * 8;

  // Work units: with clusters of kClusterM CTAs, a unit is kClusterM consecutive tile
  // rows times one tile column; CTA r of the cluster takes tile row unit * kClusterM + r.
  constexpr int kCl = Cfg::kClusterM;
  const int tiles_m = (m + Cfg::kBM - 1) / Cfg::kBM;
  const int units_m = (tiles_m + kCl - 1) / kCl;
  const int tiles_n = (n + Cfg::kBN - 1) / Cfg::kBN;
  const int tile_units = units_m * tiles_n;
  const int units = tile_units * ((k_blocks + kb_per_split - 1) / kb_per_split);
  const int cta_rank = kCl > 1 ? int(cluster_cta_rank()) : 0;
  const int unit0 = blockIdx.x / kCl, unit_stride = gridDim.x / kCl;
  const int warp_group = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    for (int s = 0; s < Cfg::kStages; ++s) {
      mbar_init(full_bar + 8 * s, 1);
      mbar_init(empty_bar + 8 * s, Cfg::kConsumerArrivals);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    fence_proxy_async_shared();
  }
  // Barriers initialised before any CTA of the cluster signals or fills them.
  if constexpr (kCl > 1) {
    cluster_sync();
  } else {
    __syncthreads();
  }
  grid_dependency_wait();  // kernel 1 has written the planes and the mark
  // Kernel 1's mark (raised(), not what CTAs of this grid raise: InfMark), so every thread
  // of every CTA, and of a cluster, takes the same branch.
  if (inf.raised()) return;  // the fallback computes C (infinities, above)

  // Unit t -> (tile row, tile column) of this CTA, rasterized in groups of kGroupM unit
  // rows, and its K slice: k-blocks [kb0, kb0 + kbn) of slice `split`.
  auto tile_coords = [&](int t, int& tm, int& tn) {
    t %= tile_units;
    const int per_group = Cfg::kGroupM * tiles_n;
    const int first_m = (t / per_group) * Cfg::kGroupM;
    const int group_rows = min(units_m - first_m, Cfg::kGroupM);
    const int in_group = t % per_group;
    tm = (first_m + in_group % group_rows) * kCl + cta_rank;
    tn = in_group / group_rows;
  };
  auto k_slice = [&](int t, int& split, int& kb0, int& kbn) {
    split = t / tile_units;
    kb0 = split * kb_per_split;
    kbn = min(kb_per_split, k_blocks - kb0);
  };

  if (warp_group == 0) {
    // ---------------- producer ----------------
    setmaxnreg_dec<kProducerRegs>();
    if (threadIdx.x == 0) {
      tma_prefetch_descriptor(&tmap_a);
      tma_prefetch_descriptor(&tmap_b);
      uint32_t g = 0;  // k-block counter over all tiles of this CTA
      for (int t = unit0; t < units; t += unit_stride) {
        int tm, tn, split, kb0, kbn;
        tile_coords(t, tm, tn);
        k_slice(t, split, kb0, kbn);
        for (int kb = kb0; kb < kb0 + kbn; ++kb, ++g) {
          const uint32_t s = g % Cfg::kStages;
          const uint32_t phase = (g / Cfg::kStages) & 1u;
          // Free in every CTA of the cluster (B shares are written into all of them).
          mbar_wait(empty_bar + 8 * s, phase ^ 1u);
          const uint32_t stage = ring + s * Cfg::kStageBytes;
          mbar_arrive_expect_tx(full_bar + 8 * s, Cfg::kStageBytes);
          if constexpr (Cfg::kSplitAInKernel) {
            tma_load_2d(stage, &tmap_a, full_bar + 8 * s, kb * kBK, tm * Cfg::kBM);
          } else {
            tma_load_3d(stage, &tmap_a, full_bar + 8 * s, kb * kBK, tm * Cfg::kBM, 0);
          }
          if constexpr (kCl == 1) {
            tma_load_3d(stage + Cfg::kABytes, &tmap_b, full_bar + 8 * s, kb * kBK, tn * Cfg::kBN, 0);
          } else {
            // This CTA's share of B's rows, both planes, into every CTA of the cluster.
            const int share = cta_rank * Cfg::kBBoxRows;
#pragma unroll
            for (int p = 0; p < 2; ++p)
              tma_load_3d_multicast(stage + Cfg::kABytes + (p * Cfg::kBN + share) * kRowBytes, &tmap_b,
                                    full_bar + 8 * s, kb * kBK, tn * Cfg::kBN + share, p, uint16_t((1u << kCl) - 1u));
          }
        }
      }
    }
    if constexpr (kCl > 1) cluster_sync();  // stay until no CTA of the cluster signals this one
    return;
  }

  // ---------------- consumers ----------------
  setmaxnreg_inc<kConsumerRegs>();
  // Releases stage `s` in every CTA of the cluster (one arrival per warp and CTA).
  auto release = [&](uint32_t s) {
    if constexpr (kCl == 1) {
      mbar_arrive(empty_bar + 8 * s);
    } else {
#pragma unroll
      for (int r = 0; r < kCl; ++r) mbar_arrive_cluster(empty_bar + 8 * s, uint32_t(r));
    }
  };
  const int consumer = warp_group - 1;  // 0 or 1
  const int tid = threadIdx.x % 128;
  const int warp = tid / 32, lane = tid % 32;
  // Rows of A (within the tile) this consumer multiplies.
  const int a_row0 = Cfg::kPingpong ? 0 : consumer * Cfg::kWgM;

  float acc[Cfg::kMmaM][Cfg::kAccRegs];
  float sum[Cfg::kMmaM][Cfg::kPromoteEvery > 0 ? Cfg::kAccRegs : 1];

  bool a_nonfinite = false;  // kCheckA: an infinity or NaN of A seen in its fragments
  int j = 0;                 // local tile index in this CTA
  uint32_t g_next = 0;       // the producer's k-block counter at the start of unit t
  for (int t = unit0; t < units; t += unit_stride, ++j) {
    int split, kb0, kbn;
    k_slice(t, split, kb0, kbn);
    const uint32_t g_unit = g_next;
    g_next += uint32_t(kbn);
    if (Cfg::kPingpong && (j & 1) != consumer) continue;
    int tm, tn;
    tile_coords(t, tm, tn);
    // Ping-pong order: wait for the other consumer to have issued its mainloop.
    if (Cfg::kPingpong && j > 0) named_barrier_sync(1 + consumer, 256);

    if constexpr (Cfg::kPromoteEvery > 0) {
#pragma unroll
      for (int mi = 0; mi < Cfg::kMmaM; ++mi)
#pragma unroll
        for (int i = 0; i < Cfg::kAccRegs; ++i) sum[mi][i] = 0.0f;
    }

    uint32_t g = g_unit;
    if constexpr (Cfg::kSplitAInKernel) {
      // Software-pipelined: the fragments of k-block kb+1 are loaded and split while the
      // wgmmas of k-block kb run (two fragment buffers, the loop unrolled by two).
      uint32_t f0_hi[Cfg::kMmaM][kBK / 8][4], f0_lo[Cfg::kMmaM][kBK / 8][4];
      uint32_t f1_hi[Cfg::kMmaM][kBK / 8][4], f1_lo[Cfg::kMmaM][kBK / 8][4];
      auto stage_of = [&](uint32_t gg) { return ring + (gg % Cfg::kStages) * Cfg::kStageBytes; };
      auto wait_full = [&](uint32_t gg) { mbar_wait(full_bar + 8 * (gg % Cfg::kStages), (gg / Cfg::kStages) & 1u); };
      // Register fragments of A (tf32 m64k8 layout: lane holds rows g, g+8 and columns
      // t, t+4 of its warp's 16 rows, g = lane / 4, t = lane % 4), read from the raw
      // 128-byte-swizzled tile (16-byte chunk c of row r sits at chunk c ^ (r % 8)) and
      // split here, once per element and tile.
      auto prep = [&](uint32_t stage, uint32_t(&hi)[Cfg::kMmaM][kBK / 8][4], uint32_t(&lo)[Cfg::kMmaM][kBK / 8][4]) {
        const int g8 = lane >> 2, t4 = lane & 3;
#pragma unroll
        for (int mi = 0; mi < Cfg::kMmaM; ++mi) {
          const uint32_t row0 = stage + (a_row0 + mi * 64 + warp * 16 + g8) * kRowBytes + t4 * 4;
#pragma unroll
          for (int kk = 0; kk < kBK / 8; ++kk) {
            const uint32_t c0 = uint32_t(((2 * kk) ^ g8) << 4), c1 = uint32_t(((2 * kk + 1) ^ g8) << 4);
            const float x[4] = {lds_f32(row0 + c0), lds_f32(row0 + 8 * kRowBytes + c0), lds_f32(row0 + c1),
                                lds_f32(row0 + 8 * kRowBytes + c1)};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              if constexpr (kCheckA) a_nonfinite |= (__float_as_uint(x[i]) & 0x7f800000u) == 0x7f800000u;
              if constexpr (Cfg::kAluRound) {
                tf32_split_alu(x[i], hi[mi][kk][i], lo[mi][kk][i]);
              } else {
                const float h = tf32_round_nearest(x[i]);
                hi[mi][kk][i] = __float_as_uint(h);
                lo[mi][kk][i] = __float_as_uint(isfinite(h) ? tf32_round_nearest(x[i] - h) : 0.0f);
              }
            }
          }
        }
      };
      // One k-block kb (global index gg). Its wgmmas read the fragments `cur`; `nxt` held
      // k-block kb-1's, whose wgmmas may still run unless kb-1 ended a promotion run.
      constexpr int kP = Cfg::kPromoteEvery > 0 ? Cfg::kPromoteEvery : 1;
      auto step = [&](int kb, uint32_t gg, uint32_t(&cur_hi)[Cfg::kMmaM][kBK / 8][4],
                      uint32_t(&cur_lo)[Cfg::kMmaM][kBK / 8][4], uint32_t(&nxt_hi)[Cfg::kMmaM][kBK / 8][4],
                      uint32_t(&nxt_lo)[Cfg::kMmaM][kBK / 8][4]) {
        const bool run_starts = kb % kP == 0;
        const bool run_ends = (kb + 1) % kP == 0 || kb + 1 == kbn;
        const bool has_next = kb + 1 < kbn;
        const uint32_t b_hi = stage_of(gg) + Cfg::kABytes, b_lo = b_hi + Cfg::kBN * kRowBytes;
        // No register fences on acc between wgmmas of a run (ptxas would wait for the run
        // to drain): the wgmma asm statements order themselves against reads of acc.
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kBK / 8; ++kk) {
          const uint64_t db_hi = smem_desc_sw128(b_hi + kk * 32), db_lo = smem_desc_sw128(b_lo + kk * 32);
#pragma unroll
          for (int mi = 0; mi < Cfg::kMmaM; ++mi) {
            // Small terms first; the first wgmma of a promotion run overwrites the accumulator.
            wgmma_m64n128k8_tf32_rs(acc[mi], cur_lo[mi][kk], db_hi, (run_starts && kk == 0) ? 0 : 1);
            wgmma_m64n128k8_tf32_rs(acc[mi], cur_hi[mi][kk], db_lo, 1);
            wgmma_m64n128k8_tf32_rs(acc[mi], cur_hi[mi][kk], db_hi, 1);
          }
        }
        wgmma_commit();
        if (!run_starts) {
          // k-block kb-1 done: its stage and its fragments (nxt) are free.
          wgmma_wait<1>();
#pragma unroll
          for (int mi = 0; mi < Cfg::kMmaM; ++mi)
#pragma unroll
            for (int kk = 0; kk < kBK / 8; ++kk) {
              fence_registers(nxt_hi[mi][kk]);
              fence_registers(nxt_lo[mi][kk]);
            }
          if (lane == 0) release((gg - 1) % Cfg::kStages);
        }
        if (has_next) {
          wait_full(gg + 1);
          prep(stage_of(gg + 1), nxt_hi, nxt_lo);
        }
        if (run_ends) {
          wgmma_wait<0>();
#pragma unroll
          for (int mi = 0; mi < Cfg::kMmaM; ++mi) {
#pragma unroll
            for (int kk = 0; kk < kBK / 8; ++kk) {
              fence_registers(cur_hi[mi][kk]);
              fence_registers(cur_lo[mi][kk]);
            }
            fence_registers(acc[mi]);
#pragma unroll
            for (int i = 0; i < Cfg::kAccRegs; ++i) sum[mi][i] += acc[mi][i];
          }
          if (lane == 0) release(gg % Cfg::kStages);
        }
      };
      wait_full(g);
      prep(stage_of(g), f0_hi, f0_lo);
      for (int kb = 0; kb < kbn; kb += 2) {
        step(kb, g + kb, f0_hi, f0_lo, f1_hi, f1_lo);
        if (kb + 1 < kbn) step(kb + 1, g + kb + 1, f1_hi, f1_lo, f0_hi, f0_lo);
      }
      g += kbn;
    } else {
      for (int kb = 0; kb < kbn; ++kb, ++g) {
        const uint32_t s = g % Cfg::kStages;
        mbar_wait(full_bar + 8 * s, (g / Cfg::kStages) & 1u);
        const uint32_t a_hi = ring + s * Cfg::kStageBytes + a_row0 * kRowBytes;
        const uint32_t a_lo = ring + s * Cfg::kStageBytes + (Cfg::kBM + a_row0) * kRowBytes;
        const uint32_t b_hi = ring + s * Cfg::kStageBytes + Cfg::kABytes;
        const uint32_t b_lo = b_hi + Cfg::kBN * kRowBytes;
        const bool restart =
            Cfg::kPromoteEvery > 0 ? (kb % (Cfg::kPromoteEvery > 0 ? Cfg::kPromoteEvery : 1) == 0) : (kb == 0);
#pragma unroll
        for (int mi = 0; mi < Cfg::kMmaM; ++mi) fence_registers(acc[mi]);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kBK / 8; ++kk) {
#pragma unroll
          for (int mi = 0; mi < Cfg::kMmaM; ++mi) {
            const uint32_t a_off = mi * 64 * kRowBytes + kk * 32;
            const uint64_t da_hi = smem_desc_sw128(a_hi + a_off), da_lo = smem_desc_sw128(a_lo + a_off);
            const uint64_t db_hi = smem_desc_sw128(b_hi + kk * 32), db_lo = smem_desc_sw128(b_lo + kk * 32);
            // Small terms first; the first wgmma of a run overwrites the accumulator.
            wgmma_tf32<Cfg::kBN>(acc[mi], da_lo, db_hi, (restart && kk == 0) ? 0 : 1);
            wgmma_tf32<Cfg::kBN>(acc[mi], da_hi, db_lo, 1);
            wgmma_tf32<Cfg::kBN>(acc[mi], da_hi, db_hi, 1);
          }
        }
        wgmma_commit();
#pragma unroll
        for (int mi = 0; mi < Cfg::kMmaM; ++mi) fence_registers(acc[mi]);

        const bool run_ends = Cfg::kPromoteEvery > 0 &&
                              ((kb + 1) % (Cfg::kPromoteEvery > 0 ? Cfg::kPromoteEvery : 1) == 0 || kb + 1 == kbn);
        if (Cfg::kPromoteEvery > 0) {
          // Stages of this run are released once its wgmmas completed.
          if (run_ends) {
            wgmma_wait<0>();
#pragma unroll
            for (int mi = 0; mi < Cfg::kMmaM; ++mi) {
              fence_registers(acc[mi]);
#pragma unroll
              for (int i = 0; i < Cfg::kAccRegs; ++i) sum[mi][i] += acc[mi][i];
            }
            if (lane == 0) {
              const int run_len = (kb % (Cfg::kPromoteEvery > 0 ? Cfg::kPromoteEvery : 1)) + 1;
              for (int r = 0; r < run_len; ++r) release((g - r) % Cfg::kStages);
            }
          }
        } else {
          // Keep one k-block of wgmmas in flight; release the stage before it.
          wgmma_wait<1>();
          if (kb > 0 && lane == 0) release((g - 1) % Cfg::kStages);
        }
      }
    }  // kSplitAInKernel
    if constexpr (Cfg::kPromoteEvery == 0) {
      wgmma_wait<0>();
#pragma unroll
      for (int mi = 0; mi < Cfg::kMmaM; ++mi) fence_registers(acc[mi]);
      if (lane == 0) release((g - 1) % Cfg::kStages);
    }
    // Let the other consumer start its mainloop while this one stores.
    if (Cfg::kPingpong) named_barrier_arrive(1 + (consumer ^ 1), 256);

      // ---------------- epilogue ----------------
#pragma unroll
    for (int mi = 0; mi < Cfg::kMmaM; ++mi) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = tm * Cfg::kBM + a_row0 + mi * 64 + warp * 16 + (lane >> 2) + 8 * h;
        if (row >= m) continue;
        float* crow = c + int64_t(split) * split_stride + int64_t(row) * ldc;
#pragma unroll
        for (int nb = 0; nb < Cfg::kBN / 8; ++nb) {
          const int col = tn * Cfg::kBN + nb * 8 + (lane & 3) * 2;
          float v0, v1;
          if constexpr (Cfg::kPromoteEvery > 0) {
            v0 = sum[mi][nb * 4 + h * 2];
            v1 = sum[mi][nb * 4 + h * 2 + 1];
          } else {
            v0 = acc[mi][nb * 4 + h * 2];
            v1 = acc[mi][nb * 4 + h * 2 + 1];
          }
          v0 *= alpha;
          v1 *= alpha;
          if (c_pairs && col + 1 < n) {
            float2* p = reinterpret_cast<float2*>(crow + col);
            if (beta != 0.0f) {
              const float2 old = *p;
              v0 = fmaf(beta, old.x, v0);
              v1 = fmaf(beta, old.y, v1);
            }
            *p = make_float2(v0, v1);
          } else {
            if (col < n) crow[col] = beta != 0.0f ? fmaf(beta, crow[col], v0) : v0;
            if (col + 1 < n) crow[col + 1] = beta != 0.0f ? fmaf(beta, crow[col + 1], v1) : v1;
          }
        }
      }
    }
  }
  if constexpr (kCheckA) {
    if (a_nonfinite) inf.raise_in_gemm();  // the fallback computes C
  }
  if constexpr (kCl > 1) cluster_sync();  // the peer may still arrive on this CTA's barriers until here
}

}  // namespace sgemm::fp32x3
