// Where a one-message product's answer goes: the transport under a
// MultiplyUnaryCall (multiply_unary_call.h). Two rows: the MultiplyUnary RPC's
// gRPC reactor (GrpcUnaryReply, multiply_unary_call.cc) and a slot of a
// request ring in the caller's shared memory (request_ring.h). The call owns
// the request, its phases and its resources; the reply only carries the
// answer out and tells the call when the transport is done with it
// (MultiplyUnaryCall::transport_done) or the caller went away
// (MultiplyUnaryCall::transport_cancelled).
//
// Threads: send() and reset() run with the call's lock held, on whichever
// thread ends the call, so they must never call back into the call; the
// transport reports its end later, on a thread of its own.
#pragma once

#include <grpcpp/support/byte_buffer.h>

#include <string>

#include "common/status.h"
#include "server/service/compute_slot_policy.h"

namespace sgemm {

class UnaryReply {
 public:
  virtual ~UnaryReply() = default;
  // The caller as gRPC names it ("fd:N" on the server's Unix socket): the
  // caller's shared-memory regions are found by it.
  virtual const std::string& peer() const = 0;
  // The transport's name in the log line, timings.jsonl and metrics ("unary", "ring").
  virtual const char* rpc() const = 0;
  // The thread that starts the call (MultiplyUnaryCall::start), as the compute-slot policy tells them apart.
  virtual Receiver receiver() const = 0;
  // The answer: `status`, and when it is OK `answer` (a MultiplyUnaryResponse's bytes). Once per call.
  virtual void send(const Status& status, grpc::ByteBuffer answer) = 0;
  // The answer went out --idle-timeout ago and the transport still holds it
  // (the caller does not take it): drop it, ending the transport.
  virtual void reset() = 0;
};

}  // namespace sgemm
