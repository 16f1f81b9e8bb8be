#include "server/service/request_checks.h"

#include <cstdio>
#include <string>

#include "server/service/sgemm_service.h"

namespace sgemm {

Status check_product_header(const ServiceShared& shared, const GemmRequest& header, bool c_in_caller_memory) {
  SGEMM_RETURN_IF_ERROR(check_limits(header, shared.options.limits));
  SGEMM_RETURN_IF_ERROR(shared.engine.validate(header));
  // A C the server holds is bounded by its inputs; one written into the caller's memory costs it nothing.
  if (!c_in_caller_memory) SGEMM_RETURN_IF_ERROR(check_output_bound(header, shared.options.limits));
  return Status::Ok();
}

StatusOr<int64_t> request_footprint(const ServiceShared& shared, const GemmShape& shape,
                                    const std::vector<std::unique_ptr<InputSource>>& rows) {
  int64_t bytes = shape.m * shape.n * int64_t(sizeof(float));
  for (const auto& row : rows) bytes += row->footprint(shape);
  if (bytes > shared.budget.capacity())
    return ResourceExhausted("the request needs " + std::to_string(bytes) +
                             " bytes of host memory for A, B and C, more than the server's whole budget of " +
                             std::to_string(shared.budget.capacity()) + " bytes (--host-memory-bytes)");
  return bytes;
}

Status c_budget_full(const ServiceShared& shared, int64_t bytes) {
  return ResourceExhausted("the host memory budget has no room for C's " + std::to_string(bytes) +
                           " bytes (--host-memory-bytes " + std::to_string(shared.budget.capacity()) + ", " +
                           std::to_string(shared.budget.in_use()) +
                           " in use); name an output (header.out_region, header.out_device) or retry later");
}

Status memory_queue_full(const ServiceShared& shared) {
  return ResourceExhausted("the host memory budget is full (--host-memory-bytes " +
                           std::to_string(shared.budget.capacity()) + ", " + std::to_string(shared.budget.in_use()) +
                           " in use) and " + std::to_string(shared.options.max_queued) +
                           " requests already wait for it (--max-queued); retry later");
}

StatusOr<uint64_t> queue_for_memory(ServiceShared& shared, int64_t bytes, std::atomic<int>& refs,
                                    MemoryBudget::Grant grant) {
  ++refs;  // before the grant can run, on whichever thread frees the memory
  const uint64_t ticket = shared.budget.enqueue(bytes, std::move(grant));
  if (ticket == 0) {
    --refs;
    return memory_queue_full(shared);
  }
  return ticket;
}

std::string seconds_text(std::chrono::milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", double(d.count()) / 1000.0);
  return buf;
}

Status memory_wait_timed_out(const ServiceShared& shared, int64_t bytes) {
  return ResourceExhausted("waited " + seconds_text(shared.options.idle_timeout) + " (--idle-timeout) for " +
                           std::to_string(bytes) + " bytes of the host memory budget (--host-memory-bytes " +
                           std::to_string(shared.budget.capacity()) + ", " + std::to_string(shared.budget.in_use()) +
                           " in use); retry later");
}

Status server_busy(const ComputePool& pool) {
  return Unavailable("server busy: " + std::to_string(pool.running()) + " requests computing and " +
                     std::to_string(pool.queued()) + " queued (--max-in-flight " + std::to_string(pool.threads()) +
                     ", --max-queued " + std::to_string(pool.max_queued()) + "); retry with backoff");
}

}  // namespace sgemm
