// Factories of the GemmBackend implementations in kernels/, used only by
// make_gemm_backend (gemm_backend.cc). Each lives in its own file.
#pragma once

#include <memory>

#include "common/status.h"
#include "kernels/gemm_args.h"
#include "kernels/gemm_backend.h"

namespace sgemm {

StatusOr<std::unique_ptr<GemmBackend>> make_pingpong_backend();     // pingpong_backend.cc
StatusOr<std::unique_ptr<GemmBackend>> make_cublas_backend();       // cublas_sgemm.cc
StatusOr<std::unique_ptr<GemmBackend>> make_cublas_tf32_backend();  // cublas_sgemm.cc
StatusOr<std::unique_ptr<GemmBackend>> make_fp32x3_backend();       // fp32x3_backend.cc

// Pure: whether cuBLAS (32-bit int sizes) can run `args`; see cublas_sgemm.cc.
Status cublas_can_implement(const GemmArgs& args);

}  // namespace sgemm
