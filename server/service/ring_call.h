// One OpenRing call (sgemm.proto; the ring's layout: common/request_ring.h):
// while it is open, a thread of its own watches the caller's request ring and
// starts a MultiplyUnaryCall for each posted slot, with the slot as the call's
// reply (unary_reply.h): the request path is the RPC's, only the transport
// differs. The thread polls the ring for --ring-spin-us after the last request
// or answer, then sleeps on the ring's doorbell futex until the caller posts.
//
// What a ring holds: one thread, the region (mapped until the call ends, so
// UnregisterRegion waits for it), and per posted slot what a MultiplyUnary
// call holds (its open-stream ticket, budget reservation and quotas). At most
// --max-rings are open at once.
//
// Ending: the caller cancels the call or closes its connection (OnCancel), or
// the server shuts down (stop()); the thread then takes no new slot, waits
// for the slots' calls to be done with the ring (they may still be
// computing: the state that holds the region outlives the reactor if need be)
// and finishes the call. A slot posted and not taken by then is never
// answered: the caller learns it from the call's end.
//
// Ownership: the reactor deletes itself at OnDone, after joining its thread.
// Threads: the handler's (the constructor), the ring's thread (take, done
// calls, Finish), gRPC's (OnWriteDone, OnCancel, OnDone), the shutdown
// thread (stop, shared.calls_mu held) and whichever thread ends a slot's call
// (its reply's send()).
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/status.h"
#include "server/service/region_registry.h"
#include "server/service/sgemm_service.h"
#include "sgemm/v1/sgemm.pb.h"

namespace sgemm {

struct RingState;

class RingCall final : public grpc::ServerWriteReactor<v1::RingEvent> {
 public:
  // Everything a slot's call needs of the OpenRing call that opened it.
  struct Caller {
    std::string peer;      // gRPC's peer string: the caller's regions are found by it
    uint64_t connection;   // its Unix connection (unix_connections.h)
    StreamPeer admission;  // as StreamAdmission counts it
    AuthClient* client;    // null without --auth-tokens
  };

  // Opens the ring `req` names in `region` and starts watching it, or
  // finishes the call with `refuse` (or the layout's error) at once.
  RingCall(ServiceShared& shared, const v1::OpenRingRequest& req, std::shared_ptr<const MappedRegion> region,
           Caller caller, Status refuse);

  // Ends the ring with `why` (shutdown, with shared.calls_mu held; or the caller's cancel).
  void stop(const Status& why);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  ~RingCall() override;
  void run();  // the ring's thread

  ServiceShared& shared_;
  std::shared_ptr<RingState> state_;  // shared with the slots' replies
  v1::RingEvent opened_;              // the first message: gRPC reads it until the write is done
  std::mutex made_mu_;                // orders the constructor's writes before the reactions (ring_call.cc)
  std::thread thread_;
  bool registered_ = false;  // in shared.rings (set in the constructor, read at OnDone)
};

}  // namespace sgemm
