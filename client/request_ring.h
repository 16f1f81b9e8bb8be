// A request ring of this client's (sgemm.proto OpenRing; the layout:
// common/request_ring.h): MultiplyUnary requests and answers through a
// shared-memory region the client registered, with no gRPC call per product.
// The OpenRing call stays open while the ring lives; a thread of the ring's
// reads it and, when it ends (server shutdown, connection lost), fails the
// requests waiting for answers with its status.
//
// A request takes a free slot (or waits for one), copies its bytes in, posts
// the slot and polls it for the answer for `spin` before it sleeps on the
// slot's futex. A request whose deadline passes leaves its slot to the
// server; the slot is used again once answered.
//
// Threads: exchange() from any number of threads at once; the destructor
// after the last exchange() has returned.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/request_ring.h"
#include "common/status.h"
#include "sgemm/v1/sgemm.grpc.pb.h"

namespace sgemm {

struct RingOptions {
  int slots = 8;                             // requests in flight at once, all threads together
  int64_t slot_bytes = ring::kMaxSlotBytes;  // each slot: a 64-byte header and the largest message
  std::chrono::microseconds spin{1000};      // how long a request polls for its answer before it sleeps
};

class RequestRing {
 public:
  // Opens a ring in `memory` (at least ring::ring_bytes(options.slots,
  // options.slot_bytes) bytes, registered as region `region` on `channel`):
  // formats it, calls OpenRing and waits for the server's first message.
  // `prepare` adds the call's metadata (the bearer token).
  static StatusOr<std::unique_ptr<RequestRing>> open(const std::shared_ptr<grpc::Channel>& channel,
                                                     const std::function<void(grpc::ClientContext&)>& prepare,
                                                     const std::string& region, void* memory, RingOptions options);
  ~RequestRing();  // closes the ring (cancels OpenRing) and waits for its thread

  // Posts `request` (a MultiplyUnaryRequest's bytes) and waits for the
  // answer: OK with the MultiplyUnaryResponse's bytes in `*response`, or the
  // server's status for it. INVALID_ARGUMENT for a request larger than a
  // slot's payload; DEADLINE_EXCEEDED past `deadline`; the OpenRing call's
  // status (UNAVAILABLE when it ended OK) once the ring has closed.
  Status exchange(const grpc::ByteBuffer& request, grpc::ByteBuffer* response,
                  std::chrono::steady_clock::time_point deadline);

 private:
  RequestRing(ring::RingView view, RingOptions options);
  void watch();  // the thread reading the OpenRing call until it ends
  StatusOr<int> take_slot(std::chrono::steady_clock::time_point deadline);
  void give_back(int slot);

  const ring::RingView view_;
  const RingOptions options_;
  std::unique_ptr<sgemm::v1::Sgemm::Stub> stub_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReader<sgemm::v1::RingEvent>> reader_;
  std::thread watcher_;

  std::mutex mu_;
  std::condition_variable free_cv_;
  std::vector<int> free_;        // guarded by mu_: slots no request holds
  std::vector<bool> abandoned_;  // guarded by mu_: slots whose request gave up before the answer
  Status closed_;                // guarded by mu_: the ring's end, once it has ended
  std::atomic<bool> open_{true};
};

}  // namespace sgemm
