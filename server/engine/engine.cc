#include "server/engine/engine.h"

#include <cmath>
#include <string>

namespace sgemm {

Status check_gemm_request(const GemmRequest& r) {
  const GemmShape& s = r.shape;
  for (auto [name, v] : {std::pair{"m", s.m}, std::pair{"n", s.n}, std::pair{"k", s.k}})
    if (v < 1) return InvalidArgument(std::string("header.") + name + " must be >= 1, got " + std::to_string(v));
  if (!std::isfinite(r.alpha)) return InvalidArgument("header.alpha must be finite, got " + std::to_string(r.alpha));
  if (!std::isfinite(r.beta)) return InvalidArgument("header.beta must be finite, got " + std::to_string(r.beta));
  return Status::Ok();
}

const char* step_kind_name(StepKind kind) {
  switch (kind) {
    case StepKind::kCopyIn:
      return "copy_in";
    case StepKind::kKernel:
      return "kernel";
    case StepKind::kCollective:
      return "collective";
    case StepKind::kCopyOut:
      return "copy_out";
    case StepKind::kWaitInput:
      return "wait_input";
  }
  return "?";
}

}  // namespace sgemm
