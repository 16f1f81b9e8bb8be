#include "server/engine/engine.h"

#include <cmath>
#include <string>
#include <string_view>
#include <vector>

namespace sgemm {

Status check_gemm_request(const GemmRequest& r) {
  const GemmShape& s = r.shape;
  for (auto [name, v] : {std::pair{"m", s.m}, std::pair{"n", s.n}, std::pair{"k", s.k}})
    if (v < 1) return InvalidArgument(std::string("header.") + name + " must be >= 1, got " + std::to_string(v));
  if (!std::isfinite(r.alpha)) return InvalidArgument("header.alpha must be finite, got " + std::to_string(r.alpha));
  if (!std::isfinite(r.beta)) return InvalidArgument("header.beta must be finite, got " + std::to_string(r.beta));
  return Status::Ok();
}

int count_kernel_launches(std::vector<KernelRowUse>* rows, std::string_view name, int64_t launches) {
  for (std::size_t i = 0; i < rows->size(); ++i)
    if ((*rows)[i].name == name) {
      (*rows)[i].launches += launches;
      return int(i);
    }
  rows->push_back(KernelRowUse{std::string(name), launches});
  return int(rows->size()) - 1;
}

std::string most_launched_row(const std::vector<KernelRowUse>& rows) {
  const KernelRowUse* best = nullptr;
  for (const KernelRowUse& r : rows)
    if (!best || r.launches > best->launches) best = &r;
  return best ? best->name : std::string();
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
