// Where an engine's launches run, as the kernel choice needs to know it
// (server/planner/kernel_choice.h). Every engine builds its select_kernel
// queries here: the CUDA engine for a request and for device buffers, the
// cluster engine for its ranks. So all of them ask the one choice the same
// question, with the same measured speeds.
#pragma once

#include <memory>
#include <vector>

#include "common/gemm_types.h"
#include "server/engine/engine.h"
#include "server/planner/kernel_choice.h"
#include "server/planner/kernel_speeds.h"

namespace sgemm {

struct KernelSite {
  std::vector<KernelKind> available;                // the kernels the GPUs offer
  KernelKind ffma_default = KernelKind::kPingpong;  // the FFMA kernel where the measured speeds have no rate
  std::shared_ptr<const KernelSpeeds> speeds;       // null: the built-in ones (kernel_speeds.h)

  // The query for request `r` run as launches of at most `launch` on GPU `gpu`
  // (the request's whole product is the contract's).
  KernelQuery query(const GemmRequest& r, const GemmShape& launch, const DeviceInfo& gpu) const;
};

}  // namespace sgemm
