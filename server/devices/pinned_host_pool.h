// Page-locked host memory for request matrices, reused across requests.
//
// Buffers come from cudaHostAlloc(cudaHostAllocPortable) slabs, so every
// device of the pool copies from/to them at full link rate (no pageable
// staging on the hot path). Buffers come first from the arena reserved at
// start-up (reserve(): one page-locked block carved first-fit, so the first
// request pays no cudaHostAlloc); when it has no room, from slabs:
// a released slab goes back into a cache keyed by
// size class (four classes per power of two above 64 KiB, so at most ~19%
// waste); the next request of that class reuses it. The cache keeps at most
// `cache_bytes`; beyond that released slabs are freed. When cudaHostAlloc
// fails the cache is emptied and the allocation retried once.
//
// Ownership and threads: thread-safe. The state lives in a shared_ptr held by
// every outstanding HostBuffer, so buffers may outlive the pool object.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <vector>

#include "common/host_buffer.h"
#include "common/thread_annotations.h"

namespace sgemm {

struct PinnedHostPoolStats {
  std::size_t cached_bytes = 0;  // released slabs kept for reuse
  std::size_t live_bytes = 0;    // handed out, not yet released
  std::size_t allocations = 0;   // cudaHostAlloc calls so far
  std::size_t reuses = 0;        // requests served from the cache
  std::size_t arena_bytes = 0;   // reserved at start-up (reserve())
  std::size_t arena_in_use = 0;  // of it, handed out now
  std::size_t arena_hits = 0;    // requests served from the arena
};

class PinnedHostPool final : public HostAllocator {
 public:
  // cache_bytes: released memory kept for reuse (default 8 GiB).
  explicit PinnedHostPool(std::size_t cache_bytes = std::size_t(8) << 30);
  ~PinnedHostPool() override;
  // Allocates (and so pins and maps) `bytes` of page-locked memory now, from
  // which later buffers are carved before any slab is allocated. Once only.
  // RESOURCE_EXHAUSTED when the memory cannot be pinned.
  Status reserve(std::size_t bytes);
  StatusOr<HostBuffer> allocate(std::size_t bytes) override;
  PinnedHostPoolStats stats() const;
  // The size class a request of `bytes` is served from.
  static std::size_t size_class(std::size_t bytes);

 private:
  struct State {
    Mutex mu;
    std::size_t cache_limit = 0;                                   // set before the pool is shared
    std::multimap<std::size_t, void*> cache SGEMM_GUARDED_BY(mu);  // size class -> slab
    PinnedHostPoolStats stats SGEMM_GUARDED_BY(mu);
    void release(void* p, std::size_t cls) SGEMM_EXCLUDES(mu);
    // The arena: one page-locked block; free ranges by offset.
    char* arena SGEMM_GUARDED_BY(mu) = nullptr;
    std::map<std::size_t, std::size_t> arena_free SGEMM_GUARDED_BY(mu);
    void* arena_take_locked(std::size_t bytes) SGEMM_REQUIRES(mu);
    void arena_give(std::size_t offset, std::size_t bytes) SGEMM_EXCLUDES(mu);
    void trim_locked(std::size_t limit) SGEMM_REQUIRES(mu);
    ~State();
  };
  std::shared_ptr<State> state_;
};

}  // namespace sgemm
