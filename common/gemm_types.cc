#include "common/gemm_types.h"

namespace sgemm {

std::string_view kernel_kind_name(KernelKind kind) {
  switch (kind) {
    case KernelKind::kPingpong:
      return "pingpong";
    case KernelKind::kCublas:
      return "cublas";
    case KernelKind::kTf32:
      return "tf32";
    case KernelKind::kFp32x3:
      return "fp32x3";
    case KernelKind::kOpenblas:
      return "openblas";
  }
  return "unknown";
}

std::optional<KernelKind> parse_kernel_kind(std::string_view text) {
  for (KernelKind k :
       {KernelKind::kPingpong, KernelKind::kCublas, KernelKind::kTf32, KernelKind::kFp32x3, KernelKind::kOpenblas})
    if (text == kernel_kind_name(k)) return k;
  return std::nullopt;
}

std::vector<KernelKind> gpu_kernel_kinds() {
  return {KernelKind::kPingpong, KernelKind::kCublas, KernelKind::kTf32, KernelKind::kFp32x3};
}

std::string gemm_shape_text(const GemmShape& shape) {
  return std::to_string(shape.m) + "x" + std::to_string(shape.n) + "x" + std::to_string(shape.k);
}

std::string kernel_kind_list(const std::vector<KernelKind>& kinds) {
  std::string out;
  for (KernelKind k : kinds) out += (out.empty() ? "" : ", ") + std::string(kernel_kind_name(k));
  return out;
}

std::string_view precision_name(Precision p) {
  switch (p) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kTf32:
      return "tf32";
    case Precision::kFp32x3:
      return "fp32x3";
    case Precision::kFp32Ffma:
      return "fp32-ffma";
  }
  return "unknown";
}

std::vector<Precision> all_precisions() {
  return {Precision::kFp32, Precision::kFp32Ffma, Precision::kTf32, Precision::kFp32x3};
}

std::optional<Precision> parse_precision(std::string_view text) {
  for (Precision p : all_precisions())
    if (text == precision_name(p)) return p;
  return std::nullopt;
}

std::string_view precision_contract(Precision p) {
  switch (p) {
    case Precision::kFp32:
      return "error no larger than cuBLAS SGEMM's on the same inputs (max |c - ref| / (|A||B|) against fp64)";
    case Precision::kFp32Ffma:
      return "classic SGEMM arithmetic: fp32 fused multiply-adds only";
    case Precision::kTf32:
      return "A and B rounded to TF32 (10-bit mantissa): about 1e-4 relative error, less accurate than fp32";
    case Precision::kFp32x3:
      return "the 3xTF32 tensor-core kernel on every shape (sm_90)";
  }
  return "unknown";
}

ArithmeticClass kernel_arithmetic(KernelKind kind) {
  switch (kind) {
    case KernelKind::kTf32:
      return ArithmeticClass::kTf32;
    case KernelKind::kFp32x3:
      return ArithmeticClass::kFp32x3;
    case KernelKind::kPingpong:
    case KernelKind::kCublas:
    case KernelKind::kOpenblas:
      break;
  }
  return ArithmeticClass::kFfma;
}

std::string_view split_mode_name(SplitMode mode) {
  switch (mode) {
    case SplitMode::kAuto:
      return "auto";
    case SplitMode::kSingle:
      return "single";
    case SplitMode::kRows:
      return "rows";
    case SplitMode::kK:
      return "k";
  }
  return "unknown";
}

std::string_view op_name(Op op) { return op == Op::kT ? "t" : "n"; }

std::optional<Op> parse_op(std::string_view text) {
  if (text == "n" || text == "N") return Op::kN;
  if (text == "t" || text == "T") return Op::kT;
  return std::nullopt;
}

std::optional<SplitMode> parse_split_mode(std::string_view text) {
  for (SplitMode m : {SplitMode::kAuto, SplitMode::kSingle, SplitMode::kRows, SplitMode::kK})
    if (text == split_mode_name(m)) return m;
  return std::nullopt;
}

}  // namespace sgemm
