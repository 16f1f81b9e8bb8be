// The vocabulary every layer shares: the shape of a product, the kernels and
// split strategies a request may name, and what we know of a device. Plain
// C++ with no CUDA, gRPC or protobuf, so the planner, the service and the
// client can all use it (STYLE.md, "the build enforces the layers").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sgemm {

// C (m x n) = alpha * op(A) (m x k) * op(B) (k x n) + beta * C.
struct GemmShape {
  int64_t m = 0;  // rows of op(A) and C
  int64_t n = 0;  // columns of op(B) and C
  int64_t k = 0;  // columns of op(A), rows of op(B)

  double flops() const { return 2.0 * double(m) * double(n) * double(k); }
  friend bool operator==(const GemmShape&, const GemmShape&) = default;
};

// What is done to an operand before the product, as BLAS says it (transa,
// transb) on row-major storage: kN uses the stored matrix as it is, kT its
// transpose. So with op_a = kT, A is stored k x m and op(A) = A^T is m x k;
// with op_b = kT, B is stored n x k.
enum class Op { kN, kT };
std::string_view op_name(Op op);                    // "n", "t"
std::optional<Op> parse_op(std::string_view text);  // "n"/"N" or "t"/"T"

// The rows and columns of a matrix as it is stored (row-major).
struct MatrixDims {
  int64_t rows = 0;
  int64_t cols = 0;
  friend bool operator==(const MatrixDims&, const MatrixDims&) = default;
};
// A as stored: m x k, or k x m when op_a is kT.
inline MatrixDims stored_a_dims(const GemmShape& s, Op op_a) {
  return op_a == Op::kN ? MatrixDims{s.m, s.k} : MatrixDims{s.k, s.m};
}
// B as stored: k x n, or n x k when op_b is kT.
inline MatrixDims stored_b_dims(const GemmShape& s, Op op_b) {
  return op_b == Op::kN ? MatrixDims{s.k, s.n} : MatrixDims{s.n, s.k};
}

// The first element of a submatrix: row and column inside a larger matrix
// (a resident operand's GemmHeader.a_at / b_at / c_at).
struct MatrixOffset {
  int64_t row = 0;
  int64_t col = 0;
  bool zero() const { return row == 0 && col == 0; }
  friend bool operator==(const MatrixOffset&, const MatrixOffset&) = default;
};

// The implementation that multiplies on a device. GPU kinds have a
// GemmBackend in kernels/; kOpenblas is the CPU engine's.
enum class KernelKind {
  kPingpong,  // our multistage shared-memory SIMT kernel (kernels/pingpong_sgemm.cuh)
  kCublas,    // cublasSgemm with CUBLAS_COMPUTE_32F, the reference
  kTf32,      // cuBLAS with CUBLAS_COMPUTE_32F_FAST_TF32: tensor cores, tf32 inputs (~1e-4 relative error)
  kFp32x3,    // our 3xTF32 wgmma kernel (kernels/fp32x3_sgemm.cuh): tensor cores, fp32 accuracy, sm_90 only
  kOpenblas,  // cblas_sgemm on the host (the CPU engine)
};
std::string_view kernel_kind_name(KernelKind kind);
// Parses a kernel_kind_name(); nullopt for anything else.
std::optional<KernelKind> parse_kernel_kind(std::string_view text);
// The kinds a GPU engine can build a backend for, in preference order.
std::vector<KernelKind> gpu_kernel_kinds();
// "pingpong, cublas": for messages that list what is available.
std::string kernel_kind_list(const std::vector<KernelKind>& kinds);
// "MxNxK": a shape in logs and messages.
std::string gemm_shape_text(const GemmShape& shape);

// The arithmetic a request asks for, as a contract on the result:
//   kFp32      error no larger than cuBLAS SGEMM's on the same inputs, measured as
//              cw = max_ij |c - ref| / (|A||B|)_ij against an fp64 product (the scale
//              of the classical GEMM bound). Served by the fastest kernel that keeps
//              it: fp32x3 where its tile fits and K is inside the range the accuracy
//              tests prove (server/planner/kernel_choice.h), else FFMA.
//   kFp32Ffma  classic SGEMM arithmetic: fp32 fused multiply-adds only (our SIMT
//              kernels or cuBLAS SGEMM), for callers who want exactly that.
//   kTf32      A and B rounded to TF32 on the tensor cores (cuBLAS): about 1e-4
//              relative error, documented as less accurate than fp32.
//   kFp32x3    our 3xTF32 tensor-core kernel asked for by name (sm_90 only), whatever
//              the shape.
enum class Precision { kFp32, kTf32, kFp32x3, kFp32Ffma };
std::string_view precision_name(Precision p);
// Every precision, kFp32 first: for lists in messages and GetInfo.
std::vector<Precision> all_precisions();
// One sentence stating what `p` promises (GetInfo, docs).
std::string_view precision_contract(Precision p);
// How a kernel computes, which decides the contracts it may serve.
enum class ArithmeticClass {
  kFfma,    // fp32 fused multiply-adds (ping-pong and its GEMV, cuBLAS SGEMM, OpenBLAS)
  kFp32x3,  // three TF32 tensor-core products per term, fp32 accumulation
  kTf32,    // one TF32 tensor-core product per term
};
ArithmeticClass kernel_arithmetic(KernelKind kind);
std::optional<Precision> parse_precision(std::string_view text);

// How one product is spread over devices; each mode is a strategy (a row of
// the planner's table, server/planner/strategy.h, and of the engine's).
enum class SplitMode {
  kAuto,    // let the planner decide (requests only; a Plan never holds it)
  kSingle,  // whole product on one device
  kRows,    // each device computes a block of rows of C (all of B on every device)
  kK,       // each device computes a K slice; partial Cs are summed with NCCL
};
std::string_view split_mode_name(SplitMode mode);
std::optional<SplitMode> parse_split_mode(std::string_view text);

// One device as the engine sees it (GPU properties, or the host for the CPU engine).
struct DeviceInfo {
  int index = -1;  // CUDA ordinal, -1 for the CPU
  std::string name;
  int64_t memory_bytes = 0;
  // In use on the device when the engine was asked, by every process (what
  // the driver reports); -1 where not known (the CPU, a device out of service).
  int64_t memory_used_bytes = -1;
  int sm_count = 0;
  int compute_major = 0;
  int compute_minor = 0;
};

}  // namespace sgemm
