// GEMV-shaped SGEMM: C = alpha*A*B + beta*C when C is a single row (m == 1) or a
// single column (n == 1). Such products do 2 flops per element of the matrix
// operand, so they are bound by memory bandwidth, not by FFMA issue: the kernels
// stream the matrix operand once with coalesced 16-byte loads (4-byte where the
// layout does not allow them) and keep the vector operand in L1/L2.
//
// gemv_row_kernel (m == 1): c[j] = alpha * sum_k a[k] * B[k][j] + beta * c[j].
//   Block: W warps (8 or 32) over the same COLS = 32*V columns (V = 4 with 16-byte
//   loads of B, which needs n % 4 == 0, else 1); warp w takes rows w, w+W, ... of
//   its K range, 8 rows in flight per thread; the W warps' sums are added in warp
//   order through shared memory. Grid: (column blocks, K splits); with more than one
//   split each block stores alpha * partial into its workspace slice and
//   gemv_reduce_kernel adds the slices in slice order (deterministic).
// gemv_col_kernel (n == 1): c[i] = alpha * dot(A[i][:], b[:][0]) + beta * c[i].
//   WPR warps per row (1, 2, 4 or 8, a launch parameter), lanes strided over k
//   (float4 of A and b when A's rows are 16-byte aligned and b is contiguous and
//   aligned), butterfly shuffle sums, then the WPR warp sums in warp order.
// Both are bitwise reproducible run to run (fixed summation order, no atomics).
// Accepted shapes: m == 1 or n == 1 with k >= 1 (see gemv_can_implement).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace sgemm::gemv {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kRowUnroll = 8;  // B rows in flight per thread (gemv_row_kernel)

template <bool kVec, int kRowWarps>
__global__ void __launch_bounds__(32 * kRowWarps)
    gemv_row_kernel(int n, int k, float alpha, const float* __restrict__ a, const float* __restrict__ b, int64_t ldb,
                    float beta, float* __restrict__ c, int k_per_split, float* __restrict__ workspace, int64_t ldw) {
  constexpr int V = kVec ? 4 : 1;  // kVec: n % 4 == 0, so a thread's V columns are all in C or all out
  constexpr int COLS = 32 * V;
  __shared__ float part[kRowWarps][COLS];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int col = blockIdx.x * COLS + lane * V;
  const int kb = blockIdx.y * k_per_split;
  const int ke = min(k, kb + k_per_split);
  const bool inside = col < n;
  float acc[V];
#pragma unroll
  for (int q = 0; q < V; ++q) acc[q] = 0.0f;

  auto load = [&](int64_t r, float(&v)[V]) {
    if constexpr (kVec) {
      const float4 x = __ldcs(reinterpret_cast<const float4*>(b + r * ldb + col));
      v[0] = x.x;
      v[1] = x.y;
      v[2] = x.z;
      v[3] = x.w;
    } else {
      v[0] = __ldcs(b + r * ldb + col);
    }
  };
  if (inside) {
    int kk = kb + warp;
    for (; kk + (kRowUnroll - 1) * kRowWarps < ke; kk += kRowUnroll * kRowWarps) {
      float av[kRowUnroll];
      float bv[kRowUnroll][V];
#pragma unroll
      for (int u = 0; u < kRowUnroll; ++u) {
        av[u] = __ldg(a + kk + u * kRowWarps);
        load(kk + u * kRowWarps, bv[u]);
      }
#pragma unroll
      for (int u = 0; u < kRowUnroll; ++u)
#pragma unroll
        for (int q = 0; q < V; ++q) acc[q] = fmaf(av[u], bv[u][q], acc[q]);
    }
    for (; kk < ke; kk += kRowWarps) {
      float bv[V];
      load(kk, bv);
      const float av = __ldg(a + kk);
#pragma unroll
      for (int q = 0; q < V; ++q) acc[q] = fmaf(av, bv[q], acc[q]);
    }
  }
#pragma unroll
  for (int q = 0; q < V; ++q) part[warp][lane * V + q] = acc[q];
  __syncthreads();
  if (warp != 0 || !inside) return;
#pragma unroll
  for (int q = 0; q < V; ++q) {
    float s = part[0][lane * V + q];
#pragma unroll
    for (int w = 1; w < kRowWarps; ++w) s += part[w][lane * V + q];
    if (gridDim.y > 1) {
      workspace[int64_t(blockIdx.y) * ldw + col + q] = alpha * s;
    } else {
      const float r = alpha * s;
      c[col + q] = beta != 0.0f ? fmaf(beta, c[col + q], r) : r;
    }
  }
}

// c[j] = (w[0][j] + ... + w[S-1][j]) + beta * c[j], slices summed in order.
// Small blocks (the slices are few kilobytes wide) with 8 loads in flight per thread.
constexpr int kReduceThreads = 64;
__global__ void __launch_bounds__(kReduceThreads)
    gemv_reduce_kernel(int n, int splits, const float* __restrict__ workspace, int64_t ldw, float beta,
                       float* __restrict__ c) {
  const int col = blockIdx.x * kReduceThreads + threadIdx.x;
  if (col >= n) return;
  const float* w = workspace + col;
  float s = w[0];
  int i = 1;
  for (; i + 7 < splits; i += 8) {
    float v[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) v[u] = w[int64_t(i + u) * ldw];
#pragma unroll
    for (int u = 0; u < 8; ++u) s += v[u];
  }
  for (; i < splits; ++i) s += w[int64_t(i) * ldw];
  c[col] = beta != 0.0f ? fmaf(beta, c[col], s) : s;
}

template <bool kVec>
__global__ void __launch_bounds__(kThreads)
    gemv_col_kernel(int m, int k, float alpha, const float* __restrict__ a, int64_t lda, const float* __restrict__ b,
                    int64_t ldb, float beta, float* __restrict__ c, int64_t ldc, int warps_per_row) {
  __shared__ float part[kWarps];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int rows_per_block = kWarps / warps_per_row;
  const int row = blockIdx.x * rows_per_block + warp / warps_per_row;
  const int slot = warp % warps_per_row;
  float acc = 0.0f;
  if (row < m) {
    const float* arow = a + int64_t(row) * lda;
    const int step = warps_per_row * 32;
    int kk0 = 0;
    if constexpr (kVec) {
      const int k4 = k / 4;
      float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
      int i = slot * 32 + lane;
      for (; i + 3 * step < k4; i += 4 * step) {
        float4 av[4], bv[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          av[u] = __ldcs(reinterpret_cast<const float4*>(arow) + i + u * step);
          bv[u] = __ldg(reinterpret_cast<const float4*>(b) + i + u * step);
        }
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          s.x = fmaf(av[u].x, bv[u].x, s.x);
          s.y = fmaf(av[u].y, bv[u].y, s.y);
          s.z = fmaf(av[u].z, bv[u].z, s.z);
          s.w = fmaf(av[u].w, bv[u].w, s.w);
        }
      }
      for (; i < k4; i += step) {
        const float4 av = __ldcs(reinterpret_cast<const float4*>(arow) + i);
        const float4 bv = __ldg(reinterpret_cast<const float4*>(b) + i);
        s.x = fmaf(av.x, bv.x, s.x);
        s.y = fmaf(av.y, bv.y, s.y);
        s.z = fmaf(av.z, bv.z, s.z);
        s.w = fmaf(av.w, bv.w, s.w);
      }
      acc = (s.x + s.y) + (s.z + s.w);
      kk0 = 4 * k4;  // the last k % 4 elements, below
    }
    float s1 = 0.0f, s2 = 0.0f;
    int kk = kk0 + slot * 32 + lane;
    for (; kk + step < k; kk += 2 * step) {
      s1 = fmaf(__ldcs(arow + kk), __ldg(b + int64_t(kk) * ldb), s1);
      s2 = fmaf(__ldcs(arow + kk + step), __ldg(b + int64_t(kk + step) * ldb), s2);
    }
    if (kk < k) s1 = fmaf(__ldcs(arow + kk), __ldg(b + int64_t(kk) * ldb), s1);
    acc += s1 + s2;
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) part[warp] = acc;
  __syncthreads();
  if (lane != 0 || slot != 0 || row >= m) return;
  float s = part[warp];
  for (int p = 1; p < warps_per_row; ++p) s += part[warp + p];
  const float r = alpha * s;
  float* out = c + int64_t(row) * ldc;
  *out = beta != 0.0f ? fmaf(beta, *out, r) : r;
}

}  // namespace sgemm::gemv
