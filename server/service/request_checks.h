// The checks of a single product's header and the host memory it needs, the
// same for both RPCs that carry one (the Multiply stream, multiply_call.h, and
// MultiplyUnary, multiply_unary_call.h), so that both refuse the same headers
// with the same statuses.
//
// Threads: any; they read the service's options, engine and budget only.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "server/engine/engine.h"
#include "server/service/compute_pool.h"
#include "server/service/input_source.h"
#include "server/service/memory_budget.h"

namespace sgemm {

struct ServiceShared;

// Before any data: the service's size limits, then the engine's rules for
// the request (shape, scalars, kernel, split, precision), then the bound on
// a C the server holds (none when C is written into the caller's memory).
Status check_product_header(const ServiceShared& shared, const GemmRequest& header, bool c_in_caller_memory);

// The host memory a request holds: C's m x n, plus what each input row
// needs (what is uploaded). RESOURCE_EXHAUSTED when it exceeds the whole
// budget (no wait could ever grant it).
StatusOr<int64_t> request_footprint(const ServiceShared& shared, const GemmShape& shape,
                                    const std::vector<std::unique_ptr<InputSource>>& rows);

// RESOURCE_EXHAUSTED: the host-memory budget is full and --max-queued
// requests already wait for it.
Status memory_queue_full(const ServiceShared& shared);
// Queues a request for `bytes` of the budget, holding one of the request's
// references (`refs`) for the waiter until `grant` runs: the ticket, or
// memory_queue_full's status with that reference given back.
StatusOr<uint64_t> queue_for_memory(ServiceShared& shared, int64_t bytes, std::atomic<int>& refs,
                                    MemoryBudget::Grant grant);
// RESOURCE_EXHAUSTED: a request whose operands are in the caller's memory
// found no room for the `bytes` of the C it sends back (such a request is
// refused, not queued: it holds the caller's memory while it waits).
Status c_budget_full(const ServiceShared& shared, int64_t bytes);
// RESOURCE_EXHAUSTED: a request waited --idle-timeout for `bytes` of the budget.
Status memory_wait_timed_out(const ServiceShared& shared, int64_t bytes);

// A duration as the statuses name a seconds flag: "30 s", "0.5 s".
std::string seconds_text(std::chrono::milliseconds d);

// UNAVAILABLE: every compute slot is busy and the queue is full (retry with backoff).
Status server_busy(const ComputePool& pool);

}  // namespace sgemm
