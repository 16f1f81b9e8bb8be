#include "server/service/sgemm_service.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "server/service/status_mapping.h"

namespace sgemm {

namespace v1 = ::sgemm::v1;
using Clock = std::chrono::steady_clock;

namespace {

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Converts the wire header; unknown enum values are INVALID_ARGUMENT.
StatusOr<RequestHeader> header_from_proto(const v1::GemmHeader& h) {
  RequestHeader out;
  out.shape = {h.m(), h.n(), h.k()};
  out.alpha = h.has_alpha() ? h.alpha() : 1.0f;
  out.beta = h.has_beta() ? h.beta() : 0.0f;
  out.has_c = h.has_c();
  switch (h.kernel()) {
    case v1::KERNEL_UNSPECIFIED: out.options.kernel = std::nullopt; break;
    case v1::KERNEL_PINGPONG: out.options.kernel = KernelKind::kPingpong; break;
    case v1::KERNEL_CUBLAS: out.options.kernel = KernelKind::kCublas; break;
    default: return InvalidArgument("header.kernel has unknown value " + std::to_string(int(h.kernel())));
  }
  switch (h.split()) {
    case v1::SPLIT_UNSPECIFIED: out.options.split = SplitMode::kAuto; break;
    case v1::SPLIT_SINGLE: out.options.split = SplitMode::kSingle; break;
    case v1::SPLIT_ROWS: out.options.split = SplitMode::kRows; break;
    case v1::SPLIT_K: out.options.split = SplitMode::kK; break;
    default: return InvalidArgument("header.split has unknown value " + std::to_string(int(h.split())));
  }
  return out;
}

StatusOr<MatrixId> matrix_from_proto(v1::Matrix m) {
  switch (m) {
    case v1::MATRIX_A: return MatrixId::kA;
    case v1::MATRIX_B: return MatrixId::kB;
    case v1::MATRIX_C: return MatrixId::kC;
    case v1::MATRIX_UNSPECIFIED: return InvalidArgument("chunk.matrix is MATRIX_UNSPECIFIED; name A, B or C");
    default: return InvalidArgument("chunk.matrix has unknown value " + std::to_string(int(m)));
  }
}

v1::Split split_to_proto(SplitMode s) {
  switch (s) {
    case SplitMode::kSingle: return v1::SPLIT_SINGLE;
    case SplitMode::kRows: return v1::SPLIT_ROWS;
    case SplitMode::kK: return v1::SPLIT_K;
    default: return v1::SPLIT_UNSPECIFIED;
  }
}

// Collects the row ranges of C the engine finished; the RPC thread drains it.
class RowQueue final : public OutputSink {
 public:
  void rows_ready(int64_t begin, int64_t end) override {
    {
      std::lock_guard lock(mu_);
      ranges_.emplace_back(begin, end);
    }
    cv_.notify_all();
  }
  void close() {
    {
      std::lock_guard lock(mu_);
      closed_ = true;
    }
    cv_.notify_all();
  }
  // False once closed and drained.
  bool pop(std::pair<int64_t, int64_t>* out) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return closed_ || !ranges_.empty(); });
    if (ranges_.empty()) return false;
    *out = ranges_.front();
    ranges_.pop_front();
    return true;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<int64_t, int64_t>> ranges_;  // guarded by mu_
  bool closed_ = false;                             // guarded by mu_
};

Clock::time_point steady_deadline(const grpc::ServerContext* ctx) {
  const auto sys_deadline = ctx->deadline();
  const auto sys_now = std::chrono::system_clock::now();
  if (sys_deadline >= sys_now + std::chrono::hours(24 * 365)) return Clock::time_point::max();
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(sys_deadline - sys_now);
}

}  // namespace

SgemmService::SgemmService(Engine& engine, ServiceOptions options, std::shared_ptr<spdlog::logger> request_log,
                           std::shared_ptr<spdlog::logger> timing_log)
    : engine_(engine),
      options_(std::move(options)),
      request_log_(std::move(request_log)),
      timing_log_(std::move(timing_log)),
      allocator_(engine.host_allocator()),
      admission_(options_.max_in_flight, options_.max_queued) {}

grpc::Status SgemmService::Multiply(
    grpc::ServerContext* ctx, grpc::ServerReaderWriter<v1::MultiplyResponse, v1::MultiplyRequest>* stream) {
  const Clock::time_point t_start = Clock::now();
  const std::string id = std::to_string(next_id_.fetch_add(1));
  const Clock::time_point deadline = steady_deadline(ctx);
  requests_total_.fetch_add(1);

  RequestHeader header;
  int64_t bytes_in = 0, bytes_out = 0;
  double queue_ms = 0, receive_ms = 0, compute_ms = 0;
  StatusOr<GemmReport> report = Internal("no report");

  // Logs the request's one line (and its timing JSON line) whatever the outcome.
  auto finish = [&](const Status& st) {
    const double total_ms = ms_between(t_start, Clock::now());
    if (!st.ok()) requests_failed_.fetch_add(1);
    const auto& s = header.shape;
    if (st.ok()) {
      const GemmReport& r = *report;
      request_log_->info(
          "request id={} peer={} m={} n={} k={} alpha={} beta={} has_c={} backend={} kernel={} split={} "
          "status=OK queue_ms={:.3f} receive_ms={:.3f} compute_ms={:.3f} total_ms={:.3f} bytes_in={} "
          "bytes_out={} gflops={:.1f} devices={} plan=\"{}\"",
          id, ctx->peer(), s.m, s.n, s.k, header.alpha, header.beta, header.has_c, r.backend, kernel_kind_name(r.kernel),
          split_mode_name(r.split), queue_ms, receive_ms, compute_ms, total_ms, bytes_in, bytes_out,
          s.flops() / (total_ms * 1e6), r.devices.size(), r.plan_reason);
      if (timing_log_) {
        nlohmann::json j;
        j["request_id"] = id;
        j["time"] = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
        j["m"] = s.m;
        j["n"] = s.n;
        j["k"] = s.k;
        j["backend"] = r.backend;
        j["kernel"] = kernel_kind_name(r.kernel);
        j["split"] = split_mode_name(r.split);
        j["plan"] = r.plan_reason;
        j["queue_ms"] = queue_ms;
        j["receive_ms"] = receive_ms;
        j["compute_ms"] = compute_ms;
        j["total_ms"] = total_ms;
        j["bytes_in"] = bytes_in;
        j["bytes_out"] = bytes_out;
        auto& devs = j["devices"] = nlohmann::json::array();
        for (const DeviceTiming& d : r.devices) {
          devs.push_back({{"index", d.device}, {"name", d.name}, {"row_begin", d.shard.row_begin},
                          {"row_end", d.shard.row_end}, {"k_begin", d.shard.k_begin}, {"k_end", d.shard.k_end},
                          {"copy_in_ms", d.copy_in_ms}, {"kernel_ms", d.kernel_ms}, {"reduce_ms", d.reduce_ms},
                          {"copy_out_ms", d.copy_out_ms}});
        }
        timing_log_->info(j.dump());
      }
    } else {
      request_log_->warn("request id={} peer={} m={} n={} k={} status={} total_ms={:.3f} bytes_in={} error=\"{}\"",
                         id, ctx->peer(), s.m, s.n, s.k, status_code_name(st.code()), total_ms, bytes_in,
                         st.message());
    }
    return to_grpc_status(st);
  };

  // 1. Header.
  v1::MultiplyRequest req;
  if (!stream->Read(&req)) {
    if (ctx->IsCancelled()) return finish(Cancelled("client cancelled before sending the header"));
    return finish(InvalidArgument("the request stream ended before its header"));
  }
  if (!req.has_header())
    return finish(InvalidArgument("the first message of a Multiply stream must carry `header`, not `chunk`"));
  {
    auto parsed = header_from_proto(req.header());
    if (!parsed.ok()) return finish(parsed.status());
    header = *parsed;
  }
  if (Status st = validate_header(header, options_.limits); !st.ok()) return finish(st);
  if (Status st = engine_.validate(GemmRequest{header.shape, header.alpha, header.beta, header.has_c, header.options});
      !st.ok())
    return finish(st);

  // 2. Admission: wait for a compute slot, or refuse when the queue is full.
  const Clock::time_point t_queue = Clock::now();
  auto ticket = admission_.admit(deadline, [ctx] { return ctx->IsCancelled(); });
  queue_ms = ms_between(t_queue, Clock::now());
  if (!ticket.ok()) return finish(ticket.status());

  // 3. Buffers from the engine's allocator (pinned memory for the CUDA engine).
  HostBuffer a_buf, b_buf, c_buf;
  for (auto [buf, m] : {std::pair{&a_buf, MatrixId::kA}, {&b_buf, MatrixId::kB}, {&c_buf, MatrixId::kC}}) {
    auto got = allocator_.allocate(std::size_t(matrix_elements(header.shape, m)) * sizeof(float));
    if (!got.ok()) return finish(got.status().with_context("allocating " + std::string(matrix_name(m))));
    *buf = std::move(got).value();
  }
  MatrixAssembler assembler(header.shape, header.has_c, a_buf.floats(), b_buf.floats(), c_buf.floats(),
                            options_.limits.max_chunk_bytes);

  // 4. The engine starts now and waits on the assembler for each prefix it needs.
  GemmJob job;
  job.request = GemmRequest{header.shape, header.alpha, header.beta, header.has_c, header.options};
  job.a = a_buf.floats();
  job.b = b_buf.floats();
  job.c = c_buf.floats();
  job.feed = &assembler;
  RowQueue rows;
  job.sink = &rows;
  Clock::time_point t_compute_end;
  const Clock::time_point t_compute = Clock::now();
  std::atomic<bool> engine_failed{false};  // lets the reader stop early: no use receiving the rest
  std::thread worker([&] {
    report = engine_.run(job);
    t_compute_end = Clock::now();
    if (!report.ok()) engine_failed = true;
    rows.close();
  });
  // Whatever happens below, the engine thread is joined before buffers go.
  struct Joiner {
    std::thread& t;
    ~Joiner() {
      if (t.joinable()) t.join();
    }
  } joiner{worker};

  // 5. Receive chunks.
  Status failure;
  while (!engine_failed && stream->Read(&req)) {
    if (!req.has_chunk()) {
      failure = InvalidArgument("a Multiply stream carries one header; got a second `header` message");
      break;
    }
    const v1::MatrixChunk& chunk = req.chunk();
    auto matrix = matrix_from_proto(chunk.matrix());
    if (!matrix.ok()) {
      failure = matrix.status();
      break;
    }
    failure = assembler.add_chunk(*matrix, chunk.offset(), chunk.data().data(), chunk.data().size());
    if (!failure.ok()) break;
  }
  if (failure.ok() && engine_failed) {
    worker.join();
    return finish(report.status());
  }
  if (failure.ok()) {
    if (ctx->IsCancelled()) {
      failure = Clock::now() >= deadline ? DeadlineExceeded("deadline expired while receiving the matrices")
                                         : Cancelled("client cancelled or disconnected mid-stream");
    } else {
      failure = assembler.finish();
    }
  }
  bytes_in = assembler.bytes_received();
  receive_ms = ms_between(t_start, Clock::now());
  if (!failure.ok()) {
    assembler.fail(failure);
    worker.join();
    return finish(failure);
  }

  // 6. Send rows of C as the engine finishes them.
  const int64_t n = header.shape.n;
  const int64_t chunk_elems = std::max<int64_t>(1, options_.response_chunk_bytes / int64_t(sizeof(float)));
  std::pair<int64_t, int64_t> range;
  bool client_gone = false;
  v1::MultiplyResponse resp;
  while (rows.pop(&range)) {
    if (client_gone) continue;  // drain until the engine is done
    for (int64_t off = range.first * n, end = range.second * n; off < end; off += chunk_elems) {
      const int64_t count = std::min(chunk_elems, end - off);
      v1::MatrixChunk* out = resp.mutable_chunk();
      out->set_matrix(v1::MATRIX_C);
      out->set_offset(off);
      out->set_data(reinterpret_cast<const char*>(c_buf.floats() + off), std::size_t(count) * sizeof(float));
      if (!stream->Write(resp)) {
        client_gone = true;
        break;
      }
      bytes_out += count * int64_t(sizeof(float));
    }
  }
  worker.join();
  compute_ms = ms_between(t_compute, t_compute_end);
  if (client_gone)
    return finish(Clock::now() >= deadline ? DeadlineExceeded("deadline expired while sending C")
                                           : Cancelled("client disconnected while C was being sent"));
  if (!report.ok()) return finish(report.status());

  // 7. Summary.
  v1::MultiplyResponse last;
  v1::MultiplySummary* sum = last.mutable_summary();
  sum->set_request_id(id);
  sum->set_backend(report->backend);
  sum->set_kernel(std::string(kernel_kind_name(report->kernel)));
  sum->set_split(split_to_proto(report->split));
  sum->set_plan_reason(report->plan_reason);
  for (const DeviceTiming& d : report->devices) {
    v1::DeviceTiming* t = sum->add_devices();
    t->set_index(d.device);
    t->set_name(d.name);
    t->set_row_begin(d.shard.row_begin);
    t->set_row_end(d.shard.row_end);
    t->set_k_begin(d.shard.k_begin);
    t->set_k_end(d.shard.k_end);
    t->set_copy_in_ms(d.copy_in_ms);
    t->set_kernel_ms(d.kernel_ms);
    t->set_reduce_ms(d.reduce_ms);
    t->set_copy_out_ms(d.copy_out_ms);
  }
  sum->set_queue_ms(queue_ms);
  sum->set_receive_ms(receive_ms);
  sum->set_compute_ms(compute_ms);
  sum->set_total_ms(ms_between(t_start, Clock::now()));
  sum->set_bytes_received(bytes_in);
  sum->set_bytes_sent(bytes_out);
  if (!stream->Write(last)) return finish(Cancelled("client disconnected before the summary was sent"));
  return finish(Status::Ok());
}

grpc::Status SgemmService::GetInfo(grpc::ServerContext*, const v1::GetInfoRequest*, v1::GetInfoResponse* out) {
  const EngineInfo info = engine_.info();
  out->set_version(options_.version);
  out->set_backend(info.backend);
  for (const auto& b : options_.backends) out->add_backends(b);
  for (KernelKind k : info.kernels) out->add_kernels(std::string(kernel_kind_name(k)));
  for (const DeviceInfo& d : info.devices) {
    v1::DeviceInfo* p = out->add_devices();
    p->set_index(d.index);
    p->set_name(d.name);
    p->set_memory_bytes(d.memory_bytes);
    p->set_sm_count(d.sm_count);
    p->set_compute_major(d.compute_major);
    p->set_compute_minor(d.compute_minor);
  }
  v1::Limits* lim = out->mutable_limits();
  lim->set_max_matrix_elements(options_.limits.max_matrix_elements);
  lim->set_max_in_flight(options_.max_in_flight);
  lim->set_max_queued(options_.max_queued);
  lim->set_max_chunk_bytes(options_.limits.max_chunk_bytes);
  v1::Load* load = out->mutable_load();
  load->set_in_flight(admission_.in_flight());
  load->set_queued(admission_.queued());
  load->set_requests_total(requests_total_.load());
  load->set_requests_failed(requests_failed_.load());
  load->set_host_bytes_in_use(allocator_.bytes_in_use());
  return grpc::Status::OK;
}

}  // namespace sgemm
