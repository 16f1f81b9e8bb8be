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

}  // namespace sgemm
