// One Multiply call: a gRPC callback reactor whose steps are methods, in the
// order a request goes through them (the reactions and the end in
// multiply_call.cc, the rest in the file named beside each step):
//
//   on_header()      convert, validate (limits, engine), bind the input rows,
//                    size the footprint (multiply_call_sources.cc)
//   admit_memory()   reserve the footprint against the budget at the first
//                    data chunk; when it does not fit, stop reading and wait
//                    (holding nothing) until it does or --idle-timeout passes
//                    (multiply_call_upload.cc)
//   on_chunk()       copy a chunk into its matrix (buffer allocated at the
//                    matrix's first chunk)
//   start_compute()  as the compute-slot policy says (compute_slot_policy.h):
//                    upload complete: C's buffer, a place on the compute pool;
//                    or early (may_start_early()): B (and C) complete, A
//                    arriving fast enough, a compute slot idle now
//                    (multiply_call_compute.cc)
//   run_compute()    (pool thread) Engine::run; when started early it waits
//                    for A's rows through the assembler (InputFeed) and
//                    yields its slot (the engine stops, the call goes back to
//                    receiving) after --feed-wait-budget of waiting in all or
//                    when another request needs the slot; computing restarts
//                    once the upload is complete, and rows already sent are
//                    not sent again
//   send_more()      one chunk of C at a time, as rows are final, sent from
//                    C's buffer without a copy (while A may still arrive)
//                    (multiply_call_outcome.cc)
//   finish()         the error, or (send_more) the summary and the log line: Finish()
//   OnDone()         a failure's log line, with the code the client got
//
// The request's state is one RequestPhase (request_phase.h) and every change
// of it goes through move_to(), which checks the move against the table of
// legal moves; computing started early is its own phase (kEarly), so the
// upload is complete exactly when the phase is past receiving.
//
// Ownership: the call deletes itself when gRPC is done with it (OnDone) and
// no pool task or memory waiter refers to it (refs_). Its buffers and
// reservation go with it.
//
// Stripes (multiply_call_stripes.cc, docs/transport.md): a header with
// stripes > 1 makes this call the request's primary (stripe 0): it owns the
// request as above and makes a StripeGroup; the streams that attach to it
// (secondaries, also MultiplyCalls) copy their chunks into the primary's
// assembler and send the rows of C the primary posts them. No call takes
// another call's lock while holding its own: a secondary calls into its
// primary only with its own mu_ released, and the primary posts rows of C and
// the request's end into the group's mailbox (a leaf lock), then wakes the
// stripe once its own mu_ is released (take_mail). References are atomic
// (ref/unref take no lock). The group holds a reference on the primary; the
// primary holds one on each attached secondary until it has posted the end.
//
// Threads: reactions on gRPC's threads, run_compute()/rows_ready() on a pool
// thread, check_idle()/abort() on the watchdog or shutdown thread, the memory
// grant on whichever thread freed memory. All state is guarded by mu_; gRPC
// operations are started with mu_ held (gRPC never runs a reaction inline).
// Memory goes back to the budget (a release or cancel(), which run other
// calls' grants and so lock them) only with mu_ released; try_reserve() and
// enqueue() take just the budget's lock and may be called under mu_.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "server/engine/resident_store.h"
#include "server/service/batch_request.h"
#include "server/service/codec.h"
#include "server/service/compute_slot_policy.h"
#include "server/service/input_source.h"
#include "server/service/request_coalescer.h"
#include "server/service/request_outcome.h"
#include "server/service/request_phase.h"
#include "server/service/request_report.h"
#include "server/service/sgemm_service.h"
#include "server/service/stripe_group.h"

namespace sgemm {

class MultiplyCall final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
                           private OutputSink,
                           private CoalescedRequest {
 public:
  using Clock = std::chrono::steady_clock;

  // Registers itself with `shared` and starts reading. A non-OK `refuse`
  // ends the call at once with that status (limits on open streams, shutdown).
  // `client` is the caller's (--auth-tokens; null without), charged for the request's quotas.
  // `ticket`: the call's place among the open streams (empty when `refuse` is not OK).
  MultiplyCall(ServiceShared& shared, grpc::CallbackServerContext* ctx, Status refuse, AuthClient* client,
               StreamAdmission::Ticket ticket);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

  // Watchdog: ends the call if it has waited on its client (or for memory)
  // longer than --idle-timeout. Called with shared.calls_mu held.
  void check_idle(Clock::time_point now);
  // Ends the call with `why` unless it has ended (shutdown). Called with
  // shared.calls_mu held.
  void abort(const Status& why);
  // Whether a header has arrived (shutdown ends the calls without one at once).
  bool has_header() const;

  // ---- Stripes (multiply_call_stripes.cc) ----
  // Primary, from a secondary's thread (no lock held): stripe `stripe` sent
  // `msg` (a chunk). *parked: the primary keeps it until memory is granted
  // (the secondary stops reading until resume_read()). An error is the stripe's.
  Status stripe_chunk(MultiplyCall* from, int stripe, RequestMessage& msg, bool* parked);
  // Primary: stripe `stripe`'s client half-closed; its share must be complete.
  void stripe_half_closed(int stripe);
  // Primary, from a secondary's thread (no lock held): a stripe attached. The
  // upload counts as complete only once every stripe has attached (a stripe
  // may have no block of A or B to send, yet its rows of C go out on it).
  void stripe_attached();
  // Primary: stripe `stripe`'s stream failed with `why` (its own status already sent).
  void stripe_failed(int stripe, const Status& why);
  // Secondary, from the primary's thread with no lock held: takes what the
  // primary posted to this stripe in the group (rows of C to send, the
  // request's end) and sends on; an OK end finishes once those rows are sent.
  void take_mail();
  // Secondary: the primary took the parked chunk; read on.
  void resume_read();

 private:
  using Phase = RequestPhase;

  ~MultiplyCall() override;

  // Steps (mu_ held).
  // Moves the request to `to`; an illegal move (check_move) is a bug: logged,
  // and the request ends INTERNAL. False then.
  bool move_to(Phase to);
  bool done() const { return phase_ == Phase::kDone; }
  // Every input is in (or there was nothing to receive): past receiving.
  bool upload_complete() const;
  // The client half-closed (read_closed_): what that means in this phase.
  void on_half_close();
  Status on_message(RequestMessage msg);
  // The header (multiply_call_sources.cc): validates it, makes and binds the
  // request's input rows (input_source.h), sizes the footprint.
  Status on_header(const GemmRequest& header, const RegionOperands& regions, const ResidentOperands& resident = {},
                   const DeviceRefs& device = {});
  // A batch or group's header (multiply_call_batch.cc): the same steps over
  // the concatenated operands, from the same input rows.
  Status on_batch_header(const GemmRequest& header, const RegionOperands& regions, const ResidentOperands& resident);
  // Every row ready at the header and no chunk to come: reserve C, compute.
  Status start_without_upload();
  // After a successful run: C becomes a resident matrix (keep_result).
  Status keep_result();
  // A caller-memory row bound (regions, device buffers): C's destination set
  // up, straight to start_compute(); no receive phase.
  Status start_from_caller_memory();
  // C is written into the caller's output (region or device buffer): nothing to send but the summary.
  bool c_in_caller_memory() const { return caller_memory_ && caller_memory_->writes_c(); }
  GemmRequest request() const;  // the header as the engine's request
  Status admit_memory(RequestMessage& msg, bool* parked);
  Status on_chunk(RequestMessage& msg);
  Status after_chunk();
  bool may_start_early() const;  // the compute-slot policy's early rule, on this request's facts
  Status start_compute(bool early);
  bool accepts_chunks() const;  // a chunk now is part of the upload
  void send_more();
  void finish(const Status& status);
  void set_finished();  // Finish is being called: the stream no longer counts against --max-open-streams
  void log_outcome(const Status& status);  // a failure's line and metrics (a success's go with its summary)
  RequestOutcome outcome() const;          // the facts request_outcome.h records
  std::string_view client_name() const;    // "-" without --auth-tokens

  // Off the reactor.
  void run_compute();
  // The engine has returned `result` (run_compute, or a coalesced launch):
  // the rows are released and the outcome goes out. Ends the task's reference.
  void computed(StatusOr<GemmReport> result);
  // A small request waits in the coalescer (request_coalescer.h) instead of
  // on the pool: its job, the launch's start and end (the launch's thread).
  const GemmJob& coalesced_job() const override { return job_; }
  void coalesced_started() override;
  void coalesced_done(StatusOr<GemmReport> result, int launch_products) override;
  void on_memory_granted(MemoryBudget::Reservation reservation);
  void rows_ready(int64_t row_begin, int64_t row_end) override;

  void start_read();
  Status cancelled_status() const;
  Status cancelled_status_in(Phase phase) const;
  // Work that must not run with mu_ held (cancelling a memory wait, which may
  // grant another call; another call's reference or wake; the stripe failure
  // the primary hears of; a quick compute on this thread), queued under mu_.
  void defer(std::function<void()> work);
  // Releases mu_, then runs the deferred work in order, then run_here_ (a
  // compute start_compute() kept on this thread). Every step that holds mu_
  // ends through it.
  void after_unlock(std::unique_lock<std::mutex>& lock);
  void ref();
  void unref();

  // Stripes (multiply_call_stripes.cc), mu_ held.
  Status start_stripes(int stripes, int64_t stripe_rows);            // primary, at the header
  Status on_attach(const RequestMessage& msg);                       // a secondary's first message
  void on_stripe_read(std::unique_lock<std::mutex>& lock, bool ok);  // a secondary's OnReadDone
  // Primary: ends the group with `status` (OK: the request computed): closes
  // it, tells each secondary, schedules the references' release.
  void close_stripes(const Status& status);
  // Primary: hands rows [b, e) of C to their stripes (stripe 0's to rows_).
  void route_rows(int64_t b, int64_t e);
  Status ensure_buffer(MatrixId matrix, int64_t offset, std::size_t bytes, int stripe);
  // Reserves the footprint, or queues for it (*waiting; memory_ticket_ set); shared by every stripe.
  Status reserve_or_wait(bool* waiting);
  Status reserve_keep();  // keep_result's resident room, with the first data (or at once without upload)
  // What the other stripes of a request see when stripe `origin` failed with `status`.
  static Status seen_by_other_stripes(int origin, int stripes, const Status& status);
  void finish_stream(const Status& status);  // a failure of this stream itself (not the request's)

  ServiceShared& shared_;
  grpc::CallbackServerContext* const ctx_;
  const std::string id_;
  const Clock::time_point t_start_;
  AuthClient* const client_;  // owned by the service's ClientAuth; null without --auth-tokens

  mutable std::mutex mu_;
  std::atomic<int> refs_{1};      // gRPC (until OnDone), pool task, memory waiter, stripes' references
  Phase phase_ = Phase::kHeader;  // guarded by mu_ (and so is everything below); kDone: Finish called
  bool reading_ = false;          // a read is outstanding
  bool writing_ = false;          // a write is outstanding
  int64_t messages_ = 0;          // messages read so far
  Clock::time_point read_since_, write_since_, memory_since_;  // when the current wait began
  Status final_status_;                                        // what Finish sent
  Phase finish_phase_ = Phase::kHeader;                        // the phase the call ended in
  Clock::time_point t_finish_{};
  bool server_reset_ = false;      // we reset the stream (TryCancel): our status stands in the log
  uint64_t memory_ticket_ = 0;     // waiting for memory
  bool may_compute_here_ = false;  // in OnReadDone, unstriped: start_compute() may keep the job on this thread
  grpc::ByteBuffer in_;
  grpc::ByteBuffer out_;
  RequestMessage pending_;  // the chunk that waits for memory

  GemmRequest header_;
  int64_t footprint_bytes_ = 0;  // A + B + C, reserved at the first chunk
  std::optional<MatrixAssembler> assembler_;
  MemoryBudget::Reservation reservation_;
  AuthClient::Lease client_lease_;          // the client's quotas, from the header until the call is answered
  StreamAdmission::Ticket stream_ticket_;   // one of the open streams (and the client's), until the call is answered
  std::shared_ptr<HostBuffer> buffers_[3];  // A, B, C (C's also held by chunks gRPC has yet to write)
  CancelToken cancel_;
  GemmJob job_;
  StatusOr<GemmReport> result_ = Internal("not computed");
  std::deque<std::pair<int64_t, int64_t>> rows_;  // finished rows of C not yet sent
  int64_t send_next_ = -1;                        // next element to send of rows_.front()
  int64_t bytes_in_ = 0, bytes_out_ = 0;
  uint64_t pool_id_ = 0;     // kEarly: the pool's id for the preemptible task
  int early_starts_ = 0;     // times computing started before the upload ended (for the log)
  int yields_ = 0;           // times computing gave its slot back to wait for A
  int launch_products_ = 1;  // products that shared the request's engine launch (coalescing)
  SentRows sent_rows_;       // rows of C reported so far; after a yield, those not to send again
  Clock::time_point t_first_data_{}, t_received_{}, t_submit_{}, t_compute_start_{}, t_compute_end_{};
  // Where the operands come from (input_source.h): the rows, bound at the
  // header and released when the engine returns; caller_memory_ is the region
  // or device row among them (the request uploads nothing), or null.
  std::vector<std::unique_ptr<InputSource>> sources_;
  CallerMemorySource* caller_memory_ = nullptr;
  // Where C goes besides the stream (docs/resident.md): kept resident, as the
  // header asked; a kept C's reserved bytes and, once kept, its handle.
  struct KeepResult {
    bool keep = false;       // C becomes a resident matrix
    bool evictable = false;  // ... that the store may evict
    bool send_c = true;      // false: C's bytes stay on the server, only the summary goes out
  } keep_;
  ResidentBytes keep_bytes_;
  AuthClient::ResidentCharge keep_charge_;  // the kept C against the client's resident quota, until it is stored
  std::string result_handle_;
  // Observability (docs/observability.md): a trace asked for by the header,
  // when the first chunk of C went out.
  bool trace_ = false;
  std::optional<Clock::time_point> t_first_send_;

  // Stripes. Primary: group_ until closed; secondary: group_ for its life.
  int stripe_ = 0;                            // this stream's stripe (0: the header's stream, or no stripes)
  std::shared_ptr<StripeGroup> group_;        // the request's group, when it has stripes
  int fail_origin_ = -1;                      // primary: the stripe whose stream failed (-1: the request failed)
  StatusCode origin_code_ = StatusCode::kOk;  // primary: that stripe's own code (what the request counts as)
  bool read_closed_ = false;                  // the client half-closed: no read is started again
  int64_t stripe_bytes_out_ = 0;              // primary: bytes of C handed to secondaries
  // The request's C bytes written to its streams: stripe 0's own and those
  // handed to the other stripes (each sends its rows). What the summary, the
  // log line, timings.jsonl, the trace and sgemm_sent_bytes_total count.
  int64_t request_bytes_out() const { return bytes_out_ + stripe_bytes_out_; }
  struct ParkedChunk {
    MultiplyCall* from;  // the secondary (a reference held until the chunk is taken)
    int stripe;
    RequestMessage msg;
  };
  std::vector<ParkedChunk> parked_;              // primary: secondaries' chunks waiting for memory
  std::vector<std::function<void()>> deferred_;  // run by after_unlock()
  std::function<void()> run_here_;               // a quick compute on this thread, run by after_unlock() last
};

}  // namespace sgemm
