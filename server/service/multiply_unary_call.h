// One product whose request and answer each fit in one message (sgemm.proto
// MultiplyUnary, or a request ring's slot: OpenRing), answered through the
// same request path as a Multiply stream (multiply_call.h). The answer leaves
// through the call's UnaryReply (unary_reply.h: gRPC's reactor or the ring's
// slot), which is all the call knows of its transport. In the order a
// request goes through it
// (the message read and the operands assembled in multiply_unary_receive.cc,
// the rest in multiply_unary_call.cc):
//
//   start()      (the handler's or the ring's thread) the message is read in place as the
//                stream's messages are (codec.h decode_unary_request); the
//                header gets the stream's checks (request_checks.h) and
//                the unary limit; the upload row is bound (input_source.h),
//                the footprint reserved against the one host-memory budget
//                (or waited for, as a stream's first chunk waits, holding
//                the message, up to --idle-timeout),
//                the client's quota admitted, each chunk copied once into
//                its matrix with the assembler's checks; operands named by
//                handle or in the caller's shared-memory regions are bound
//                by their rows and not sent (a C written into an output
//                region does not come back)
//   compute      where the stream's complete requests compute, decided in
//                the same place (compute_start.h): with other small
//                requests in one launch, here on the handler's thread when
//                the compute-slot policy allows it (--inline-compute-ms) and
//                a slot is idle, or queued on the pool
//   computed()   C (one chunk over C's own buffer, no copy) and the summary
//                in one message (request_outcome.h writes the log line,
//                timings, metrics and trace as for the stream), then the
//                reply sends it
//   check_idle() an answer the transport has not delivered --idle-timeout
//                after it was sent (the client does not read it: an answer
//                larger than the flow-control window waits for the client)
//                is reset (CANCELLED in the log and metrics, as the stream
//                resets a client that reads no part of C) and the call's
//                reservation and buffers go back at once, not at the
//                transport's end
//
// Phases: the stream's RequestPhase table (request_phase.h), kHeader ->
// kReceiving (-> kWaitMemory -> kReceiving) -> kQueued -> kComputing ->
// kSending -> kDone.
//
// Ownership: the call owns its reply and deletes itself when the transport is
// done with it (transport_done) and no compute task refers to it (refs_);
// its buffers and reservation go with it, unless check_idle() released them
// before (they are released once).
//
// Threads: start() on the handler's (or ring's) thread before the reactor is
// returned; the engine on a pool thread, the handler's or a coalesced
// launch's; transport_cancelled and transport_done on the transport's;
// abort() on the shutdown thread and check_idle() on the watchdog's
// (shared.calls_mu held); the memory grant on whichever thread freed memory.
// The phase and the answer are guarded by mu_; the reply sends with it held
// (no transport runs a reaction inline).
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/cancel_token.h"
#include "server/service/codec.h"
#include "server/service/input_source.h"
#include "server/service/request_coalescer.h"
#include "server/service/request_outcome.h"
#include "server/service/request_phase.h"
#include "server/service/sgemm_service.h"
#include "server/service/unary_reply.h"

namespace sgemm {

class MultiplyUnaryCall final : private CoalescedRequest {
 public:
  using Clock = std::chrono::steady_clock;

  // Registers itself with `shared`. A non-OK `refuse` (shutdown, the open
  // stream limits, a bad token) is the answer; `client` is the caller's
  // (--auth-tokens; null without); `ticket` its place among the open streams.
  MultiplyUnaryCall(ServiceShared& shared, std::unique_ptr<UnaryReply> reply, Status refuse, AuthClient* client,
                    StreamAdmission::Ticket ticket);

  // Answers `request` (the handler's thread): the engine may run on this
  // thread before it returns. `request` need not outlive the call.
  void start(const grpc::ByteBuffer& request);

  // The caller went away (`deadline`: its deadline passed) before the answer.
  void transport_cancelled(bool deadline);
  // The transport is done with the call (gRPC's OnDone; the ring's answer delivered or dropped).
  void transport_done();
  // Ends the call with `why` unless answered (shutdown). shared.calls_mu held.
  void abort(const Status& why);
  // Watchdog: ends a wait for memory longer than --idle-timeout, and resets
  // a call whose answer gRPC has not delivered --idle-timeout after Finish,
  // releasing its memory. shared.calls_mu held.
  void check_idle(Clock::time_point now);

 private:
  using Phase = RequestPhase;

  ~MultiplyUnaryCall();

  // Decode, check, reserve (or queue for the memory: kWaitMemory). mu_ held.
  Status receive(const grpc::ByteBuffer& request);
  // The memory was granted (the thread that freed it).
  void on_memory_granted(MemoryBudget::Reservation reservation);
  // Copies the chunks into their matrices, then hands the job to the
  // coalescer or the pool, or keeps it for this thread (run_here_) when the
  // policy allows and `on_handler_thread`. mu_ held.
  Status assemble_and_submit(bool on_handler_thread);
  Status submit_from_caller_memory(bool on_handler_thread);
  Status submit(bool on_handler_thread);
  // Releases mu_, then cancels a memory wait the call ended (cancel_ticket_)
  // and runs a compute kept for this thread (run_here_). Every step that
  // holds mu_ ends through it.
  void after_unlock(std::unique_lock<std::mutex>& lock);
  void run_compute();  // the engine (a pool thread or the handler's); ends the task's reference
  // The engine returned: the answer goes out. Ends the task's reference.
  void computed(StatusOr<GemmReport> result);
  const GemmJob& coalesced_job() const override { return job_; }
  void coalesced_started() override;
  void coalesced_done(StatusOr<GemmReport> result, int launch_products) override;

  bool move_to(Phase to);  // false (and the call ended INTERNAL) for an illegal move
  bool done() const { return phase_ == Phase::kDone; }
  // The error (or, from computed(), OK with the answer) goes out; mu_ held.
  void finish(const Status& status, grpc::ByteBuffer answer = {});
  RequestOutcome outcome() const;
  void unref();

  ServiceShared& shared_;
  const std::unique_ptr<UnaryReply> reply_;
  const std::string id_;
  const Clock::time_point t_start_;
  AuthClient* const client_;  // owned by the service's ClientAuth; null without --auth-tokens

  std::mutex mu_;
  std::atomic<int> refs_{1};      // the transport (until transport_done), the memory waiter, the compute task
  Phase phase_ = Phase::kHeader;  // guarded by mu_, as is everything below
  Status refuse_;                 // the answer when not OK (start() sends it)
  GemmRequest header_;
  bool trace_ = false;
  int64_t footprint_bytes_ = 0;
  std::optional<MatrixAssembler> assembler_;
  std::vector<RequestMessage> pending_;  // the decoded message (its slices) until assembled
  uint64_t memory_ticket_ = 0;           // waiting for memory (kWaitMemory)
  uint64_t cancel_ticket_ = 0;           // a wait the call ended: cancelled by after_unlock()
  Clock::time_point memory_since_{};
  enum class RunHere { kNo, kAlone, kCoalesced };
  RunHere run_here_ = RunHere::kNo;                    // a compute start kept for this thread, run by after_unlock()
  std::vector<std::unique_ptr<InputSource>> sources_;  // the request's rows, bound at the header
  CallerMemorySource* caller_memory_ = nullptr;        // the region row of sources_, if any (set at the header)
  MemoryBudget::Reservation reservation_;   // until the call goes, or check_idle() resets an answer not taken
  AuthClient::Lease client_lease_;          // the client's quotas, until answered
  StreamAdmission::Ticket stream_ticket_;   // one of the open streams, until answered
  std::shared_ptr<HostBuffer> buffers_[3];  // A, B, C (C's also held by the answer until gRPC has sent it)
  CancelToken cancel_;
  GemmJob job_;
  int launch_products_ = 1;
  int64_t bytes_in_ = 0, bytes_out_ = 0;
  Phase finish_phase_ = Phase::kHeader;
  Clock::time_point t_received_{}, t_submit_{}, t_compute_start_{}, t_compute_end_{}, t_finish_{};
  Clock::time_point t_first_send_{};  // the answer (C and the summary) went to the reply
};

// The MultiplyUnary RPC's transport: gRPC's reactor for the call, owned by
// the call it answers (bound before the handler returns it to gRPC).
class GrpcUnaryReply final : public grpc::ServerUnaryReactor, public UnaryReply {
 public:
  GrpcUnaryReply(grpc::CallbackServerContext* ctx, grpc::ByteBuffer* response);
  // An atomic: gRPC's hand-off between the handler's thread and its own
  // (OnCancel, OnDone) is not visible to ThreadSanitizer.
  void bind(MultiplyUnaryCall* call) { call_.store(call, std::memory_order_release); }

  const std::string& peer() const override { return peer_; }
  const char* rpc() const override { return "unary"; }
  Receiver receiver() const override { return Receiver::kGrpc; }
  void send(const Status& status, grpc::ByteBuffer answer) override;
  void reset() override { ctx_->TryCancel(); }
  void OnCancel() override;
  void OnDone() override;
  // gRPC's unary handler asks this, a virtual call that reads this reactor's
  // vtable, on the thread that ran the handler or the Finish, just before it
  // hands OnDone to its executor; OnDone deletes this reactor with the call.
  // The ask releases, and OnDone acquires, this reactor (reactor_handoff.h
  // says why; an annotation under TSan only). The answer is gRPC's default:
  // OnDone and OnCancel run on its executor, never inline.
  bool InternalInlineable() override;

 private:
  grpc::CallbackServerContext* const ctx_;
  grpc::ByteBuffer* const response_;
  const std::string peer_;  // read once: a reset context has none
  std::atomic<MultiplyUnaryCall*> call_{nullptr};
};

}  // namespace sgemm
