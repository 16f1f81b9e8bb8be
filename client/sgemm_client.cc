#include "client/sgemm_client.h"

#include <grpcpp/grpcpp.h>

#include <cstring>
#include <mutex>
#include <random>
#include <thread>

#include "grpc/health/v1/health.grpc.pb.h"
#include "sgemm/v1/sgemm.grpc.pb.h"

namespace sgemm {
namespace {

namespace v1 = ::sgemm::v1;

std::string precision_text(v1::Precision p) {
  switch (p) {
    case v1::PRECISION_UNSPECIFIED:
    case v1::PRECISION_FP32:
      return "fp32";
    case v1::PRECISION_TF32:
      return "tf32";
    case v1::PRECISION_FP32X3:
      return "fp32x3";
    default:
      return "unknown(" + std::to_string(int(p)) + ")";
  }
}

// The client's one grpc::Status -> sgemm::Status translation.
Status from_grpc(const grpc::Status& s) {
  if (s.ok()) return Status::Ok();
  return Status(static_cast<StatusCode>(int(s.error_code())), s.error_message());
}

class GrpcClient final : public Client {
 public:
  GrpcClient(const std::string& target, const ClientOptions& options)
      : options_(options),
        channel_(grpc::CreateChannel(target, grpc::InsecureChannelCredentials())),
        stub_(v1::Sgemm::NewStub(channel_)),
        health_(grpc::health::v1::Health::NewStub(channel_)) {}

  StatusOr<bool> serving(const std::string& service, std::chrono::milliseconds timeout) override {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + timeout);
    grpc::health::v1::HealthCheckRequest req;
    req.set_service(service);
    grpc::health::v1::HealthCheckResponse resp;
    SGEMM_RETURN_IF_ERROR(from_grpc(health_->Check(&ctx, req, &resp)));
    return resp.status() == grpc::health::v1::HealthCheckResponse::SERVING;
  }

  StatusOr<MultiplyResult> multiply(const GemmShape& shape, const float* a, const float* b, const float* c,
                                    const MultiplyOptions& opt) override {
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    const auto deadline = opt.timeout.count() > 0 ? std::chrono::system_clock::now() + opt.timeout
                                                  : std::chrono::system_clock::time_point::max();
    const RetryPolicy& policy = options_.retry;
    double backoff_ms = double(policy.initial_backoff.count());
    for (int attempt = 1;; ++attempt) {
      auto r = multiply_once(shape, a, b, c, opt, deadline);
      const bool retry = !r.ok() && r.status().code() == StatusCode::kUnavailable && attempt < policy.max_attempts;
      if (!retry) {
        if (r.ok()) {
          r->attempts = attempt;
          r->wall_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        }
        return r;
      }
      std::uniform_real_distribution<double> jitter(0.8, 1.2);
      double wait_ms;
      {
        std::lock_guard lock(rng_mu_);
        wait_ms = std::min(backoff_ms, double(policy.max_backoff.count())) * jitter(rng_);
      }
      const auto wake = std::chrono::system_clock::now() + std::chrono::microseconds(int64_t(wait_ms * 1000));
      if (wake >= deadline) return r;  // no time left for another attempt
      std::this_thread::sleep_for(std::chrono::microseconds(int64_t(wait_ms * 1000)));
      backoff_ms *= policy.multiplier;
    }
  }

  StatusOr<MultiplyResult> multiply_once(const GemmShape& shape, const float* a, const float* b, const float* c,
                                         const MultiplyOptions& opt, std::chrono::system_clock::time_point deadline) {
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    grpc::ClientContext ctx;
    if (deadline != std::chrono::system_clock::time_point::max()) ctx.set_deadline(deadline);
    auto stream = stub_->Multiply(&ctx);

    v1::MultiplyRequest req;
    v1::GemmHeader* h = req.mutable_header();
    h->set_m(shape.m);
    h->set_n(shape.n);
    h->set_k(shape.k);
    h->set_alpha(opt.alpha);
    h->set_beta(opt.beta);
    h->set_has_c(c != nullptr);
    if (opt.kernel) {
      switch (*opt.kernel) {
        case KernelKind::kPingpong:
          h->set_kernel(v1::KERNEL_PINGPONG);
          break;
        case KernelKind::kCublas:
          h->set_kernel(v1::KERNEL_CUBLAS);
          break;
        case KernelKind::kTf32:
        case KernelKind::kFp32x3:
        case KernelKind::kOpenblas:
          return InvalidArgument("kernel '" + std::string(kernel_kind_name(*opt.kernel)) +
                                 "' cannot be named in a sgemm.v1 request (pingpong or cublas)");
      }
    }
    switch (opt.precision) {
      case Precision::kFp32:
        break;
      case Precision::kTf32:
        h->set_precision(v1::PRECISION_TF32);
        break;
      case Precision::kFp32x3:
        h->set_precision(v1::PRECISION_FP32X3);
        break;
    }
    switch (opt.split) {
      case SplitMode::kAuto:
        break;
      case SplitMode::kSingle:
        h->set_split(v1::SPLIT_SINGLE);
        break;
      case SplitMode::kRows:
        h->set_split(v1::SPLIT_ROWS);
        break;
      case SplitMode::kK:
        h->set_split(v1::SPLIT_K);
        break;
    }

    MultiplyResult result;
    bool write_ok = stream->Write(req);
    const int64_t chunk_elems = std::max<int64_t>(1, options_.chunk_bytes / int64_t(sizeof(float)));
    const std::pair<v1::Matrix, std::pair<const float*, int64_t>> inputs[] = {
        {v1::MATRIX_A, {a, shape.m * shape.k}},
        {v1::MATRIX_B, {b, shape.k * shape.n}},
        {v1::MATRIX_C, {c, c ? shape.m * shape.n : 0}}};
    for (const auto& [which, data] : inputs) {
      for (int64_t off = 0; write_ok && off < data.second; off += chunk_elems) {
        const int64_t count = std::min(chunk_elems, data.second - off);
        v1::MatrixChunk* ch = req.mutable_chunk();
        ch->set_matrix(which);
        ch->set_offset(off);
        ch->set_data(reinterpret_cast<const char*>(data.first + off), std::size_t(count) * sizeof(float));
        write_ok = stream->Write(req);
        if (write_ok) result.bytes_sent += count * int64_t(sizeof(float));
      }
    }
    if (write_ok) stream->WritesDone();

    // Read C (and the summary) even after a failed write: the status comes from Finish().
    const int64_t total = shape.m * shape.n;
    result.c.assign(std::size_t(total), 0.0f);
    v1::MultiplyResponse resp;
    bool have_summary = false;
    Status protocol_error;
    while (stream->Read(&resp)) {
      if (resp.has_chunk()) {
        const v1::MatrixChunk& ch = resp.chunk();
        const int64_t count = int64_t(ch.data().size() / sizeof(float));
        if (ch.matrix() != v1::MATRIX_C || ch.offset() < 0 || ch.offset() + count > total ||
            ch.data().size() % sizeof(float) != 0) {
          protocol_error = Internal("server sent a malformed chunk of C (offset " + std::to_string(ch.offset()) + ")");
          ctx.TryCancel();
          continue;
        }
        std::memcpy(result.c.data() + ch.offset(), ch.data().data(), ch.data().size());
        result.bytes_received += int64_t(ch.data().size());
        if (opt.on_chunk) opt.on_chunk(ch.offset(), count);
      } else if (resp.has_summary()) {
        const v1::MultiplySummary& s = resp.summary();
        have_summary = true;
        MultiplySummary& out = result.summary;
        out.request_id = s.request_id();
        out.backend = s.backend();
        out.kernel = s.kernel();
        out.precision = precision_text(s.precision());
        switch (s.split()) {
          case v1::SPLIT_SINGLE:
            out.split = "single";
            break;
          case v1::SPLIT_ROWS:
            out.split = "rows";
            break;
          case v1::SPLIT_K:
            out.split = "k";
            break;
          default:
            out.split = "unspecified";
        }
        out.plan_reason = s.plan_reason();
        out.queue_ms = s.queue_ms();
        out.receive_ms = s.receive_ms();
        out.compute_ms = s.compute_ms();
        out.total_ms = s.total_ms();
        for (const auto& d : s.devices()) {
          out.devices.push_back({d.index(), d.name(), d.row_begin(), d.row_end(), d.k_begin(), d.k_end(),
                                 d.copy_in_ms(), d.kernel_ms(), d.reduce_ms(), d.copy_out_ms(), d.host()});
        }
      }
    }
    const Status st = from_grpc(stream->Finish());
    if (!protocol_error.ok()) return protocol_error;
    if (!st.ok()) return st;
    if (!have_summary) return Internal("the server ended the stream without a summary");
    if (result.bytes_received != total * int64_t(sizeof(float)))
      return Internal("the server sent " + std::to_string(result.bytes_received / 4) + " of " + std::to_string(total) +
                      " elements of C");
    result.wall_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    return result;
  }

  StatusOr<ServerInfo> info(std::chrono::milliseconds timeout) override {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + timeout);
    v1::GetInfoRequest req;
    v1::GetInfoResponse resp;
    SGEMM_RETURN_IF_ERROR(from_grpc(stub_->GetInfo(&ctx, req, &resp)));
    ServerInfo out;
    out.version = resp.version();
    out.backend = resp.backend();
    out.backends.assign(resp.backends().begin(), resp.backends().end());
    out.kernels.assign(resp.kernels().begin(), resp.kernels().end());
    for (int p : resp.precisions()) out.precisions.push_back(precision_text(v1::Precision(p)));
    for (const auto& d : resp.devices())
      out.devices.push_back(
          {d.index(), d.name(), d.memory_bytes(), d.sm_count(), d.compute_major(), d.compute_minor()});
    out.max_matrix_elements = resp.limits().max_matrix_elements();
    out.max_chunk_bytes = resp.limits().max_chunk_bytes();
    out.max_in_flight = resp.limits().max_in_flight();
    out.max_queued = resp.limits().max_queued();
    out.host_memory_bytes = resp.limits().host_memory_bytes();
    out.open_streams = resp.load().open_streams();
    out.in_flight = resp.load().in_flight();
    out.queued = resp.load().queued();
    out.requests_total = resp.load().requests_total();
    out.requests_failed = resp.load().requests_failed();
    out.host_bytes_in_use = resp.load().host_bytes_in_use();
    return out;
  }

 private:
  const ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Sgemm::Stub> stub_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
  std::mutex rng_mu_;
  std::mt19937_64 rng_{std::random_device{}()};  // guarded by rng_mu_ (backoff jitter)
};

}  // namespace

std::unique_ptr<Client> Client::connect(const std::string& target, const ClientOptions& options) {
  return std::make_unique<GrpcClient>(target, options);
}

}  // namespace sgemm
