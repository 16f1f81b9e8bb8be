#include "common/host_buffer.h"

#include <cstdlib>
#include <new>

namespace sgemm {

StatusOr<HostBuffer> AlignedHostAllocator::allocate(std::size_t bytes) {
  constexpr std::size_t kAlign = 64;
  const std::size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, rounded == 0 ? kAlign : rounded);
  if (!p) return ResourceExhausted("cannot allocate " + std::to_string(bytes) + " bytes of host memory");
  return HostBuffer(p, bytes, [](void* q, std::size_t) { std::free(q); });
}

}  // namespace sgemm
