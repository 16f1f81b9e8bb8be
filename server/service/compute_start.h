// Where a complete single-product request computes, decided in one place for
// both RPCs that carry one (the Multiply stream once its upload is complete,
// MultiplyUnary once its memory is reserved): with other small requests in the
// coalescer (request_coalescer.h), here on the calling thread when the
// compute-slot policy allows it (compute_slot_policy.h) and a slot is idle,
// or queued on the compute pool. Starting early, while A still arrives, is
// the stream's alone (multiply_call_compute.cc).
//
// Threads: any; the caller may hold its request's lock (only the coalescer's
// and the pool's locks are taken).
#pragma once

#include <cstdint>
#include <functional>

#include "common/status.h"
#include "server/engine/engine.h"
#include "server/service/compute_slot_policy.h"
#include "server/service/request_coalescer.h"

namespace sgemm {

struct ServiceShared;

// The facts the decision looks at.
struct CompleteRequest {
  const GemmJob* job = nullptr;          // every operand in place
  int64_t footprint_bytes = 0;           // A + B + C of host memory
  bool may_coalesce = false;             // one stream or one message, no kept result: it may share a launch
  Receiver receiver = Receiver::kOther;  // the thread deciding (compute_slot_policy.h)
  bool striped = false;                  // spread over several streams
};

enum class ComputeStart {
  kQueued,         // a pool thread (or a coalesced launch on one) will run it
  kHereAlone,      // the caller holds a slot (ComputePool::reserve_here): it runs the job, then end_here()
  kHereCoalesced,  // the caller runs RequestCoalescer::run_here(pool)
};

// Hands `request` to the coalescer, or `run` to the pool, or reserves a slot
// for the caller. UNAVAILABLE when the pool and its queue are full, or too
// many requests wait in the coalescer (`run` and `request` then dropped).
StatusOr<ComputeStart> start_complete_request(ServiceShared& shared, const CompleteRequest& r,
                                              CoalescedRequest* request, std::function<void()> run);

}  // namespace sgemm
