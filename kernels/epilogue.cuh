// The epilogue store shared by the SIMT kernels (pingpong_sgemm.cuh, tma_simt_sgemm.cuh):
// four adjacent elements of a row of C become r + beta * C. Any architecture.
#pragma once

#include <cuda_runtime.h>

// crow[col + q] = r.q + beta * crow[col + q] for q < 4 and col + q < n, with `r` a float4
// lvalue (overwritten) and `crow` a float*. `vec`: the caller knows crow + col is 16-byte
// aligned and col + 3 < n (one float4 load and store); else element by element. C is read
// only when beta != 0, so a C that holds NaN or Inf, or was never written, is overwritten as
// the BLAS define it.
// A statement macro, not a function: an inline function, even forced inline, changed the
// order in which the compiler numbers the accumulators and so the register allocation and
// the SASS of every SIMT kernel, whose machine code the measurements in bench/results hold.
// The expansion is the kernels' own source, token for token.
#define SGEMM_EPILOGUE_STORE4(crow, col, n, r, beta, vec)                                    \
  if (vec) {                                                                                 \
    float4* sgemm_c4_ = reinterpret_cast<float4*>((crow) + (col));                           \
    if ((beta) != 0.0f) {                                                                    \
      const float4 sgemm_old_ = *sgemm_c4_;                                                  \
      (r).x = fmaf((beta), sgemm_old_.x, (r).x);                                             \
      (r).y = fmaf((beta), sgemm_old_.y, (r).y);                                             \
      (r).z = fmaf((beta), sgemm_old_.z, (r).z);                                             \
      (r).w = fmaf((beta), sgemm_old_.w, (r).w);                                             \
    }                                                                                        \
    *sgemm_c4_ = (r);                                                                        \
  } else {                                                                                   \
    const float sgemm_v_[4] = {(r).x, (r).y, (r).z, (r).w};                                  \
    _Pragma("unroll") for (int sgemm_q_ = 0; sgemm_q_ < 4; ++sgemm_q_) {                     \
      if ((col) + sgemm_q_ < (n)) {                                                          \
        float sgemm_out_ = sgemm_v_[sgemm_q_];                                               \
        if ((beta) != 0.0f) sgemm_out_ = fmaf((beta), (crow)[(col) + sgemm_q_], sgemm_out_); \
        (crow)[(col) + sgemm_q_] = sgemm_out_;                                               \
      }                                                                                      \
    }                                                                                        \
  }
