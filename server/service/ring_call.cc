#include "server/service/ring_call.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include "common/request_ring.h"
#include "proto/grpc_status.h"
#include "server/service/multiply_unary_call.h"
#include "server/service/reactor_handoff.h"

namespace sgemm {

// What the ring's thread and the replies of its slots share.
struct RingState {
  std::shared_ptr<const MappedRegion> region;  // keeps the ring mapped until the last reply goes
  ring::RingView view;
  RingCall::Caller caller;

  std::mutex mu;
  std::vector<bool> taken;                   // guarded by mu: a slot whose call has not answered yet
  std::vector<MultiplyUnaryCall*> answered;  // guarded by mu: calls whose transport_done the thread runs
  int open_calls = 0;                        // guarded by mu: calls started and not yet done
  bool stopping = false;                     // guarded by mu
  Status end = Status::Ok();                 // guarded by mu: the OpenRing call's status

  // Wakes the ring's thread (it may sleep on the doorbell): a change of the
  // word makes a wait that read the old value return at once.
  void wake_thread() {
    view.header()->doorbell.fetch_add(1, std::memory_order_seq_cst);
    ring::futex_wake_all(&view.header()->doorbell);
  }
};

namespace {

// A slot as a MultiplyUnaryCall's reply: the answer goes into the slot.
class RingSlotReply final : public UnaryReply {
 public:
  RingSlotReply(std::shared_ptr<RingState> state, int slot) : state_(std::move(state)), slot_(slot) {}
  void bind(MultiplyUnaryCall* call) { call_ = call; }

  const std::string& peer() const override { return state_->caller.peer; }
  const char* rpc() const override { return "ring"; }
  Receiver receiver() const override { return Receiver::kRing; }

  void send(const Status& status, grpc::ByteBuffer answer) override {
    ring::SlotHeader* h = state_->view.slot(slot_);
    uint8_t* out = state_->view.payload(slot_);
    const auto capacity = std::size_t(state_->view.payload_capacity());
    Status st = status;
    std::size_t n = 0;
    if (st.ok()) {
      if (answer.Length() > capacity) {
        st = ResourceExhausted("the answer (" + std::to_string(answer.Length()) +
                               " bytes) does not fit the ring's slot payload of " + std::to_string(capacity) +
                               " bytes: open the ring with larger slot_bytes");
      } else {
        std::vector<grpc::Slice> slices;
        (void)answer.Dump(&slices);
        for (const grpc::Slice& s : slices) {
          std::memcpy(out + n, s.begin(), s.size());
          n += s.size();
        }
      }
    }
    if (!st.ok()) {
      n = std::min(st.message().size(), capacity);
      std::memcpy(out, st.message().data(), n);
    }
    h->answer_bytes = uint32_t(n);
    h->status_code = int32_t(to_grpc(st).error_code());
    h->state.store(ring::kAnswered, std::memory_order_seq_cst);
    // The caller sets caller_waiting before it sleeps on the state, and
    // re-reads the state after: one of the two sides sees the other's store.
    if (h->caller_waiting.load(std::memory_order_seq_cst) != 0) ring::futex_wake_all(&h->state);
    {
      std::lock_guard lock(state_->mu);
      state_->taken[std::size_t(slot_)] = false;
      state_->answered.push_back(call_);
    }
    state_->wake_thread();
  }

  // The answer is in the slot once sent: nothing is held for the caller to take.
  void reset() override {}

 private:
  const std::shared_ptr<RingState> state_;
  const int slot_;
  MultiplyUnaryCall* call_ = nullptr;
};

Status open_status(const v1::OpenRingRequest& req, const MappedRegion* region, ring::RingView* view) {
  if (!region) return NotFound("region '" + req.region() + "' is not registered for this caller");
  SGEMM_RETURN_IF_ERROR(ring::check_layout(req.offset(), req.slots(), req.slot_bytes(), region->bytes()));
  *view = ring::RingView(region->data() + req.offset(), req.slots(), req.slot_bytes());
  return view->check_header();
}

}  // namespace

RingCall::RingCall(ServiceShared& shared, const v1::OpenRingRequest& req, std::shared_ptr<const MappedRegion> region,
                   Caller caller, Status refuse)
    : shared_(shared), state_(std::make_shared<RingState>()) {
  state_->caller = std::move(caller);
  Status st = refuse.ok() ? open_status(req, region.get(), &state_->view) : refuse;
  if (st.ok()) {
    std::lock_guard lock(shared_.calls_mu);
    if (shared_.shutting_down.load()) {
      st = Unavailable("server shutting down; retry on another replica or later");
    } else if (int(shared_.rings.size()) >= shared_.options.max_rings) {
      st = ResourceExhausted("too many request rings open (--max-rings " + std::to_string(shared_.options.max_rings) +
                             "); close one or use MultiplyUnary");
    } else {
      shared_.rings.insert(this);
      registered_ = true;
    }
  }
  if (!st.ok()) {
    std::lock_guard lock(made_mu_);  // as below
    Finish(to_grpc(st));
    return;
  }
  state_->region = std::move(region);
  state_->taken.assign(std::size_t(req.slots()), false);
  opened_.set_opened(true);
  opened_.set_spin_us(shared_.options.ring_spin.count());
  StartWrite(&opened_);
  // Held until the constructor returns: it orders the constructor's writes
  // before gRPC's reactions read them (gRPC's own hand-off between its
  // threads is not visible to ThreadSanitizer).
  std::lock_guard lock(made_mu_);
  thread_ = std::thread([this] { run(); });
}

RingCall::~RingCall() = default;

void RingCall::stop(const Status& why) {
  {
    std::lock_guard lock(state_->mu);
    if (state_->stopping) return;
    state_->stopping = true;
    state_->end = why;
  }
  state_->wake_thread();
}

// Nothing to do once the opening event is written, but gRPC called this
// through the vtable and may hand OnDone, which deletes this reactor, to
// another thread: the reaction orders itself before OnDone
// (reactor_handoff.h).
void RingCall::OnWriteDone(bool) { reactor_handoff_release(this); }

void RingCall::OnCancel() {
  { std::lock_guard made(made_mu_); }  // the constructor's writes first
  if (registered_) stop(Cancelled("the caller closed the ring"));
}

void RingCall::OnDone() {
  reactor_handoff_acquire(this);       // after OnWriteDone's call
  { std::lock_guard made(made_mu_); }  // the constructor's writes first
  if (thread_.joinable()) thread_.join();
  if (registered_) {
    std::lock_guard lock(shared_.calls_mu);
    shared_.rings.erase(this);
  }
  shared_.calls_cv.notify_all();
  delete this;
}

void RingCall::run() {
  using Clock = std::chrono::steady_clock;
  RingState& st = *state_;
  ring::RingHeader* header = st.view.header();
  const auto spin = shared_.options.ring_spin;
  auto last_activity = Clock::now();
  std::vector<MultiplyUnaryCall*> answered;
  for (;;) {
    bool activity = false;
    bool stopping = false;
    {
      std::lock_guard lock(st.mu);
      answered.swap(st.answered);
      st.open_calls -= int(answered.size());
      stopping = st.stopping;
      if (stopping && st.open_calls == 0 && answered.empty()) break;
    }
    for (MultiplyUnaryCall* call : answered) call->transport_done();  // may delete the call and its reply
    activity = !answered.empty();
    answered.clear();

    if (!stopping) {
      for (int i = 0; i < st.view.slots(); ++i) {
        ring::SlotHeader* h = st.view.slot(i);
        if (h->state.load(std::memory_order_acquire) != ring::kPosted) continue;
        {
          std::lock_guard lock(st.mu);
          if (st.taken[std::size_t(i)]) continue;  // re-posted while its call runs: the caller's mistake
          st.taken[std::size_t(i)] = true;
          ++st.open_calls;
        }
        h->state.store(ring::kTaken, std::memory_order_relaxed);
        // The request's bytes are copied out before anything parses them: the
        // caller may change the slot at any time.
        const uint32_t asked = h->request_bytes;
        const std::size_t n = std::min<std::size_t>(asked, std::size_t(st.view.payload_capacity()));
        grpc::Slice bytes(st.view.payload(i), n);
        const grpc::ByteBuffer request(&bytes, 1);
        Status refuse;
        if (asked > n)
          refuse = InvalidArgument("request_bytes: " + std::to_string(asked) + " exceed the slot's payload of " +
                                   std::to_string(n) + " bytes");
        else if (shared_.connections && shared_.connections->find(st.caller.peer).connection != st.caller.connection)
          refuse = Unavailable("the ring's connection has closed");
        StatusOr<StreamAdmission::Ticket> ticket =
            Unavailable("server shutting down; retry on another replica or later");
        if (refuse.ok() && !shared_.shutting_down.load())
          ticket = shared_.admission.open(st.caller.admission, st.caller.client);
        if (refuse.ok() && !ticket.ok()) refuse = ticket.status();
        auto reply = std::make_unique<RingSlotReply>(state_, i);
        RingSlotReply* slot_reply = reply.get();
        auto* call = new MultiplyUnaryCall(shared_, std::move(reply), refuse, st.caller.client,
                                           ticket.ok() ? std::move(ticket).value() : StreamAdmission::Ticket());
        slot_reply->bind(call);
        call->start(request);
        activity = true;
      }
    }
    const auto now = Clock::now();
    if (activity) {
      last_activity = now;
      continue;
    }
    if (now - last_activity < spin) {
      ring::poll_pause();
      continue;
    }
    // Sleep until the caller posts (or a reply or stop() wakes the thread):
    // announce the sleep, then look once more, so a post made in between is seen.
    const uint32_t seen = header->doorbell.load(std::memory_order_seq_cst);
    header->server_waiting.store(1, std::memory_order_seq_cst);
    bool pending = false;
    {
      std::lock_guard lock(st.mu);
      // Stopping, the thread waits (asleep) for the calls it started; a slot
      // posted again while its call runs does not count: it would keep the
      // thread awake.
      pending = !st.answered.empty() || (st.stopping && st.open_calls == 0);
      for (int i = 0; i < st.view.slots() && !pending && !st.stopping; ++i)
        pending = !st.taken[std::size_t(i)] && st.view.slot(i)->state.load(std::memory_order_seq_cst) == ring::kPosted;
    }
    if (!pending) ring::futex_wait(&header->doorbell, seen, /*timeout_us=*/100000);
    header->server_waiting.store(0, std::memory_order_relaxed);
    last_activity = Clock::now();
  }
  Status end;
  {
    std::lock_guard lock(st.mu);
    end = st.end;
  }
  // A caller that cancelled sees no status; a stop for shutdown is UNAVAILABLE.
  Finish(to_grpc(end.code() == StatusCode::kCancelled ? Status::Ok() : end));
}

}  // namespace sgemm
