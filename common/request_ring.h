// A request ring: MultiplyUnary requests and answers through shared memory
// the caller registered as a region, for a caller on the server's own host
// (sgemm.proto OpenRing; docs/transport.md, "Request rings"). A request's
// bytes are exactly a MultiplyUnary request's and an answer's exactly its
// response's, so the server answers a slot through the same request path as
// the RPC. What the ring saves is gRPC's transport: HTTP/2 framing and the
// thread wake-ups on both sides, which on a virtual machine cost 10-30 us
// each (bench/results/2026-12-02_h200_request-ring).
//
// The layout, all integers little-endian, at the region's `offset`:
//
//   RingHeader                          64 bytes
//   slot 0: SlotHeader, then payload    slot_bytes (a multiple of 64)
//   slot 1 ...                          slots in all
//
// A slot goes round  kFree -(caller)-> kPosted -(server)-> kTaken
// -(server)-> kAnswered -(caller)-> kFree. The caller writes a request into
// a free slot's payload and `request_bytes`, stores kPosted (release), adds 1
// to the header's `doorbell` and, when `server_waiting` is set, wakes the
// doorbell's futex waiters. The server takes a posted slot (kTaken), copies
// the request out before it parses it, and answers: the answer (or a failed
// status's message) in the payload, then kAnswered (release) and a futex wake
// on the slot's state. Both sides spin a little before they sleep on a futex,
// so an answer that comes within the spin costs no wake-up.
//
// The server trusts nothing in the ring: it reads each field once, bounds
// every length by the slot, copies before parsing, and acts only on slots in
// kPosted that it has not taken. A caller that scribbles on its own ring
// gets garbage answers or errors, and nobody else's.
//
// Threads: any; the futex words are process-shared (the mapping is
// MAP_SHARED), so waits and wakes work across the two processes.
#pragma once

#include <atomic>
#include <cstdint>

#include "common/status.h"

namespace sgemm::ring {

inline constexpr uint32_t kMagic = 0x52474753;  // "SGGR" read as little-endian bytes
inline constexpr uint32_t kVersion = 1;
inline constexpr int64_t kHeaderBytes = 64;
inline constexpr int64_t kSlotHeaderBytes = 64;
inline constexpr int kMaxSlots = 256;
inline constexpr int64_t kMinSlotBytes = 4096;
// A MultiplyUnary message is at most 4 MiB (gRPC's default message limit);
// with the slot's header that is the largest slot worth having.
inline constexpr int64_t kMaxSlotBytes = (int64_t{4} << 20) + kSlotHeaderBytes;

enum SlotState : uint32_t { kFree = 0, kPosted = 1, kTaken = 2, kAnswered = 3 };

struct RingHeader {
  uint32_t magic;
  uint32_t version;
  uint32_t slots;
  uint32_t reserved0;
  uint64_t slot_bytes;
  std::atomic<uint32_t> doorbell;        // the caller adds 1 per posted request; the server sleeps on it
  std::atomic<uint32_t> server_waiting;  // 1 while the server sleeps (the caller then wakes it)
  uint8_t reserved1[32];
};
static_assert(sizeof(RingHeader) == kHeaderBytes, "the ring's header is 64 bytes on both sides");

struct SlotHeader {
  std::atomic<uint32_t> state;           // SlotState; the caller sleeps on it for the answer
  uint32_t request_bytes;                // the request in the payload (the caller's)
  uint32_t answer_bytes;                 // the answer in the payload (the server's): a response, or a status message
  int32_t status_code;                   // the answer's gRPC status code (0: OK, the payload is the response)
  uint64_t sequence;                     // the caller's own; the server leaves it alone
  std::atomic<uint32_t> caller_waiting;  // 1 while the caller sleeps on `state` (the server then wakes it)
  uint8_t reserved[36];
};
static_assert(sizeof(SlotHeader) == kSlotHeaderBytes, "a slot's header is 64 bytes on both sides");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "the ring's words are shared between processes");

// Bytes a ring of `slots` slots of `slot_bytes` takes.
int64_t ring_bytes(int slots, int64_t slot_bytes);

// INVALID_ARGUMENT naming the field for a layout that is not a ring's or does
// not fit `region_bytes` from `offset` (offset a multiple of 64).
Status check_layout(int64_t offset, int64_t slots, int64_t slot_bytes, int64_t region_bytes);

// A ring's memory, laid out by its fields (`base` is the ring's first byte).
class RingView {
 public:
  RingView() = default;
  RingView(void* base, int slots, int64_t slot_bytes)
      : base_(static_cast<uint8_t*>(base)), slots_(slots), slot_bytes_(slot_bytes) {}

  RingHeader* header() const { return reinterpret_cast<RingHeader*>(base_); }
  SlotHeader* slot(int i) const {
    return reinterpret_cast<SlotHeader*>(base_ + kHeaderBytes + int64_t(i) * slot_bytes_);
  }
  uint8_t* payload(int i) const { return reinterpret_cast<uint8_t*>(slot(i)) + kSlotHeaderBytes; }
  int64_t payload_capacity() const { return slot_bytes_ - kSlotHeaderBytes; }
  int slots() const { return slots_; }
  int64_t slot_bytes() const { return slot_bytes_; }

  // The caller formats a new ring: the header's fields, every slot free.
  void format() const;
  // Whether the header names this layout (the server checks it at open).
  Status check_header() const;

 private:
  uint8_t* base_ = nullptr;
  int slots_ = 0;
  int64_t slot_bytes_ = 0;
};

// Process-shared futex on a ring word. wait() returns at once unless *word
// == expected, and after a wake, a signal or `timeout_us` (spurious returns
// allowed: callers re-check the word).
void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, int64_t timeout_us);
void futex_wake_all(std::atomic<uint32_t>* word);

// One step of a polling loop: the core goes to any other thread ready to run
// on it (a poller must not starve the threads it waits for), else the call
// returns at once.
void poll_pause();

}  // namespace sgemm::ring
