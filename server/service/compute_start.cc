#include "server/service/compute_start.h"

#include <utility>

#include "server/service/request_checks.h"
#include "server/service/sgemm_service.h"

namespace sgemm {

StatusOr<ComputeStart> start_complete_request(ServiceShared& shared, const CompleteRequest& r,
                                              CoalescedRequest* request, std::function<void()> run) {
  const auto here_allowed = [&] {
    return shared.slot_policy.complete(r.receiver, r.striped, [&] { return shared.engine.estimate_ms(*r.job); }) ==
           ComputeSlotPolicy::Way::kHere;
  };
  if (r.may_coalesce && shared.coalescer.eligible(*r.job, r.footprint_bytes)) {
    // A small request: it waits in the coalescer, which may run it with others in one launch.
    SGEMM_ASSIGN_OR_RETURN(const RequestCoalescer::Start start,
                           shared.coalescer.submit(request, shared.pool, here_allowed()));
    return start == RequestCoalescer::Start::kHere ? ComputeStart::kHereCoalesced : ComputeStart::kQueued;
  }
  // A quick product on this thread: no hand-off to a compute thread.
  if (here_allowed() && shared.pool.reserve_here()) return ComputeStart::kHereAlone;
  if (!shared.pool.submit(std::move(run))) return server_busy(shared.pool);
  return ComputeStart::kQueued;
}

}  // namespace sgemm
