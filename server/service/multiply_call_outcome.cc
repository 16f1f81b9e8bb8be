// MultiplyCall's outcome: C goes out one chunk at a time from C's own buffer
// (send_more), then the summary with the status; the request's log, timing
// and metrics lines are request_outcome.h's, from the call's facts (outcome()).
#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <cstdio>
#include <optional>

#include "proto/grpc_status.h"
#include "server/service/multiply_call.h"

namespace sgemm {

namespace {

double ms_between(MultiplyCall::Clock::time_point a, MultiplyCall::Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

void MultiplyCall::send_more() {
  if (done() || writing_) return;
  const int64_t n = c_row_elements(header_);  // elements per reported row of C
  if (!rows_.empty()) {
    const auto [r0, r1] = rows_.front();
    if (send_next_ < 0) send_next_ = r0 * n;
    const int64_t end = r1 * n;
    const int64_t chunk_elems = std::max<int64_t>(1, shared_.options.response_chunk_bytes / int64_t(sizeof(float)));
    const int64_t count = std::min(chunk_elems, end - send_next_);
    out_ = encode_c_chunk(job_.c, send_next_, count, buffers_[static_cast<int>(MatrixId::kC)]);
    send_next_ += count;
    bytes_out_ += count * int64_t(sizeof(float));
    if (send_next_ >= end) {
      rows_.pop_front();
      send_next_ = -1;
    }
    writing_ = true;
    write_since_ = Clock::now();
    if (!t_first_send_) t_first_send_ = write_since_;
    StartWrite(&out_);
    return;
  }
  if (stripe_ > 0) {  // a secondary stripe: its rows are sent; it finishes once the request succeeded
    if (std::optional<Status> end = group_->end_of(stripe_); end && end->ok()) {
      final_status_ = Status::Ok();
      set_finished();
      Finish(to_grpc(Status::Ok()));
    }
    return;
  }
  if (phase_ != Phase::kSending) return;  // the engine has not returned
  if (!result_.ok()) return finish(result_.status());
  // Everything sent: the summary goes with the status.
  // Every stripe's bytes: the assembler counts each chunk as it commits it.
  if (assembler_) bytes_in_ = assembler_->bytes_received();
  out_ = answer_success(shared_, outcome(), *result_);  // the log line, timings and metrics are written first
  final_status_ = Status::Ok();
  set_finished();
  writing_ = true;  // no OnWriteDone follows; the watchdog resets the stream if this never drains
  write_since_ = Clock::now();
  StartWriteAndFinish(&out_, grpc::WriteOptions(), to_grpc(Status::Ok()));
}

RequestOutcome MultiplyCall::outcome() const {
  RequestOutcome o;
  o.id = id_;
  o.peer = ctx_->peer();
  o.client = client_;
  o.header = header_;
  o.rpc = "stream";
  o.start = t_start_;
  o.received = t_received_;
  o.submitted = t_submit_;
  o.compute_start = t_compute_start_;
  o.compute_end = t_compute_end_;
  o.first_send = t_first_send_;
  o.finished = t_finish_;
  o.bytes_in = bytes_in_;
  o.bytes_out = request_bytes_out();
  o.stripes = assembler_ ? assembler_->stripes() : 0;
  o.trace_asked = trace_;
  o.result_handle = result_handle_;
  o.launch_products = launch_products_;
  o.early_starts = early_starts_;
  o.yields = yields_;
  return o;
}

void MultiplyCall::log_outcome(const Status& st) {
  if (st.ok()) return;  // a success was recorded with its summary (answer_success)
  const double total_ms = ms_between(t_start_, t_finish_);
  if (stripe_ > 0) {  // a secondary stripe: its request's line is the primary's; failures say which stripe
    if (!shared_.log.admit(spdlog::level::warn)) return;
    shared_.log.write(
        spdlog::level::warn,
        fmt::format("stripe {} of request id={} peer={} client={} status={} phase=\"{}\" total_ms={:.3f} "
                    "error=\"{}\"",
                    stripe_, group_ ? group_->primary()->id_ : std::string("?"), ctx_->peer(), client_name(),
                    status_code_name(st.code()), phase_name(finish_phase_), total_ms, log_field(st.message())));
    return;
  }
  // A request ended by one of its stripes counts as that stripe's failure:
  // a client that cancels one stream (Ctrl-C cancels them all) cancelled the
  // request, though the other streams carry ABORTED (docs/transport.md).
  const StatusCode code = st.code() == StatusCode::kAborted && fail_origin_ > 0 ? origin_code_ : st.code();
  // Streams that never sent anything are the cheapest to open: log them at debug level.
  const auto level = messages_ == 0 && code == StatusCode::kCancelled ? spdlog::level::debug : spdlog::level::warn;
  record_failure(shared_, outcome(), code, st.message(), phase_name(finish_phase_), level);
}

}  // namespace sgemm
