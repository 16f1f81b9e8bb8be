#include "common/request_ring.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <cstring>
#include <ctime>
#include <string>

namespace sgemm::ring {

int64_t ring_bytes(int slots, int64_t slot_bytes) { return kHeaderBytes + int64_t(slots) * slot_bytes; }

Status check_layout(int64_t offset, int64_t slots, int64_t slot_bytes, int64_t region_bytes) {
  if (offset < 0 || offset % 64 != 0)
    return InvalidArgument("offset: must be a multiple of 64 bytes and >= 0, got " + std::to_string(offset));
  if (slots < 1 || slots > kMaxSlots)
    return InvalidArgument("slots: must be 1.." + std::to_string(kMaxSlots) + ", got " + std::to_string(slots));
  if (slot_bytes < kMinSlotBytes || slot_bytes > kMaxSlotBytes || slot_bytes % 64 != 0)
    return InvalidArgument("slot_bytes: must be a multiple of 64 in " + std::to_string(kMinSlotBytes) + ".." +
                           std::to_string(kMaxSlotBytes) + ", got " + std::to_string(slot_bytes));
  const int64_t need = ring_bytes(int(slots), slot_bytes);
  if (offset > region_bytes || need > region_bytes - offset)
    return InvalidArgument("the ring (" + std::to_string(need) + " bytes at offset " + std::to_string(offset) +
                           ") does not fit the region's " + std::to_string(region_bytes) + " bytes");
  return Status::Ok();
}

void RingView::format() const {
  RingHeader* h = header();
  std::memset(static_cast<void*>(h), 0, kHeaderBytes);
  h->magic = kMagic;
  h->version = kVersion;
  h->slots = uint32_t(slots_);
  h->slot_bytes = uint64_t(slot_bytes_);
  for (int i = 0; i < slots_; ++i) {
    std::memset(static_cast<void*>(slot(i)), 0, kSlotHeaderBytes);
    slot(i)->state.store(kFree, std::memory_order_release);
  }
}

Status RingView::check_header() const {
  // Each field is read once, into a local: the caller may change them at any time.
  const RingHeader* h = header();
  const uint32_t magic = __atomic_load_n(&h->magic, __ATOMIC_RELAXED);
  const uint32_t version = __atomic_load_n(&h->version, __ATOMIC_RELAXED);
  const uint32_t slots = __atomic_load_n(&h->slots, __ATOMIC_RELAXED);
  const uint64_t slot_bytes = __atomic_load_n(&h->slot_bytes, __ATOMIC_RELAXED);
  if (magic != kMagic) return InvalidArgument("the region holds no formatted ring at that offset (bad magic)");
  if (version != kVersion)
    return InvalidArgument("ring version " + std::to_string(version) + " is not this server's " +
                           std::to_string(kVersion));
  if (int64_t(slots) != slots_ || int64_t(slot_bytes) != slot_bytes_)
    return InvalidArgument("the ring's header (" + std::to_string(slots) + " slots of " + std::to_string(slot_bytes) +
                           " bytes) does not match the request's (" + std::to_string(slots_) + " of " +
                           std::to_string(slot_bytes_) + ")");
  return Status::Ok();
}

void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, int64_t timeout_us) {
  timespec ts{};
  ts.tv_sec = time_t(timeout_us / 1000000);
  ts.tv_nsec = long(timeout_us % 1000000) * 1000;
  // Not FUTEX_PRIVATE_FLAG: the word is in memory two processes share.
  (void)syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>* word) {
  (void)syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

void poll_pause() { sched_yield(); }

}  // namespace sgemm::ring
