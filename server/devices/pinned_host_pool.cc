#include "server/devices/pinned_host_pool.h"

#include <cuda_runtime_api.h>

#include <bit>
#include <string>

#include "kernels/cuda_status.h"

namespace sgemm {

std::size_t PinnedHostPool::size_class(std::size_t bytes) {
  constexpr std::size_t kMin = std::size_t(64) << 10;
  if (bytes <= kMin) return kMin;
  const std::size_t top = std::bit_floor(bytes);
  const std::size_t step = top / 4;
  return (bytes + step - 1) / step * step;
}

PinnedHostPool::PinnedHostPool(std::size_t cache_bytes) : state_(std::make_shared<State>()) {
  state_->cache_limit = cache_bytes;
}

PinnedHostPool::~PinnedHostPool() {
  MutexLock lock(state_->mu);
  state_->trim_locked(0);
}

PinnedHostPool::State::~State() {
  trim_locked(0);
  if (arena) {
    (void)cudaFreeHost(arena);
    (void)cudaGetLastError();
  }
}

namespace {
// Arena blocks start on 4 KiB boundaries (pages: copies run at full rate).
constexpr std::size_t kArenaAlign = 4096;
}  // namespace

Status PinnedHostPool::reserve(std::size_t bytes) {
  if (bytes == 0) return Status::Ok();
  bytes = (bytes + kArenaAlign - 1) / kArenaAlign * kArenaAlign;
  MutexLock lock(state_->mu);
  if (state_->arena) return FailedPrecondition("the pinned arena is reserved already");
  void* p = nullptr;
  Status s = SGEMM_CUDA_STATUS(cudaHostAlloc(&p, bytes, cudaHostAllocPortable));
  if (!s.ok())
    return ResourceExhausted("cannot pin " + std::to_string(bytes) + " bytes for the pinned pool: " + s.message());
  state_->arena = static_cast<char*>(p);
  state_->arena_free.emplace(0, bytes);
  state_->stats.arena_bytes = bytes;
  return Status::Ok();
}

void* PinnedHostPool::State::arena_take_locked(std::size_t bytes) {
  bytes = (bytes + kArenaAlign - 1) / kArenaAlign * kArenaAlign;
  for (auto it = arena_free.begin(); it != arena_free.end(); ++it) {
    if (it->second < bytes) continue;
    const std::size_t offset = it->first, left = it->second - bytes;
    arena_free.erase(it);
    if (left > 0) arena_free.emplace(offset + bytes, left);
    stats.arena_in_use += bytes;
    stats.arena_hits++;
    return arena + offset;
  }
  return nullptr;
}

void PinnedHostPool::State::arena_give(std::size_t offset, std::size_t bytes) {
  bytes = (bytes + kArenaAlign - 1) / kArenaAlign * kArenaAlign;
  MutexLock lock(mu);
  stats.arena_in_use -= bytes;
  auto it = arena_free.emplace(offset, bytes).first;
  // Coalesce with the free neighbours on both sides.
  if (auto next = std::next(it); next != arena_free.end() && it->first + it->second == next->first) {
    it->second += next->second;
    arena_free.erase(next);
  }
  if (it != arena_free.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == it->first) {
      prev->second += it->second;
      arena_free.erase(it);
    }
  }
}

void PinnedHostPool::State::trim_locked(std::size_t limit) {
  // Largest slabs first: fewest cudaFreeHost calls to get under the limit.
  while (stats.cached_bytes > limit && !cache.empty()) {
    auto it = std::prev(cache.end());
    (void)cudaFreeHost(it->second);
    (void)cudaGetLastError();
    stats.cached_bytes -= it->first;
    cache.erase(it);
  }
}

void PinnedHostPool::State::release(void* p, std::size_t cls) {
  MutexLock lock(mu);
  stats.live_bytes -= cls;
  if (cls > cache_limit) {
    (void)cudaFreeHost(p);
    (void)cudaGetLastError();
    return;
  }
  cache.emplace(cls, p);
  stats.cached_bytes += cls;
  trim_locked(cache_limit);
}

StatusOr<HostBuffer> PinnedHostPool::allocate(std::size_t bytes) {
  const std::size_t cls = size_class(bytes);
  std::shared_ptr<State> st = state_;
  auto make = [&](void* p) { return HostBuffer(p, bytes, [st, cls](void* q, std::size_t) { st->release(q, cls); }); };
  {
    MutexLock lock(st->mu);
    if (st->arena && bytes > 0) {
      if (char* p = static_cast<char*>(st->arena_take_locked(bytes))) {
        const std::size_t offset = std::size_t(p - st->arena);
        return HostBuffer(p, bytes, [st, offset](void*, std::size_t n) { st->arena_give(offset, n); });
      }
    }
    if (auto it = st->cache.find(cls); it != st->cache.end()) {
      void* p = it->second;
      st->cache.erase(it);
      st->stats.cached_bytes -= cls;
      st->stats.live_bytes += cls;
      st->stats.reuses++;
      return make(p);
    }
  }
  void* p = nullptr;
  Status s = SGEMM_CUDA_STATUS(cudaHostAlloc(&p, cls, cudaHostAllocPortable));
  if (!s.ok()) {
    {
      MutexLock lock(st->mu);
      st->trim_locked(0);
    }
    s = SGEMM_CUDA_STATUS(cudaHostAlloc(&p, cls, cudaHostAllocPortable));
  }
  if (!s.ok()) {
    return ResourceExhausted("pinned host buffer of " + std::to_string(bytes) + " bytes: " + s.message());
  }
  MutexLock lock(st->mu);
  st->stats.live_bytes += cls;
  st->stats.allocations++;
  return make(p);
}

PinnedHostPoolStats PinnedHostPool::stats() const {
  MutexLock lock(state_->mu);
  return state_->stats;
}

}  // namespace sgemm
