#include "server/service/request_outcome.h"

#include <spdlog/fmt/fmt.h>

#include <cstdio>

#include "server/service/batch_request.h"
#include "server/service/codec.h"
#include "server/service/sgemm_service.h"

namespace sgemm {

namespace {

double ms_between(RequestOutcome::Clock::time_point a, RequestOutcome::Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

std::string_view client_name(const RequestOutcome& o) { return o.client ? std::string_view(o.client->name()) : "-"; }

}  // namespace

grpc::ByteBuffer answer_success(ServiceShared& shared, const RequestOutcome& o, const GemmReport& report) {
  const auto now = RequestOutcome::Clock::now();
  RequestFacts facts;
  facts.request_id = o.id;
  facts.unix_time = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  facts.request = o.header;
  facts.received_ms = ms_between(o.start, o.received);
  facts.submitted_ms = ms_between(o.start, o.submitted);
  facts.compute_start_ms = ms_between(o.start, o.compute_start);
  facts.compute_end_ms = ms_between(o.start, o.compute_end);
  facts.first_send_ms = o.first_send ? ms_between(o.start, *o.first_send) : -1.0;
  facts.summary_ms = ms_between(o.start, now);
  facts.bytes_in = o.bytes_in;
  facts.bytes_out = o.bytes_out;
  std::string trace_json;  // made once, for the summary and/or --trace-dir
  if (o.trace_asked || !shared.options.trace_dir.empty()) trace_json = chrome_trace_json(facts, report);

  SummaryFigures f;
  f.request_id = o.id;
  f.queue_ms = ms_between(o.submitted, o.compute_start);
  f.receive_ms = facts.received_ms;
  f.compute_ms = ms_between(o.compute_start, o.compute_end);
  f.total_ms = facts.summary_ms;
  f.send_ms = facts.first_send_ms >= 0 ? facts.summary_ms - facts.first_send_ms : 0.0;
  f.bytes_received = o.bytes_in;
  f.bytes_sent = o.bytes_out;
  f.stripes = o.stripes;
  if (o.trace_asked) f.trace_json = trace_json;
  f.result_handle = o.result_handle;
  f.batch = o.header.batch;
  f.launch_products = o.launch_products;
  grpc::ByteBuffer summary = encode_summary(report, f);

  // The log line, the timings record, the metrics and the trace file: before
  // the client has its result.
  const GemmShape& s = o.header.shape;
  const double total_ms = facts.summary_ms;
  shared.log.logger().info(
      "request id={} peer={} client={} rpc={} m={} n={} k={} alpha={} beta={} has_c={} backend={} kernel={} "
      "split={} status=OK queue_ms={:.3f} receive_ms={:.3f} compute_ms={:.3f} total_ms={:.3f} bytes_in={} "
      "bytes_out={} gflops={:.1f} devices={} early_start={} yields={} plan=\"{}\"",
      o.id, o.peer, client_name(o), o.rpc, s.m, s.n, s.k, o.header.alpha, o.header.beta, o.header.has_c, report.backend,
      report_kernel_name(report), split_mode_name(report.split), f.queue_ms, f.receive_ms, f.compute_ms, total_ms,
      o.bytes_in, o.bytes_out, (o.header.batch ? o.header.batch->flops() : s.flops()) / (total_ms * 1e6),
      report.devices.size(), o.early_starts > 0, o.yields, report.plan_reason);
  TimingRecord record = timing_record_of(facts, report);
  if (o.client) record.caller = o.client->name();
  if (shared.metrics)  // a shared launch's kernels are counted once, by the coalescer's on_launch
    shared.metrics->record(StatusCode::kOk, record.caller, o.bytes_in, o.bytes_out, &record,
                           /*count_kernels=*/o.launch_products <= 1);
  if (shared.timing_log)
    shared.timing_log->info(timing_record_json(record, "{\"rpc\":\"" + std::string(o.rpc) + "\",\"early_start\":" +
                                                           std::string(o.early_starts > 0 ? "true" : "false") +
                                                           ",\"yields\":" + std::to_string(o.yields) +
                                                           ",\"launch_products\":" + std::to_string(o.launch_products) +
                                                           batch_timing_json(o.header, report) + "}"));
  if (!shared.options.trace_dir.empty()) {
    const std::string path = shared.options.trace_dir + "/trace-" + o.id + ".json";
    std::FILE* file = std::fopen(path.c_str(), "w");
    if (!file || std::fwrite(trace_json.data(), 1, trace_json.size(), file) != trace_json.size())
      shared.log.write(spdlog::level::warn, "request id=" + o.id + ": cannot write the trace " + path);
    if (file) std::fclose(file);
  }
  return summary;
}

void record_failure(ServiceShared& shared, const RequestOutcome& o, StatusCode code, const std::string& message,
                    const char* phase, spdlog::level::level_enum level) {
  shared.requests_failed.fetch_add(1);
  if (shared.metrics)
    shared.metrics->record(code, o.client ? o.client->name() : std::string(), o.bytes_in, o.bytes_out, nullptr);
  if (!shared.log.admit(level)) return;  // formatting is most of a reset stream's cost
  const GemmShape& s = o.header.shape;
  shared.log.write(level, fmt::format("request id={} peer={} client={} rpc={} m={} n={} k={} status={} phase=\"{}\" "
                                      "total_ms={:.3f} bytes_in={} bytes_out={} error=\"{}\"",
                                      o.id, o.peer, client_name(o), o.rpc, s.m, s.n, s.k, status_code_name(code), phase,
                                      ms_between(o.start, o.finished != RequestOutcome::Clock::time_point{}
                                                              ? o.finished
                                                              : RequestOutcome::Clock::now()),
                                      o.bytes_in, o.bytes_out, log_field(message)));
}

}  // namespace sgemm
