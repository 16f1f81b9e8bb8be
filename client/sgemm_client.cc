#include "client/sgemm_client.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "client/wire_codec.h"
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

// One Multiply call as a callback reactor, so the upload and C's download run
// together (the server streams rows of C while A is still arriving): writes
// go header, then each input in chunks, one outstanding; reads decode chunks
// of C straight into the caller's buffer. Payload slices point into the
// caller's matrices (wire_codec.h).
// Threads: reactions on gRPC's threads (a read and a write reaction may run at
// once), start()/wait() on the caller's; every member below mu_ is guarded by it.
class MultiplyStream final : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  struct Input {
    wire::WireMatrix matrix;
    const float* data;
    int64_t elements;
  };

  MultiplyStream(grpc::ClientContext* ctx, const v1::MultiplyRequest& header, std::vector<Input> inputs,
                 int64_t chunk_elems, float* c, int64_t c_elements, std::function<void(int64_t, int64_t)> on_chunk,
                 wire::SliceRefs* refs)
      : ctx_(ctx),
        inputs_(std::move(inputs)),
        chunk_elems_(chunk_elems),
        c_(c),
        c_elements_(c_elements),
        on_chunk_(std::move(on_chunk)),
        refs_(refs) {
    bool own = false;
    [[maybe_unused]] grpc::Status st = grpc::SerializationTraits<v1::MultiplyRequest>::Serialize(header, &out_, &own);
  }

  void start() {
    std::lock_guard lock(mu_);
    StartWrite(&out_);
    StartRead(&in_);
    StartCall();
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard lock(mu_);
    if (!ok) return;  // the call is ending: OnDone brings its status
    bytes_sent_ += pending_bytes_;
    pending_bytes_ = 0;
    while (input_ < inputs_.size() && next_offset_ >= inputs_[input_].elements) {
      ++input_;
      next_offset_ = 0;
    }
    if (input_ == inputs_.size()) {
      upload_done_ = true;
      StartWritesDone();
      return;
    }
    const Input& in = inputs_[input_];
    const int64_t count = std::min(chunk_elems_, in.elements - next_offset_);
    out_ = wire::encode_chunk(in.matrix, in.data, next_offset_, count, refs_);
    next_offset_ += count;
    pending_bytes_ = count * int64_t(sizeof(float));
    StartWrite(&out_);
  }

  void OnReadDone(bool ok) override {
    std::lock_guard lock(mu_);
    if (!ok) return;
    auto r = wire::decode_response(in_, c_, c_elements_, &summary_);
    if (!r.ok()) {
      protocol_error_ = r.status();
      ctx_->TryCancel();
      return;
    }
    if (r->kind == wire::Response::Kind::kChunk) {
      if (bytes_received_ == 0 && !upload_done_) first_c_before_upload_end_ = true;
      bytes_received_ += r->count * int64_t(sizeof(float));
      if (on_chunk_) on_chunk_(r->offset, r->count);
    } else if (r->kind == wire::Response::Kind::kSummary) {
      have_summary_ = true;
    }
    StartRead(&in_);
  }

  void OnDone(const grpc::Status& s) override {
    std::lock_guard lock(mu_);
    status_ = s;
    out_.Clear();  // its slice of the caller's memory
    done_ = true;
    cv_.notify_all();
  }

  // Blocks until gRPC is done with the call; its status.
  grpc::Status wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return done_; });
    return status_;
  }

  // After wait().
  int64_t bytes_sent() const { return bytes_sent_; }
  int64_t bytes_received() const { return bytes_received_; }
  const Status& protocol_error() const { return protocol_error_; }
  bool have_summary() const { return have_summary_; }
  const v1::MultiplyResponse& summary() const { return summary_; }
  bool first_c_before_upload_end() const { return first_c_before_upload_end_; }

 private:
  grpc::ClientContext* const ctx_;
  const std::vector<Input> inputs_;
  const int64_t chunk_elems_;
  float* const c_;
  const int64_t c_elements_;
  const std::function<void(int64_t, int64_t)> on_chunk_;
  wire::SliceRefs* const refs_;

  std::mutex mu_;
  std::condition_variable cv_;
  grpc::ByteBuffer out_, in_;
  std::size_t input_ = 0;    // the input being sent
  int64_t next_offset_ = 0;  // its next element
  int64_t pending_bytes_ = 0, bytes_sent_ = 0, bytes_received_ = 0;
  bool upload_done_ = false, have_summary_ = false, first_c_before_upload_end_ = false, done_ = false;
  Status protocol_error_;
  v1::MultiplyResponse summary_;
  grpc::Status status_;
};

// The channel for (target, extra arguments), shared by every Client of the
// process and never destroyed: in gRPC 1.51 destroying the last channel that
// made a callback-API call joins the callback queue's poller threads, which
// can take up to 10 s (measured: transport-bench's split runs, docs/transport.md).
std::shared_ptr<grpc::Channel> make_channel(const std::string& target, const ClientOptions& options) {
  static std::mutex mu;
  static auto* channels = new std::map<std::string, std::shared_ptr<grpc::Channel>>;  // leaked on purpose
  std::string key = target;
  for (const auto& [name, value] : options.channel_args) key += "\n" + name + "=" + std::to_string(value);
  std::lock_guard lock(mu);
  auto& ch = (*channels)[key];
  if (!ch) {
    grpc::ChannelArguments args;
    for (const auto& [name, value] : options.channel_args) args.SetInt(name, value);
    ch = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  }
  return ch;
}

class GrpcClient final : public Client {
 public:
  GrpcClient(const std::string& target, const ClientOptions& options)
      : options_(options),
        channel_(make_channel(target, options)),
        stub_(v1::Sgemm::NewStub(channel_)),
        generic_(std::make_unique<grpc::TemplatedGenericStub<grpc::ByteBuffer, grpc::ByteBuffer>>(channel_)),
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
    // Declared before the call so it outlives it: gRPC drops its last slices when the call is destroyed.
    wire::SliceRefs refs;
    StatusOr<MultiplyResult> result = Internal("not run");
    {
      grpc::ClientContext ctx;
      if (deadline != std::chrono::system_clock::time_point::max()) ctx.set_deadline(deadline);

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

      result = run_stream(ctx, req, shape, a, b, c, opt, &refs);
    }                  // the call (ClientContext) goes here
    refs.wait_zero();  // gRPC holds no slice of the caller's A, B or C any more
    return result;
  }

  StatusOr<MultiplyResult> run_stream(grpc::ClientContext& ctx, const v1::MultiplyRequest& header,
                                      const GemmShape& shape, const float* a, const float* b, const float* c,
                                      const MultiplyOptions& opt, wire::SliceRefs* refs) {
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    MultiplyResult result;
    const int64_t total = shape.m * shape.n;
    float* out = opt.c_out;
    if (!out) {
      result.c.resize(std::size_t(total));
      out = result.c.data();
    }
    // B (and C) first, then A by row blocks: the server starts computing
    // once B (and C) are in and A is arriving (docs/lifecycle.md).
    std::vector<MultiplyStream::Input> inputs;
    inputs.push_back({wire::WireMatrix::kB, b, shape.k * shape.n});
    if (c) inputs.push_back({wire::WireMatrix::kC, c, shape.m * shape.n});
    inputs.push_back({wire::WireMatrix::kA, a, shape.m * shape.k});
    const int64_t chunk_elems = std::max<int64_t>(1, options_.chunk_bytes / int64_t(sizeof(float)));
    MultiplyStream call(&ctx, header, std::move(inputs), chunk_elems, out, total, opt.on_chunk, refs);
    generic_->PrepareBidiStreamingCall(&ctx, "/sgemm.v1.Sgemm/Multiply", grpc::StubOptions(), &call);
    call.start();
    const grpc::Status gst = call.wait();
    result.bytes_sent = call.bytes_sent();
    result.bytes_received = call.bytes_received();
    const Status st = from_grpc(gst);
    if (!call.protocol_error().ok()) return call.protocol_error();
    if (!st.ok()) return st;
    if (!call.have_summary()) return Internal("the server ended the stream without a summary");
    if (result.bytes_received != total * int64_t(sizeof(float)))
      return Internal("the server sent " + std::to_string(result.bytes_received / 4) + " of " + std::to_string(total) +
                      " elements of C");
    const v1::MultiplySummary& s = call.summary().summary();
    MultiplySummary& sum = result.summary;
    sum.request_id = s.request_id();
    sum.backend = s.backend();
    sum.kernel = s.kernel();
    sum.precision = precision_text(s.precision());
    switch (s.split()) {
      case v1::SPLIT_SINGLE:
        sum.split = "single";
        break;
      case v1::SPLIT_ROWS:
        sum.split = "rows";
        break;
      case v1::SPLIT_K:
        sum.split = "k";
        break;
      default:
        sum.split = "unspecified";
    }
    sum.plan_reason = s.plan_reason();
    sum.queue_ms = s.queue_ms();
    sum.receive_ms = s.receive_ms();
    sum.compute_ms = s.compute_ms();
    sum.total_ms = s.total_ms();
    for (const auto& d : s.devices()) {
      sum.devices.push_back({d.index(), d.name(), d.row_begin(), d.row_end(), d.k_begin(), d.k_end(), d.copy_in_ms(),
                             d.kernel_ms(), d.reduce_ms(), d.copy_out_ms()});
    }
    result.first_c_before_upload_end = call.first_c_before_upload_end();
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
  std::unique_ptr<grpc::TemplatedGenericStub<grpc::ByteBuffer, grpc::ByteBuffer>> generic_;  // Multiply's data plane
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
  std::mutex rng_mu_;
  std::mt19937_64 rng_{std::random_device{}()};  // guarded by rng_mu_ (backoff jitter)
};

}  // namespace

std::unique_ptr<Client> Client::connect(const std::string& target, const ClientOptions& options) {
  return std::make_unique<GrpcClient>(target, options);
}

}  // namespace sgemm
