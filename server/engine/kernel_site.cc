#include "server/engine/kernel_site.h"

namespace sgemm {

KernelQuery KernelSite::query(const GemmRequest& r, const GemmShape& launch, const DeviceInfo& gpu) const {
  KernelQuery q;
  q.shape = launch;
  q.product = r.shape;
  q.precision = r.options.precision;
  q.named = r.options.kernel;
  q.ffma_default = ffma_default;
  q.available = available;
  q.sm_count = gpu.sm_count;
  q.device = gpu.name;
  q.speeds = speeds.get();
  return q;
}

}  // namespace sgemm
