#include "server/service/request_report.h"

#include <cstddef>
#include <nlohmann/json.hpp>

namespace sgemm {

namespace {

// When the request joined the compute queue: received_ms, or earlier when
// computing started while A was still arriving (docs/lifecycle.md).
double queued_at(const RequestFacts& f) { return f.submitted_ms >= 0 ? f.submitted_ms : f.received_ms; }

}  // namespace

TimingRecord timing_record_of(const RequestFacts& f, const GemmReport& r) {
  TimingRecord t;
  t.request_id = f.request_id;
  t.time = f.unix_time;
  t.shape = f.request.shape;
  t.has_c = f.request.has_c;
  t.backend = r.backend;
  t.kernel = report_kernel_name(r);
  for (const KernelRowUse& k : r.kernel_rows) t.kernel_rows.push_back(KernelRowRecord{k.name, k.launches});
  t.precision = precision_name(r.precision);
  t.split = split_mode_name(r.split);
  t.plan = r.plan_reason;
  t.receive_ms = f.received_ms;
  t.queue_ms = f.compute_start_ms - queued_at(f);
  t.compute_ms = f.compute_end_ms - f.compute_start_ms;
  t.send_ms = f.first_send_ms >= 0 ? f.summary_ms - f.first_send_ms : 0.0;
  t.total_ms = f.summary_ms;
  t.bytes_in = f.bytes_in;
  t.bytes_out = f.bytes_out;
  t.engine_host_ms = r.host_ms;
  for (const DeviceTiming& d : r.devices) {
    DeviceTimingRecord x;
    x.index = d.device;
    x.name = d.name;
    x.row_begin = d.shard.row_begin;
    x.row_end = d.shard.row_end;
    x.k_begin = d.shard.k_begin;
    x.k_end = d.shard.k_end;
    x.copy_in_ms = d.copy_in_ms;
    x.copy_in_wait_ms = d.copy_in_wait_ms;
    x.kernel_ms = d.kernel_ms;
    x.kernel_wait_ms = d.kernel_wait_ms;
    x.reduce_ms = d.reduce_ms;
    x.reduce_wait_ms = d.reduce_wait_ms;
    x.copy_out_ms = d.copy_out_ms;
    x.copy_out_wait_ms = d.copy_out_wait_ms;
    x.order_wait_ms = d.order_wait_ms;
    t.devices.push_back(std::move(x));
  }
  return t;
}

namespace {

// Chrome's trace format counts in microseconds.
double us(double ms) { return ms * 1000.0; }

// Slices on one track must nest, so sending (which overlaps computing: rows
// go out as they are final) has a track of its own.
enum Track { kPhases = 1, kSending = 2, kCopyIn = 1, kKernels = 2, kComm = 3, kCopyOut = 4, kHostWait = 5 };

}  // namespace

std::string chrome_trace_json(const RequestFacts& f, const GemmReport& r) {
  using json = nlohmann::ordered_json;
  json events = json::array();
  auto meta = [&](int pid, int tid, const char* what, const std::string& name) {
    json e = {{"name", what}, {"ph", "M"}, {"pid", pid}, {"args", {{"name", name}}}};
    if (tid >= 0) e["tid"] = tid;
    events.push_back(std::move(e));
  };
  // The trace-event format's metadata event: {"name": "process_sort_index",
  // "args": {"sort_index": N}}, lower N drawn higher.
  auto sort_index = [&](int pid, int index) {
    events.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", pid}, {"args", {{"sort_index", index}}}});
  };
  auto slice = [&](int pid, int tid, const std::string& name, const char* cat, double start_ms, double end_ms,
                   json args) {
    if (end_ms < start_ms) end_ms = start_ms;
    events.push_back({{"name", name},
                      {"cat", cat},
                      {"ph", "X"},
                      {"pid", pid},
                      {"tid", tid},
                      {"ts", us(start_ms)},
                      {"dur", us(end_ms - start_ms)},
                      {"args", std::move(args)}});
  };
  json rows = json::array();  // every concrete kernel that ran, with its launches
  for (const KernelRowUse& k : r.kernel_rows) rows.push_back({{"name", k.name}, {"launches", k.launches}});
  const GemmShape& s = f.request.shape;
  const json whole = {{"m", s.m}, {"n", s.n}, {"k", s.k}};
  // The service's phases.
  meta(0, -1, "process_name", "sgemm-server");
  sort_index(0, 0);
  meta(0, kPhases, "thread_name", "request " + f.request_id);
  meta(0, kSending, "thread_name", "request " + f.request_id + ": sending C");
  slice(0, kPhases, "receive", "service", 0, f.received_ms, {{"bytes", f.bytes_in}, {"shape", whole}});
  slice(0, kPhases, "queue", "service", queued_at(f), f.compute_start_ms, {{"shape", whole}});
  slice(0, kPhases, "compute", "service", f.compute_start_ms, f.compute_end_ms,
        {{"split", split_mode_name(r.split)},
         {"kernel", report_kernel_name(r)},
         {"kernel_rows", rows},
         {"plan", r.plan_reason}});
  if (f.first_send_ms >= 0)
    slice(0, kSending, "send", "service", f.first_send_ms, f.summary_ms, {{"bytes", f.bytes_out}});
  // One process per device, one thread per stream.
  const char* collective = r.split == SplitMode::kK ? "reduce C (NCCL)" : "broadcast B (NCCL)";
  for (size_t i = 0; i < r.devices.size(); ++i) {
    const DeviceTiming& d = r.devices[i];
    const int pid = int(i) + 1;
    meta(pid, -1, "process_name",
         (d.device >= 0 ? "GPU " + std::to_string(d.device) : std::string("CPU")) + ": " + d.name);
    sort_index(pid, pid);
    meta(pid, kCopyIn, "thread_name", "copy in (h2d)");
    meta(pid, kKernels, "thread_name", "kernels");
    meta(pid, kComm, "thread_name", "NCCL (comm)");
    meta(pid, kCopyOut, "thread_name", "copy out (d2h)");
    meta(pid, kHostWait, "thread_name", "host: waiting for input");
    const json shard = {{"row_begin", d.shard.row_begin},
                        {"row_end", d.shard.row_end},
                        {"k_begin", d.shard.k_begin},
                        {"k_end", d.shard.k_end}};
    for (const Step& st : d.steps) {
      json args = {{"bytes", st.bytes},
                   {"rows", std::to_string(st.row_begin) + "-" + std::to_string(st.row_end)},
                   {"k", std::to_string(st.k_begin) + "-" + std::to_string(st.k_end)},
                   {"shard", shard}};
      const double ms = st.end_ms - st.start_ms;
      if (st.bytes > 0 && ms > 0) args["GB_per_s"] = double(st.bytes) / (ms * 1e6);
      switch (st.kind) {
        case StepKind::kCopyIn:
          slice(pid, kCopyIn, "copy in", "copy", st.start_ms, st.end_ms, std::move(args));
          break;
        case StepKind::kKernel: {
          const double flops = 2.0 * double(st.row_end - st.row_begin) * double(s.n) * double(st.k_end - st.k_begin);
          if (ms > 0) args["TFLOP_per_s"] = flops / (ms * 1e9);
          // The launch's own row where the engine said which; else the report's.
          const bool own = st.kernel_row >= 0 && std::size_t(st.kernel_row) < r.kernel_rows.size();
          slice(pid, kKernels, own ? r.kernel_rows[std::size_t(st.kernel_row)].name : report_kernel_name(r), "kernel",
                st.start_ms, st.end_ms, std::move(args));
          break;
        }
        case StepKind::kCollective:
          if (st.peer_ready_ms > st.start_ms)
            slice(pid, kComm, "waiting for peers", "wait", st.start_ms, st.peer_ready_ms, args);
          slice(pid, kComm, collective, "nccl", std::max(st.start_ms, st.peer_ready_ms), st.end_ms, std::move(args));
          break;
        case StepKind::kCopyOut:
          slice(pid, kCopyOut, "copy out", "copy", st.start_ms, st.end_ms, std::move(args));
          break;
        case StepKind::kWaitInput:
          slice(pid, kHostWait, "waiting for input", "wait", st.start_ms, st.end_ms, std::move(args));
          break;
      }
    }
  }
  json doc;
  doc["traceEvents"] = std::move(events);
  doc["displayTimeUnit"] = "ms";
  doc["otherData"] = {{"request_id", f.request_id},
                      {"shape", whole},
                      {"backend", r.backend},
                      {"kernel", report_kernel_name(r)},
                      {"kernel_rows", rows},
                      {"precision", precision_name(r.precision)},
                      {"split", split_mode_name(r.split)},
                      {"plan", r.plan_reason},
                      {"schema", "Chrome trace-event JSON; docs/observability.md"}};
  return doc.dump();
}

}  // namespace sgemm
