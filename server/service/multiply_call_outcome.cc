// MultiplyCall's outcome: C goes out one chunk at a time from C's own buffer
// (send_more), then the summary with the status; and the request's log,
// timing and metrics lines (log_outcome).
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
  const Clock::time_point now = Clock::now();
  facts_.request_id = id_;
  facts_.unix_time = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  facts_.request = header_;
  facts_.received_ms = ms_between(t_start_, t_received_);
  facts_.submitted_ms = ms_between(t_start_, t_submit_);
  facts_.compute_start_ms = ms_between(t_start_, t_compute_start_);
  facts_.compute_end_ms = ms_between(t_start_, t_compute_end_);
  facts_.first_send_ms = t_first_send_ ? ms_between(t_start_, *t_first_send_) : -1.0;
  facts_.summary_ms = ms_between(t_start_, now);
  facts_.bytes_in = bytes_in_;
  facts_.bytes_out = request_bytes_out();
  if (trace_ || !shared_.options.trace_dir.empty()) trace_json_ = chrome_trace_json(facts_, *result_);
  SummaryFigures f;
  f.request_id = id_;
  f.queue_ms = ms_between(t_submit_, t_compute_start_);
  f.receive_ms = ms_between(t_start_, t_received_);
  f.compute_ms = ms_between(t_compute_start_, t_compute_end_);
  f.total_ms = facts_.summary_ms;
  f.send_ms = facts_.first_send_ms >= 0 ? facts_.summary_ms - facts_.first_send_ms : 0.0;
  f.bytes_received = bytes_in_;
  f.bytes_sent = request_bytes_out();
  f.stripes = assembler_ ? assembler_->stripes() : 0;
  if (trace_) f.trace_json = trace_json_;
  f.result_handle = result_handle_;
  f.batch = header_.batch;
  f.launch_products = launch_products_;
  out_ = encode_summary(*result_, f);
  final_status_ = Status::Ok();
  set_finished();
  log_outcome(final_status_);  // before the client has its result: the timing line is there when it looks
  writing_ = true;             // no OnWriteDone follows; the watchdog resets the stream if this never drains
  write_since_ = Clock::now();
  StartWriteAndFinish(&out_, grpc::WriteOptions(), to_grpc(Status::Ok()));
}

void MultiplyCall::log_outcome(const Status& st) {
  const double total_ms = ms_between(t_start_, t_finish_);
  const GemmShape& s = header_.shape;
  if (stripe_ > 0) {  // a secondary stripe: its request's line is the primary's; failures say which stripe
    if (st.ok() || !shared_.log.admit(spdlog::level::warn)) return;
    shared_.log.write(
        spdlog::level::warn,
        fmt::format("stripe {} of request id={} peer={} client={} status={} phase=\"{}\" total_ms={:.3f} "
                    "error=\"{}\"",
                    stripe_, group_ ? group_->primary()->id_ : std::string("?"), ctx_->peer(), client_name(),
                    status_code_name(st.code()), phase_name(finish_phase_), total_ms, log_field(st.message())));
    return;
  }
  if (!st.ok()) {
    // A request ended by one of its stripes counts as that stripe's failure:
    // a client that cancels one stream (Ctrl-C cancels them all) cancelled the
    // request, though the other streams carry ABORTED (docs/transport.md).
    const StatusCode code = st.code() == StatusCode::kAborted && fail_origin_ > 0 ? origin_code_ : st.code();
    shared_.requests_failed.fetch_add(1);
    if (shared_.metrics)
      shared_.metrics->record(code, client_ ? client_->name() : std::string(), bytes_in_, request_bytes_out(), nullptr);
    // Streams that never sent anything are the cheapest to open: log them at debug level.
    const auto level = messages_ == 0 && code == StatusCode::kCancelled ? spdlog::level::debug : spdlog::level::warn;
    if (!shared_.log.admit(level)) return;  // formatting is most of a reset stream's cost
    shared_.log.write(
        level,
        fmt::format("request id={} peer={} client={} m={} n={} k={} status={} phase=\"{}\" total_ms={:.3f} "
                    "bytes_in={} bytes_out={} error=\"{}\"",
                    id_, ctx_->peer(), client_name(), s.m, s.n, s.k, status_code_name(code), phase_name(finish_phase_),
                    total_ms, bytes_in_, request_bytes_out(), log_field(st.message())));
    return;
  }
  const GemmReport& r = *result_;
  const double queue_ms = ms_between(t_submit_, t_compute_start_);
  const double receive_ms = ms_between(t_start_, t_received_);
  const double compute_ms = ms_between(t_compute_start_, t_compute_end_);
  shared_.log.logger().info(
      "request id={} peer={} client={} m={} n={} k={} alpha={} beta={} has_c={} backend={} kernel={} split={} "
      "status=OK queue_ms={:.3f} receive_ms={:.3f} compute_ms={:.3f} total_ms={:.3f} bytes_in={} "
      "bytes_out={} gflops={:.1f} devices={} early_start={} yields={} plan=\"{}\"",
      id_, ctx_->peer(), client_name(), s.m, s.n, s.k, header_.alpha, header_.beta, header_.has_c, r.backend,
      report_kernel_name(r), split_mode_name(r.split), queue_ms, receive_ms, compute_ms, total_ms, bytes_in_,
      request_bytes_out(), (header_.batch ? header_.batch->flops() : s.flops()) / (total_ms * 1e6), r.devices.size(),
      early_starts_ > 0, yields_, r.plan_reason);
  TimingRecord record = timing_record_of(facts_, r);
  if (client_) record.caller = client_->name();
  if (shared_.metrics)  // a shared launch's kernels are counted once, by the coalescer's on_launch
    shared_.metrics->record(StatusCode::kOk, record.caller, bytes_in_, request_bytes_out(), &record,
                            /*count_kernels=*/launch_products_ <= 1);
  if (shared_.timing_log)
    shared_.timing_log->info(timing_record_json(
        record, "{\"early_start\":" + std::string(early_starts_ > 0 ? "true" : "false") +
                    ",\"yields\":" + std::to_string(yields_) +
                    ",\"launch_products\":" + std::to_string(launch_products_) + batch_timing_json(header_, r) + "}"));
  if (!shared_.options.trace_dir.empty()) {
    const std::string path = shared_.options.trace_dir + "/trace-" + id_ + ".json";
    std::FILE* file = std::fopen(path.c_str(), "w");
    if (!file || std::fwrite(trace_json_.data(), 1, trace_json_.size(), file) != trace_json_.size())
      shared_.log.write(spdlog::level::warn, "request id=" + id_ + ": cannot write the trace " + path);
    if (file) std::fclose(file);
  }
}

}  // namespace sgemm
