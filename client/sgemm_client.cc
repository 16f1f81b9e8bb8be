#include "client/sgemm_client.h"

#include <fcntl.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "client/batch_call.h"
#include "client/matrix_rpcs.h"
#include "client/multiply_stream.h"
#include "client/multiply_unary.h"
#include "client/request_ring.h"
#include "client/stripe_plan.h"
#include "client/wire_codec.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "proto/grpc_status.h"
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
    case v1::PRECISION_FP32_FFMA:
      return "fp32-ffma";
    default:
      return "unknown(" + std::to_string(int(p)) + ")";
  }
}

struct DeviceRefs {
  DeviceBufferMatrix a, b;
  std::optional<DeviceBufferMatrix> c, out;
};

// Operands in the caller's memory: shared-memory regions, or device buffers
// when `device` is set. Either way no matrix byte is streamed.
struct RegionRefs {
  RegionMatrix a, b;
  std::optional<RegionMatrix> c, out;
  const DeviceRefs* device = nullptr;
  bool has_c() const { return device ? device->c.has_value() : c.has_value(); }
  bool has_out() const { return device ? device->out.has_value() : out.has_value(); }
};

void set_device_ref(v1::DeviceBufferRef* out, const DeviceBufferMatrix& m) {
  out->set_ipc_handle(m.ipc_handle);
  out->set_device(m.device);
  out->set_offset(m.offset);
  out->set_ld(m.ld);
  out->set_release(m.release);
}

void set_ref(v1::RegionRef* out, const RegionMatrix& m) {
  out->set_region(m.region->name());
  out->set_offset(m.offset);
  out->set_ld(m.ld);
}

// The header's kernel, precision and split from the options; INVALID_ARGUMENT
// for a kernel sgemm.v1 cannot name.
Status set_exec_fields(const MultiplyOptions& opt, v1::GemmHeader* h) {
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
    case Precision::kFp32Ffma:
      h->set_precision(v1::PRECISION_FP32_FFMA);
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
  return Status::Ok();
}

// The client's view of a MultiplySummary.
MultiplySummary summary_from_proto(const v1::MultiplySummary& s) {
  MultiplySummary sum;
  sum.request_id = s.request_id();
  sum.backend = s.backend();
  sum.kernel = s.kernel();
  for (const auto& k : s.kernel_rows()) sum.kernel_rows.push_back(KernelRowResult{k.name(), k.launches()});
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
  sum.send_ms = s.send_ms();
  sum.bytes_in = s.bytes_received();
  sum.bytes_out = s.bytes_sent();
  sum.trace_json = s.trace_json();
  sum.stripes = std::max(1, s.stripes());
  sum.launch_products = std::max(1, s.launch_products());
  sum.result_handle = s.result_handle();
  for (const auto& d : s.devices()) {
    sum.devices.push_back({d.index(), d.name(), d.row_begin(), d.row_end(), d.k_begin(), d.k_end(), d.copy_in_ms(),
                           d.kernel_ms(), d.reduce_ms(), d.copy_out_ms(), d.copy_in_wait_ms(), d.kernel_wait_ms(),
                           d.reduce_wait_ms(), d.copy_out_wait_ms(), d.order_wait_ms(), d.host()});
  }
  return sum;
}

bool is_unix_target(const std::string& target) { return target.rfind("unix:", 0) == 0; }

// A call's deadline on the steady clock (the request ring waits on it).
std::chrono::steady_clock::time_point steady_deadline(std::chrono::system_clock::time_point deadline) {
  if (deadline == std::chrono::system_clock::time_point::max()) return std::chrono::steady_clock::time_point::max();
  return std::chrono::steady_clock::now() + (deadline - std::chrono::system_clock::now());
}

// A shared-memory object created and mapped here, registered with the server
// over `channel` (the Unix connection the registration belongs to).
class ShmRegion final : public Region {
 public:
  // `token`: the bearer token the region RPCs carry ("" = none).
  static StatusOr<std::unique_ptr<Region>> create(std::shared_ptr<grpc::Channel> channel, int64_t bytes,
                                                  std::string token) {
    if (bytes <= 0) return InvalidArgument("a region needs at least one byte");
    static std::atomic<uint64_t> counter{0};
    std::mt19937_64 rng{std::random_device{}()};
    char name[96];
    std::snprintf(name, sizeof name, "/sgemm-%d-%llu-%016llx", int(getpid()), (unsigned long long)counter.fetch_add(1),
                  (unsigned long long)rng());
    std::unique_ptr<ShmRegion> r(new ShmRegion(std::move(channel), name, std::move(token)));
    const int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return Internal(std::string("shm_open(") + name + "): " + strerror(errno));
    r->created_ = true;
    if (ftruncate(fd, off_t(bytes)) != 0) {
      const int e = errno;
      close(fd);
      return ResourceExhausted("cannot size shared memory to " + std::to_string(bytes) + " bytes: " + strerror(e));
    }
    void* p = mmap(nullptr, std::size_t(bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int e = errno;
    close(fd);
    if (p == MAP_FAILED) return ResourceExhausted(std::string("cannot map shared memory: ") + strerror(e));
    r->data_ = p;
    r->bytes_ = bytes;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    r->authorize(ctx);
    v1::RegisterRegionRequest req;
    req.set_name(name);
    req.set_shm_name(name);
    req.set_byte_size(bytes);
    v1::RegisterRegionResponse resp;
    SGEMM_RETURN_IF_ERROR(from_grpc(r->stub_->RegisterRegion(&ctx, req, &resp)));
    r->registered_ = true;
    // Both sides have it mapped: the name is no longer needed, and without it
    // the memory goes with the last mapping, even if this process is killed.
    shm_unlink(name);
    r->created_ = false;
    return std::unique_ptr<Region>(std::move(r));
  }

  ~ShmRegion() override {
    if (registered_) (void)unregister();
    if (data_) munmap(data_, std::size_t(bytes_));
    if (created_) shm_unlink(name_.c_str());
  }

  const std::string& name() const override { return name_; }
  void* data() const override { return data_; }
  int64_t bytes() const override { return bytes_; }

  StatusOr<int> unregister() override {
    if (!registered_) return FailedPrecondition("region '" + name_ + "' is not registered");
    registered_ = false;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(10));
    authorize(ctx);
    v1::UnregisterRegionRequest req;
    req.set_name(name_);
    v1::UnregisterRegionResponse resp;
    SGEMM_RETURN_IF_ERROR(from_grpc(stub_->UnregisterRegion(&ctx, req, &resp)));
    return int(resp.waited_requests());
  }

 private:
  ShmRegion(std::shared_ptr<grpc::Channel> channel, std::string name, std::string token)
      : channel_(std::move(channel)),
        stub_(v1::Sgemm::NewStub(channel_)),
        name_(std::move(name)),
        token_(std::move(token)) {}

  void authorize(grpc::ClientContext& ctx) const {
    if (!token_.empty()) ctx.AddMetadata("authorization", "Bearer " + token_);
  }

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Sgemm::Stub> stub_;
  std::string name_;
  std::string token_;  // the bearer token for the region RPCs ("" = none)
  void* data_ = nullptr;
  int64_t bytes_ = 0;
  bool created_ = false, registered_ = false;
};

StatusOr<std::string> read_text(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return InvalidArgument(std::string(what) + " " + path + ": cannot be read");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The channel's credentials: plaintext, or TLS with the given CA and (for
// mutual TLS) this client's certificate.
StatusOr<std::shared_ptr<grpc::ChannelCredentials>> channel_credentials(const TlsClientOptions& tls) {
  if (!tls.used()) return grpc::InsecureChannelCredentials();
  if (tls.cert_file.empty() != tls.key_file.empty())
    return InvalidArgument("a client certificate needs both its certificate and its key (--tls-cert, --tls-key)");
  grpc::SslCredentialsOptions o;
  if (!tls.ca_file.empty()) {
    SGEMM_ASSIGN_OR_RETURN(o.pem_root_certs, read_text(tls.ca_file, "--tls-ca"));
  }
  if (!tls.cert_file.empty()) {
    SGEMM_ASSIGN_OR_RETURN(o.pem_cert_chain, read_text(tls.cert_file, "--tls-cert"));
    SGEMM_ASSIGN_OR_RETURN(o.pem_private_key, read_text(tls.key_file, "--tls-key"));
  }
  return grpc::SslCredentials(o);
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
  using Input = StreamProtocol::Input;

  MultiplyStream(grpc::ClientContext* ctx, const v1::MultiplyRequest& header, std::vector<Input> inputs,
                 int64_t chunk_elems, float* c, int64_t c_elements, std::function<void(int64_t, int64_t)> on_chunk,
                 wire::SliceRefs* refs, std::function<void(int64_t)> on_sent)
      : ctx_(ctx),
        p_(header, std::move(inputs), chunk_elems, c, c_elements, std::move(on_chunk), refs, std::move(on_sent)) {}

  void start() {
    std::lock_guard lock(mu_);
    StartWrite(&p_.header());
    StartRead(&in_);
    StartCall();
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard lock(mu_);
    if (!ok) return;  // the call is ending: OnDone brings its status
    p_.write_done();
    grpc::ByteBuffer* out = nullptr;
    bool last = false;
    if (!p_.next_write(&out, &last)) {
      p_.mark_upload_done();
      StartWritesDone();
      return;
    }
    StartWrite(out);
  }

  void OnReadDone(bool ok) override {
    std::lock_guard lock(mu_);
    if (!ok) return;
    if (!p_.on_read(in_).ok()) {
      ctx_->TryCancel();
      return;
    }
    if (p_.have_grant()) cv_.notify_all();
    StartRead(&in_);
  }

  // Called once, from OnDone, before wait() returns: whether the call succeeded.
  void set_on_done(std::function<void(bool ok)> f) { on_done_ = std::move(f); }

  void OnDone(const grpc::Status& s) override {
    if (on_done_) {
      bool ok;
      {
        std::lock_guard lock(mu_);
        ok = s.ok() && p_.protocol_error().ok();
      }
      on_done_(ok);  // before done_: the caller's objects are still there
    }
    std::lock_guard lock(mu_);
    status_ = s;
    p_.clear();  // its slice of the caller's memory
    done_ = true;
    cv_.notify_all();
  }

  // Blocks until the server's StripeGrant has come (true; its token in *token)
  // or the call has ended without one (false).
  bool wait_grant(std::string* token) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return p_.have_grant() || done_; });
    *token = p_.grant_token();
    return p_.have_grant();
  }

  // Blocks until gRPC is done with the call; its status.
  grpc::Status wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return done_; });
    return status_;
  }

  // After wait().
  const StreamProtocol& protocol() const { return p_; }

 private:
  grpc::ClientContext* const ctx_;
  std::mutex mu_;
  std::condition_variable cv_;
  StreamProtocol p_;  // guarded by mu_
  grpc::ByteBuffer in_;
  bool done_ = false;
  std::function<void(bool)> on_done_;  // set before start()
  grpc::Status status_;
};

// The streams of one striped request: the first to fail cancels the others
// (a stripe the server refused, or a client-side error, ends the request at
// once rather than after --idle-timeout), and the order of failures says whose
// status to report. Thread-safe.
class StripeSet {
 public:
  // False when a stream has failed already (do not start this one).
  bool add(grpc::ClientContext* ctx) {
    std::lock_guard lock(mu_);
    contexts_.push_back(ctx);
    return failed_.empty();
  }
  void done(int stripe, bool ok) {
    std::lock_guard lock(mu_);
    if (ok) return;
    failed_.push_back(stripe);
    if (failed_.size() == 1)
      for (grpc::ClientContext* c : contexts_) c->TryCancel();
  }
  std::vector<int> failed() const {
    std::lock_guard lock(mu_);
    return failed_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<grpc::ClientContext*> contexts_;  // guarded by mu_
  std::vector<int> failed_;                     // guarded by mu_: stripes in the order they failed
};

// The channel for (target, credentials, token, extra arguments), shared by
// every Client of the process and never destroyed: in gRPC 1.51 destroying the
// last channel that made a callback-API call joins the callback queue's poller
// threads, which can take up to 10 s (measured: transport-bench's split runs,
// docs/transport.md). The key holds everything the channel was made from (the
// TLS files and names, the token, the arguments), so Clients with different
// credentials never share a connection. A TLS file that cannot be read sets
// *error and gives an uncached channel no call uses.
std::shared_ptr<grpc::Channel> make_channel(const std::string& target, const ClientOptions& options, Status* error) {
  auto creds = channel_credentials(options.tls);
  if (!creds.ok()) {
    *error = creds.status();
    return grpc::CreateChannel(target, grpc::InsecureChannelCredentials());  // never used: every call returns *error
  }
  static std::mutex mu;
  static auto* channels = new std::map<std::string, std::shared_ptr<grpc::Channel>>;  // leaked on purpose
  std::string key = target;
  key += "\ntls=" + std::to_string(options.tls.used()) + "\nca=" + options.tls.ca_file +
         "\ncert=" + options.tls.cert_file + "\nkey=" + options.tls.key_file +
         "\nserver_name=" + options.tls.server_name + "\ntoken=" + options.token;
  for (const auto& [name, value] : options.channel_args) key += "\n" + name + "=" + std::to_string(value);
  std::lock_guard lock(mu);
  auto& ch = (*channels)[key];
  if (!ch) {
    grpc::ChannelArguments args;
    if (!options.tls.server_name.empty()) args.SetSslTargetNameOverride(options.tls.server_name);
    // Registrations live as long as the Unix connection: keep it even when idle.
    if (is_unix_target(target)) args.SetInt(GRPC_ARG_CLIENT_IDLE_TIMEOUT_MS, std::numeric_limits<int>::max());
    for (const auto& [name, value] : options.channel_args) args.SetInt(name, value);
    ch = grpc::CreateCustomChannel(target, *creds, args);
  }
  return ch;
}

class GrpcClient final : public Client {
 public:
  GrpcClient(const std::string& target, const ClientOptions& options)
      : target_(target),
        options_(options),
        unix_target_(is_unix_target(target)),
        channel_(make_channel(target, options, &setup_)),
        stub_(v1::Sgemm::NewStub(channel_)),
        generic_(std::make_unique<grpc::TemplatedGenericStub<grpc::ByteBuffer, grpc::ByteBuffer>>(channel_)),
        health_(grpc::health::v1::Health::NewStub(channel_)) {}

  // Every call: the bearer token, when there is one.
  void prepare(grpc::ClientContext& ctx) const {
    if (!options_.token.empty()) ctx.AddMetadata("authorization", "Bearer " + options_.token);
  }

  StatusOr<bool> serving(const std::string& service, std::chrono::milliseconds timeout) override {
    SGEMM_RETURN_IF_ERROR(setup_);
    grpc::ClientContext ctx;
    prepare(ctx);
    ctx.set_deadline(std::chrono::system_clock::now() + timeout);
    grpc::health::v1::HealthCheckRequest req;
    req.set_service(service);
    grpc::health::v1::HealthCheckResponse resp;
    SGEMM_RETURN_IF_ERROR(from_grpc(health_->Check(&ctx, req, &resp)));
    return resp.status() == grpc::health::v1::HealthCheckResponse::SERVING;
  }

  StatusOr<MultiplyResult> multiply(const GemmShape& shape, const float* a, const float* b, const float* c,
                                    const MultiplyOptions& opt) override {
    const bool named = !opt.a_handle.empty() || !opt.b_handle.empty() || !opt.c_handle.empty();
    const bool resident = named || opt.keep_result;
    // A kept result is the stream's alone; operands named by handle travel in
    // MultiplyUnary's header as in the stream's.
    const bool forced_unary = options_.rpc == MultiplyRpc::kUnary && !opt.keep_result;
    Transport t = Transport::kGrpc;
    if (!forced_unary) {
      SGEMM_ASSIGN_OR_RETURN(t, transport());
    }
    const bool a_sent = opt.a_handle.empty(), b_sent = opt.b_handle.empty(), c_sent = c && opt.c_handle.empty();
    const int64_t sent_elements =
        (a_sent ? shape.m * shape.k : 0) + (b_sent ? shape.k * shape.n : 0) + (c_sent ? shape.m * shape.n : 0);
    // One product in one message each way when it fits (multiply_unary.h); a
    // Unix socket's shared memory and several connections keep the stream,
    // except for a product with resident operands, which shared memory does
    // not carry.
    // The request ring carries what MultiplyUnary would (auto's choice), with
    // a Unix socket's shared memory for the operands as auto's stream would.
    const bool by_message = options_.rpc == MultiplyRpc::kAuto || options_.rpc == MultiplyRpc::kRing;
    const bool unary = forced_unary || (by_message && !opt.keep_result && (t == Transport::kGrpc || named) &&
                                        options_.connections <= 1 && (a || !a_sent) && (b || !b_sent) &&
                                        fits_unary(shape, sent_elements));
    if (unary)
      return with_retries(opt, [&](std::chrono::system_clock::time_point deadline) {
        return multiply_unary_once(shape, a, b, c, opt, deadline);
      });
    if (t == Transport::kShm && !resident) return multiply_through_shm(shape, a, b, c, opt);
    return with_retries(opt, [&](std::chrono::system_clock::time_point deadline) {
      return multiply_once(shape, a, b, c, nullptr, opt, deadline);
    });
  }

  // One MultiplyUnary call (multiply_unary.h): the header as the stream's, A,
  // B (and C) whole but for those named by handle; with `regions` (shared
  // memory) the header names them all and nothing is sent, and with an
  // output region no C comes back.
  StatusOr<MultiplyResult> multiply_unary_once(const GemmShape& shape, const float* a, const float* b, const float* c,
                                               const MultiplyOptions& opt,
                                               std::chrono::system_clock::time_point deadline,
                                               const RegionRefs* regions = nullptr) {
    SGEMM_RETURN_IF_ERROR(setup_);
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    if (!regions && ((!a && opt.a_handle.empty()) || (!b && opt.b_handle.empty())))
      return InvalidArgument(
          "multiply: A and B are required (or named by handle: MultiplyOptions::a_handle, b_handle)");
    // Declared before the call so it outlives it: gRPC drops its last slices when the call is destroyed.
    wire::SliceRefs refs;
    StatusOr<MultiplyResult> result = Internal("not run");
    {
      grpc::ClientContext ctx;
      prepare(ctx);
      if (deadline != std::chrono::system_clock::time_point::max()) ctx.set_deadline(deadline);
      v1::MultiplyRequest req;
      v1::GemmHeader* h = req.mutable_header();
      set_product_fields(shape, regions ? regions->has_c() : c != nullptr, opt, h);
      if (regions) {
        set_ref(h->mutable_a_region(), regions->a);
        set_ref(h->mutable_b_region(), regions->b);
        if (regions->c) set_ref(h->mutable_c_region(), *regions->c);
        if (regions->out) set_ref(h->mutable_out_region(), *regions->out);
      }
      SGEMM_RETURN_IF_ERROR(set_exec_fields(opt, h));
      const int64_t total = regions && regions->has_out() ? 0 : shape.m * shape.n;
      MultiplyResult r;
      float* out = opt.c_out;
      if (!out && total > 0) {
        r.c.resize(std::size_t(total));
        out = r.c.data();
      }
      // What is named by handle or in a region is not sent (the stream's rule).
      std::vector<UnaryInput> inputs;
      if (!regions) {
        if (opt.a_handle.empty()) inputs.push_back({wire::WireMatrix::kA, a, shape.m * shape.k});
        if (opt.b_handle.empty()) inputs.push_back({wire::WireMatrix::kB, b, shape.k * shape.n});
        if (c && opt.c_handle.empty()) inputs.push_back({wire::WireMatrix::kC, c, total});
      }
      // The request ring carries what fits its slots: the request, and C with
      // room for the summary (a trace may not fit: it goes as MultiplyUnary).
      RequestRing* ring = nullptr;
      int64_t sent_bytes = 0;
      for (const UnaryInput& in : inputs) sent_bytes += in.elements * int64_t(sizeof(float));
      if (options_.rpc == MultiplyRpc::kRing && !opt.trace &&
          std::max(sent_bytes, total * int64_t(sizeof(float))) + kRingSummaryRoom <=
              kRingOptions.slot_bytes - ring::kSlotHeaderBytes) {
        SGEMM_ASSIGN_OR_RETURN(ring, request_ring());
      }
      UnaryExchange exchange = grpc_unary_exchange(*generic_, &ctx);
      if (ring)
        exchange = [ring, deadline](const grpc::ByteBuffer& request, grpc::ByteBuffer* response) {
          return ring->exchange(request, response, steady_deadline(deadline));
        };
      auto got = run_unary(exchange, req, inputs, out, total, &refs);
      if (got.ok()) {
        r.summary = summary_from_proto(got->summary);
        r.bytes_sent = got->bytes_sent;
        r.bytes_received = got->bytes_received;
        r.rpc = ring ? MultiplyRpc::kRing : MultiplyRpc::kUnary;
        r.wall_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        if (opt.on_sent)
          for (const UnaryInput& in : inputs) opt.on_sent(in.elements * int64_t(sizeof(float)));
        if (opt.on_chunk && total > 0) opt.on_chunk(0, total);
        result = std::move(r);
      } else {
        result = got.status();
      }
    }                  // the call (ClientContext) goes here
    refs.wait_zero();  // gRPC holds no slice of the caller's A, B or C any more
    return result;
  }

  StatusOr<MultiplyResult> multiply_regions(const GemmShape& shape, const RegionMatrix& a, const RegionMatrix& b,
                                            const std::optional<RegionMatrix>& c,
                                            const std::optional<RegionMatrix>& out,
                                            const MultiplyOptions& opt) override {
    RegionRefs refs{a, b, c, out};
    if (!a.region || !b.region || (c && !c->region) || (out && !out->region))
      return InvalidArgument("multiply_regions: every RegionMatrix given needs its region");
    // Nothing travels but the header: one MultiplyUnary message each way
    // whenever C comes back within its limit (or goes to `out`).
    const bool unary = !opt.keep_result && (options_.rpc == MultiplyRpc::kUnary || options_.rpc == MultiplyRpc::kRing ||
                                            (options_.rpc == MultiplyRpc::kAuto && (out || fits_unary(shape, 0))));
    if (unary)
      return with_retries(opt, [&](std::chrono::system_clock::time_point deadline) {
        return multiply_unary_once(shape, nullptr, nullptr, nullptr, opt, deadline, &refs);
      });
    return with_retries(opt, [&](std::chrono::system_clock::time_point deadline) {
      return multiply_once(shape, nullptr, nullptr, nullptr, &refs, opt, deadline);
    });
  }

  StatusOr<MultiplyResult> multiply_device(const GemmShape& shape, const DeviceBufferMatrix& a,
                                           const DeviceBufferMatrix& b, const std::optional<DeviceBufferMatrix>& c,
                                           const std::optional<DeviceBufferMatrix>& out,
                                           const MultiplyOptions& opt) override {
    const DeviceRefs device{a, b, c, out};
    RegionRefs refs;
    refs.device = &device;
    return with_retries(opt, [&](std::chrono::system_clock::time_point deadline) {
      return multiply_once(shape, nullptr, nullptr, nullptr, &refs, opt, deadline);
    });
  }

  // A single product's header fields, the same on the stream and MultiplyUnary.
  static void set_product_fields(const GemmShape& shape, bool has_c, const MultiplyOptions& opt, v1::GemmHeader* h) {
    h->set_m(shape.m);
    h->set_n(shape.n);
    h->set_k(shape.k);
    h->set_alpha(opt.alpha);
    h->set_beta(opt.beta);
    h->set_has_c(has_c);
    h->set_trace(opt.trace);
    matrix_rpcs::set_header_fields(opt, h);  // op(A), op(B), resident operands (matrix_rpcs.cc)
  }

  template <typename Once>
  auto with_retries(const MultiplyOptions& opt, Once&& once) -> decltype(once(std::chrono::system_clock::now())) {
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    const auto deadline = opt.timeout.count() > 0 ? std::chrono::system_clock::now() + opt.timeout
                                                  : std::chrono::system_clock::time_point::max();
    const RetryPolicy& policy = options_.retry;
    double backoff_ms = double(policy.initial_backoff.count());
    for (int attempt = 1;; ++attempt) {
      auto r = once(deadline);
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
                                         const RegionRefs* regions, const MultiplyOptions& opt,
                                         std::chrono::system_clock::time_point deadline) {
    SGEMM_RETURN_IF_ERROR(setup_);
    // Declared before the call so it outlives it: gRPC drops its last slices when the call is destroyed.
    wire::SliceRefs refs;
    StatusOr<MultiplyResult> result = Internal("not run");
    {
      grpc::ClientContext ctx;
      prepare(ctx);
      if (deadline != std::chrono::system_clock::time_point::max()) ctx.set_deadline(deadline);

      v1::MultiplyRequest req;
      v1::GemmHeader* h = req.mutable_header();
      set_product_fields(shape, regions ? regions->has_c() : c != nullptr, opt, h);
      if (regions && regions->device) {
        set_device_ref(h->mutable_a_device(), regions->device->a);
        set_device_ref(h->mutable_b_device(), regions->device->b);
        if (regions->device->c) set_device_ref(h->mutable_c_device(), *regions->device->c);
        if (regions->device->out) set_device_ref(h->mutable_out_device(), *regions->device->out);
      } else if (regions) {
        set_ref(h->mutable_a_region(), regions->a);
        set_ref(h->mutable_b_region(), regions->b);
        if (regions->c) set_ref(h->mutable_c_region(), *regions->c);
        if (regions->out) set_ref(h->mutable_out_region(), *regions->out);
      }
      if (Status st = set_exec_fields(opt, h); !st.ok()) return st;

      result = run_stream(ctx, req, shape, a, b, c, regions, opt, deadline, &refs);
    }                  // the call (ClientContext) goes here
    refs.wait_zero();  // gRPC holds no slice of the caller's A, B or C any more
    return result;
  }

  // One Multiply call through MultiplyStream. With `regions` no matrix byte is
  // streamed (the header names them), and with an output region no C comes back.
  // With ClientOptions::connections (or the size) asking for several, the
  // request is spread over that many streams on connections of their own
  // (stripe_plan.h): this stream is stripe 0, the others attach with the
  // server's token once it comes, and all of them fill C.
  StatusOr<MultiplyResult> run_stream(grpc::ClientContext& ctx, const v1::MultiplyRequest& header,
                                      const GemmShape& shape, const float* a, const float* b, const float* c,
                                      const RegionRefs* regions, const MultiplyOptions& opt,
                                      std::chrono::system_clock::time_point deadline, wire::SliceRefs* refs) {
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    MultiplyResult result;
    // No chunk of C comes back when it goes to a region, or stays resident without send_c.
    const bool c_in_region = (regions && regions->has_out()) || (opt.keep_result && !opt.send_c);
    const int64_t total = c_in_region ? 0 : shape.m * shape.n;
    float* out = c_in_region ? nullptr : opt.c_out;
    if (!out && total > 0) {
      result.c.resize(std::size_t(total));
      out = result.c.data();
    }
    // B (and C) first, then A by row blocks: the server starts computing
    // once B (and C) are in and A is arriving (docs/lifecycle.md).
    // Regions: the header is all there is to send.
    // A request naming an operand by handle (a resident matrix) sends the
    // others on one stream, and never the named one.
    // A transposed operand is striped by its stored rows, like the others.
    const bool handles = !opt.a_handle.empty() || !opt.b_handle.empty() || !opt.c_handle.empty();
    const StripePlan plan = regions ? StripePlan{1, 0, {{}}}
                                    : plan_stripes(shape, c != nullptr,
                                                   handles ? 1 : stripes_for(shape, c != nullptr, options_.connections),
                                                   options_.chunk_bytes, opt.op_a, opt.op_b);
    auto inputs_of = [&](int stripe) {
      std::vector<StreamProtocol::Input> inputs;
      for (const StripeRange& r : plan.per_stripe[std::size_t(stripe)]) {
        switch (r.matrix) {
          case StripeMatrix::kA:
            if (opt.a_handle.empty()) inputs.push_back({wire::WireMatrix::kA, a, r.begin, r.end});
            break;
          case StripeMatrix::kB:
            if (opt.b_handle.empty()) inputs.push_back({wire::WireMatrix::kB, b, r.begin, r.end});
            break;
          case StripeMatrix::kC:
            if (opt.c_handle.empty()) inputs.push_back({wire::WireMatrix::kC, c, r.begin, r.end});
            break;
        }
      }
      return inputs;
    };
    v1::MultiplyRequest striped_header;
    const v1::MultiplyRequest* first = &header;
    if (plan.stripes > 1) {
      striped_header = header;
      striped_header.mutable_header()->set_stripes(plan.stripes);
      striped_header.mutable_header()->set_stripe_rows(plan.stripe_rows);
      first = &striped_header;
    }
    const int64_t chunk_elems = std::max<int64_t>(1, options_.chunk_bytes / int64_t(sizeof(float)));
    StripeSet set;                                               // outlives every stream (declared first)
    std::vector<std::unique_ptr<grpc::ClientContext>> contexts;  // outlive their streams
    // One stream runs on this thread (multiply_stream.h); stripes run side by side as reactors.
    std::optional<StreamProtocol> direct;
    std::optional<MultiplyStream> call;
    std::vector<std::unique_ptr<MultiplyStream>> stripes;
    grpc::Status gst;
    if (plan.stripes == 1 && options_.caller_thread_calls) {
      direct.emplace(*first, inputs_of(0), chunk_elems, out, total, opt.on_chunk, refs, opt.on_sent);
      gst = run_on_caller_thread(*generic_, &ctx, *direct);
    } else {
      call.emplace(&ctx, *first, inputs_of(0), chunk_elems, out, total, opt.on_chunk, refs, opt.on_sent);
      if (plan.stripes > 1) {
        set.add(&ctx);
        call->set_on_done([&set](bool ok) { set.done(0, ok); });
      }
      generic_->PrepareBidiStreamingCall(&ctx, "/sgemm.v1.Sgemm/Multiply", grpc::StubOptions(), &*call);
      call->start();
      // The other stripes, once the server has answered with their token.
      std::string token;
      if (plan.stripes > 1 && call->wait_grant(&token)) {
        for (int s = 1; s < plan.stripes; ++s) {
          auto& sctx = contexts.emplace_back(std::make_unique<grpc::ClientContext>());
          if (!set.add(sctx.get())) break;  // a stream has failed: the request is over
          prepare(*sctx);
          if (deadline != std::chrono::system_clock::time_point::max()) sctx->set_deadline(deadline);
          v1::MultiplyRequest attach;
          attach.mutable_attach()->set_token(token);
          attach.mutable_attach()->set_stripe(s);
          auto& stream = stripes.emplace_back(std::make_unique<MultiplyStream>(
              sctx.get(), attach, inputs_of(s), chunk_elems, out, total, opt.on_chunk, refs, opt.on_sent));
          stream->set_on_done([&set, s](bool ok) { set.done(s, ok); });
          stripe_stub(s)->PrepareBidiStreamingCall(sctx.get(), "/sgemm.v1.Sgemm/Multiply", grpc::StubOptions(),
                                                   stream.get());
          stream->start();
        }
      }
      gst = call->wait();
    }
    const StreamProtocol& p0 = direct ? *direct : call->protocol();
    std::vector<Status> statuses = {p0.protocol_error().ok() ? from_grpc(gst) : p0.protocol_error()};
    bool first_c_early = p0.first_c_before_upload_end();
    result.bytes_sent = p0.bytes_sent();
    result.bytes_received = p0.bytes_received();
    for (auto& stream : stripes) {
      const grpc::Status sg = stream->wait();
      const StreamProtocol& sp = stream->protocol();
      statuses.push_back(sp.protocol_error().ok() ? from_grpc(sg) : sp.protocol_error());
      first_c_early = first_c_early || sp.first_c_before_upload_end();
      result.bytes_sent += sp.bytes_sent();
      result.bytes_received += sp.bytes_received();
    }
    // Which status to report: the first failure, unless it is another stripe's ABORTED echo or our own cancel.
    Status st = statuses[0];
    if (plan.stripes > 1) {
      const std::vector<int> failed = set.failed();
      if (!failed.empty()) st = statuses[std::size_t(failed[0])];
      for (int f : failed) {
        const StatusCode k = statuses[std::size_t(f)].code();
        if (k != StatusCode::kAborted && k != StatusCode::kCancelled) {
          st = statuses[std::size_t(f)];
          break;
        }
      }
    }
    if (!st.ok()) return st;
    if (plan.stripes > 1 && stripes.empty())
      return Internal("the server answered a request over " + std::to_string(plan.stripes) +
                      " stripes without a StripeGrant (does it predate GemmHeader.stripes? use connections 1)");
    if (!p0.have_summary()) return Internal("the server ended the stream without a summary");
    if (result.bytes_received != total * int64_t(sizeof(float)))
      return Internal("the server sent " + std::to_string(result.bytes_received / 4) + " of " + std::to_string(total) +
                      " elements of C");
    result.summary = summary_from_proto(p0.summary().summary());
    result.first_c_before_upload_end = first_c_early;
    result.wall_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    return result;
  }

  StatusOr<BatchResult> multiply_batch(const BatchProducts& batch, const float* a, const float* b, const float* c,
                                       const MultiplyOptions& opt) override {
    if (!opt.c_handle.empty() || opt.keep_result)
      return InvalidArgument(
          "multiply_batch: a batch returns its C; a C handle and keep_result apply to single products");
    if ((!opt.a_handle.empty() || !opt.b_handle.empty()) && !batch.group.empty())
      return InvalidArgument(
          "multiply_batch: a resident A or B is shared by every product of a strided batch (count), not a group");
    if (opt.split == SplitMode::kRows || opt.split == SplitMode::kK)
      return InvalidArgument("multiply_batch: a batch is split across GPUs by product; split rows or k does not apply");
    if ((!a && opt.a_handle.empty()) || (!b && opt.b_handle.empty()))
      return InvalidArgument("multiply_batch: A and B are required (as data or as a handle in the options)");
    return with_retries(opt, [&](std::chrono::system_clock::time_point deadline) {
      return multiply_batch_once(batch, a, b, c, nullptr, opt, deadline);
    });
  }

  StatusOr<BatchResult> multiply_batch_regions(const BatchProducts& batch, const RegionMatrix& a, const RegionMatrix& b,
                                               const std::optional<RegionMatrix>& c,
                                               const std::optional<RegionMatrix>& out,
                                               const MultiplyOptions& opt) override {
    if (!opt.a_handle.empty() || !opt.b_handle.empty() || !opt.c_handle.empty() || opt.keep_result)
      return InvalidArgument("multiply_batch_regions: the regions hold every operand; handles do not apply");
    if (opt.split == SplitMode::kRows || opt.split == SplitMode::kK)
      return InvalidArgument(
          "multiply_batch_regions: a batch is split across GPUs by product; split rows or k does not apply");
    if (!a.region || !b.region || (c && !c->region) || (out && !out->region))
      return InvalidArgument("multiply_batch_regions: every RegionMatrix given needs its region");
    for (const RegionMatrix* m : {&a, &b, c ? &*c : nullptr, out ? &*out : nullptr})
      if (m && m->ld != 0)
        return InvalidArgument(
            "multiply_batch_regions: a batch's operand is every product's matrix, dense, one after another (ld 0)");
    const RegionRefs refs{a, b, c, out};
    return with_retries(opt, [&](std::chrono::system_clock::time_point deadline) {
      return multiply_batch_once(batch, nullptr, nullptr, nullptr, &refs, opt, deadline);
    });
  }

  // One batch call: operands streamed from `a`, `b`, `c` (an operand named by
  // handle is not), or named in `regions`; C comes back unless it goes to an
  // output region.
  StatusOr<BatchResult> multiply_batch_once(const BatchProducts& batch, const float* a, const float* b, const float* c,
                                            const RegionRefs* regions, const MultiplyOptions& opt,
                                            std::chrono::system_clock::time_point deadline) {
    SGEMM_RETURN_IF_ERROR(setup_);
    const BatchLayout layout = batch_layout(batch);
    wire::SliceRefs refs;  // outlives the call: gRPC drops its last slices when the call is destroyed
    StatusOr<BatchResult> result = Internal("not run");
    {
      grpc::ClientContext ctx;
      prepare(ctx);
      if (deadline != std::chrono::system_clock::time_point::max()) ctx.set_deadline(deadline);
      v1::MultiplyRequest req;
      v1::GemmHeader* h = req.mutable_header();
      h->set_alpha(opt.alpha);
      h->set_beta(opt.beta);
      h->set_has_c(regions ? regions->has_c() : c != nullptr);
      h->set_trace(opt.trace);
      matrix_rpcs::set_header_fields(opt, h);  // op_a, op_b, a shared A or B handle
      SGEMM_RETURN_IF_ERROR(set_exec_fields(opt, h));
      SGEMM_RETURN_IF_ERROR(batch_call::set_batch_fields(batch, h));
      if (regions) {
        set_ref(h->mutable_a_region(), regions->a);
        set_ref(h->mutable_b_region(), regions->b);
        if (regions->c) set_ref(h->mutable_c_region(), *regions->c);
        if (regions->out) set_ref(h->mutable_out_region(), *regions->out);
      }
      const bool c_in_region = regions && regions->out;
      BatchResult r;
      float* out = opt.c_out;
      if (!out && !c_in_region) {
        r.c.assign(std::size_t(layout.c_elements), 0.0f);
        out = r.c.data();
      }
      // B (and C) first, then A, as for one product; nothing with regions, nor an operand named by handle.
      std::vector<StreamProtocol::Input> inputs;
      if (!regions) {
        if (opt.b_handle.empty()) inputs.push_back({wire::WireMatrix::kB, b, 0, layout.b_elements});
        if (c) inputs.push_back({wire::WireMatrix::kC, c, 0, layout.c_elements});
        if (opt.a_handle.empty()) inputs.push_back({wire::WireMatrix::kA, a, 0, layout.a_elements});
      }
      const int64_t chunk_elems = std::max<int64_t>(1, options_.chunk_bytes / int64_t(sizeof(float)));
      StreamProtocol p(req, std::move(inputs), chunk_elems, c_in_region ? nullptr : out,
                       c_in_region ? 0 : layout.c_elements, opt.on_chunk, &refs, opt.on_sent);
      const grpc::Status gst = run_on_caller_thread(*generic_, &ctx, p);
      Status st = p.protocol_error().ok() ? from_grpc(gst) : p.protocol_error();
      if (st.ok() && !p.have_summary()) st = Internal("the server ended the stream without a summary");
      if (st.ok()) {
        const v1::MultiplySummary& s = p.summary().summary();
        r.summary = summary_from_proto(s);
        auto products = batch_call::products_from_proto(s, layout, p.bytes_received(), !c_in_region);
        if (!products.ok()) {
          st = products.status();
        } else {
          r.products = std::move(products).value();
          r.products_failed = s.products_failed();
          r.bytes_sent = p.bytes_sent();
          r.bytes_received = p.bytes_received();
          result = std::move(r);
        }
      }
      if (!st.ok()) result = st;
    }
    refs.wait_zero();  // gRPC holds no slice of the caller's A, B or C any more
    return result;
  }

  StatusOr<ServerInfo> info(std::chrono::milliseconds timeout) override {
    SGEMM_RETURN_IF_ERROR(setup_);
    grpc::ClientContext ctx;
    prepare(ctx);
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
    for (const auto& c : resp.contracts())
      out.contracts.push_back({precision_text(c.precision()), c.promise(), {c.kernels().begin(), c.kernels().end()}});
    for (const auto& d : resp.devices())
      out.devices.push_back({d.index(), d.name(), d.memory_bytes(), d.sm_count(), d.compute_major(), d.compute_minor(),
                             d.unhealthy(), d.health_reason()});
    out.startup_ms = resp.startup_ms();
    out.pinned_pool_bytes = resp.pinned_pool_bytes();
    out.max_matrix_elements = resp.limits().max_matrix_elements();
    out.max_chunk_bytes = resp.limits().max_chunk_bytes();
    out.max_in_flight = resp.limits().max_in_flight();
    out.max_queued = resp.limits().max_queued();
    out.max_stripes = resp.limits().max_stripes();
    out.host_memory_bytes = resp.limits().host_memory_bytes();
    out.open_streams = resp.load().open_streams();
    out.in_flight = resp.load().in_flight();
    out.queued = resp.load().queued();
    out.requests_total = resp.load().requests_total();
    out.requests_failed = resp.load().requests_failed();
    out.host_bytes_in_use = resp.load().host_bytes_in_use();
    out.region_bytes = resp.limits().region_bytes();
    out.region_bytes_in_use = resp.region_bytes_in_use();
    out.regions_available = resp.regions_available();
    out.client = resp.client();
    out.client_max_in_flight = resp.limits().client_max_in_flight();
    out.client_max_bytes_in_flight = resp.limits().client_max_bytes_in_flight();
    out.client_in_flight = resp.load().client_in_flight();
    out.client_bytes_in_flight = resp.load().client_bytes_in_flight();
    out.resident_bytes = resp.limits().resident_bytes();
    out.resident_bytes_in_use = resp.load().resident_bytes_in_use();
    out.resident_matrices = resp.load().resident_matrices();
    return out;
  }

  StatusOr<PutResult> put(int64_t rows, int64_t cols, const float* data, const PutOptions& options) override {
    SGEMM_RETURN_IF_ERROR(setup_);
    return matrix_rpcs::put(
        channel_, [this](grpc::ClientContext& ctx) { prepare(ctx); }, options_.chunk_bytes, rows, cols, data, options);
  }
  StatusOr<PutResult> put_region(int64_t rows, int64_t cols, const RegionMatrix& matrix,
                                 const PutOptions& options) override {
    SGEMM_RETURN_IF_ERROR(setup_);
    return matrix_rpcs::put_region(
        channel_, [this](grpc::ClientContext& ctx) { prepare(ctx); }, rows, cols, matrix, options);
  }
  StatusOr<int> remove(const std::string& handle) override {
    SGEMM_RETURN_IF_ERROR(setup_);
    return matrix_rpcs::remove(
        channel_, [this](grpc::ClientContext& ctx) { prepare(ctx); }, handle);
  }
  StatusOr<MatrixList> list() override {
    SGEMM_RETURN_IF_ERROR(setup_);
    return matrix_rpcs::list(channel_, [this](grpc::ClientContext& ctx) { prepare(ctx); });
  }

  StatusOr<Transport> transport() override {
    if (options_.transport == Transport::kGrpc) return Transport::kGrpc;
    std::lock_guard lock(transport_mu_);
    if (resolved_) return *resolved_;
    const bool want_shm = options_.transport == Transport::kShm;
    if (!unix_target_) {
      if (want_shm)
        return FailedPrecondition(
            "transport shm needs the server's Unix socket: connect to unix:PATH (sgemm-server --listen unix:PATH)");
      resolved_ = Transport::kGrpc;
      return *resolved_;
    }
    auto i = info(std::chrono::milliseconds(10000));
    if (!i.ok()) {
      if (want_shm) return i.status();
      return Transport::kGrpc;  // unresolved: the request itself reports the server unreachable
    }
    if (!i->regions_available) {
      if (want_shm) return FailedPrecondition("the server does not offer shared-memory regions on this connection");
      resolved_ = Transport::kGrpc;
    } else {
      resolved_ = Transport::kShm;
    }
    return *resolved_;
  }

  StatusOr<std::unique_ptr<Region>> create_region(int64_t bytes) override {
    if (!unix_target_)
      return FailedPrecondition("shared-memory regions need the server's Unix socket: connect to unix:PATH");
    return ShmRegion::create(channel_, bytes, options_.token);
  }

 private:
  // multiply() with plain pointers over shared memory: one scratch region of
  // this client's (kept for the next call) holds A, B and C; C is computed in
  // place and copied out. The copies in and out are the caller's side of the
  // transport, so they are in wall_ms and bytes_sent/bytes_received.
  StatusOr<MultiplyResult> multiply_through_shm(const GemmShape& s, const float* a, const float* b, const float* c,
                                                const MultiplyOptions& opt) {
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    auto align = [](int64_t x) { return (x + 63) / 64 * 64; };
    const int64_t a_off = 0, b_off = align(s.m * s.k * 4), c_off = b_off + align(s.k * s.n * 4);
    const int64_t total = c_off + s.m * s.n * 4;
    std::unique_ptr<Region> region;
    for (int attempt = 0;; ++attempt) {
      {
        std::lock_guard lock(scratch_mu_);
        if (scratch_ && scratch_->bytes() >= total) region = std::move(scratch_);
      }
      if (!region) {
        SGEMM_ASSIGN_OR_RETURN(region, create_region(total));
      }
      char* base = static_cast<char*>(region->data());
      std::memcpy(base + a_off, a, std::size_t(s.m * s.k) * 4);
      std::memcpy(base + b_off, b, std::size_t(s.k * s.n) * 4);
      if (c) std::memcpy(base + c_off, c, std::size_t(s.m * s.n) * 4);
      const RegionMatrix cm{region.get(), c_off, 0};
      auto r = multiply_regions(s, {region.get(), a_off, 0}, {region.get(), b_off, 0},
                                c ? std::optional<RegionMatrix>(cm) : std::nullopt, cm, opt);
      if (!r.ok() && r.status().code() == StatusCode::kNotFound && attempt == 0) {
        region.reset();  // the connection that registered it closed: register a fresh one
        continue;
      }
      if (!r.ok()) return r;
      const int64_t elems = s.m * s.n;
      float* dst = opt.c_out;  // MultiplyOptions::c_out, else MultiplyResult::c
      if (!dst) {
        r->c.resize(std::size_t(elems));
        dst = r->c.data();
      }
      const float* cr = reinterpret_cast<const float*>(base + c_off);
      const int64_t step = std::max<int64_t>(1, options_.chunk_bytes / 4);
      for (int64_t off = 0; off < elems; off += step) {
        const int64_t count = std::min(step, elems - off);
        std::memcpy(dst + off, cr + off, std::size_t(count) * 4);
        if (opt.on_chunk) opt.on_chunk(off, count);
      }
      r->bytes_sent = (s.m * s.k + s.k * s.n + (c ? elems : 0)) * 4;
      r->bytes_received = elems * 4;
      r->wall_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      {
        std::lock_guard lock(scratch_mu_);
        if (!scratch_ || scratch_->bytes() < region->bytes()) std::swap(scratch_, region);
      }
      return r;  // a smaller region left over is unregistered here
    }
  }

  // The generic stub for stripe `stripe` (>= 1) of a striped request: a
  // channel of its own (its own subchannel pool, so its own connection),
  // kept like every channel (make_channel).
  grpc::TemplatedGenericStub<grpc::ByteBuffer, grpc::ByteBuffer>* stripe_stub(int stripe) {
    std::lock_guard lock(stripe_mu_);
    if (stripe_stubs_.size() <= std::size_t(stripe)) stripe_stubs_.resize(std::size_t(stripe) + 1);
    auto& stub = stripe_stubs_[std::size_t(stripe)];
    if (!stub) {
      ClientOptions o = options_;
      o.channel_args.emplace_back(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
      o.channel_args.emplace_back("sgemm.stripe", stripe);
      Status ignored;  // setup_ has the same TLS files and said so already
      stub = std::make_unique<grpc::TemplatedGenericStub<grpc::ByteBuffer, grpc::ByteBuffer>>(
          make_channel(target_, o, &ignored));
    }
    return stub.get();
  }

  // The request ring (MultiplyRpc::kRing), opened on first use in a region of its own.
  StatusOr<RequestRing*> request_ring() {
    std::lock_guard lock(ring_mu_);
    if (ring_) return ring_.get();
    if (!unix_target_)
      return FailedPrecondition("a request ring needs the server's Unix socket (unix:PATH); this client's target is " +
                                target_);
    SGEMM_ASSIGN_OR_RETURN(ring_region_, create_region(ring::ring_bytes(kRingOptions.slots, kRingOptions.slot_bytes)));
    SGEMM_ASSIGN_OR_RETURN(ring_, RequestRing::open(
                                      channel_, [this](grpc::ClientContext& ctx) { prepare(ctx); },
                                      ring_region_->name(), ring_region_->data(), kRingOptions));
    return ring_.get();
  }

  // A request ring's slots: 1 MiB of payload each, as many as a client's
  // threads usually run products at once.
  static constexpr RingOptions kRingOptions{4, (int64_t{1} << 20) + ring::kSlotHeaderBytes,
                                            std::chrono::microseconds(1000)};
  static constexpr int64_t kRingSummaryRoom = 64 << 10;  // an answer's summary without a trace fits in this

  const std::string target_;
  const ClientOptions options_;
  const bool unix_target_ = false;
  Status setup_;  // a TLS file that could not be read: every call returns it
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Sgemm::Stub> stub_;
  std::unique_ptr<grpc::TemplatedGenericStub<grpc::ByteBuffer, grpc::ByteBuffer>> generic_;  // Multiply's data plane
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
  std::mutex rng_mu_;
  std::mt19937_64 rng_{std::random_device{}()};  // guarded by rng_mu_ (backoff jitter)
  std::mutex transport_mu_;
  std::optional<Transport> resolved_;  // guarded by transport_mu_
  std::mutex scratch_mu_;
  std::unique_ptr<Region> scratch_;  // guarded by scratch_mu_: multiply_through_shm's region, kept for reuse
  std::mutex stripe_mu_;
  // guarded by stripe_mu_: stripe_stub()'s, by stripe (index 0 unused: stripe 0 is generic_)
  std::vector<std::unique_ptr<grpc::TemplatedGenericStub<grpc::ByteBuffer, grpc::ByteBuffer>>> stripe_stubs_;
  std::mutex ring_mu_;
  std::unique_ptr<Region> ring_region_;  // guarded by ring_mu_; outlives ring_ (declared first, goes last)
  std::unique_ptr<RequestRing> ring_;    // guarded by ring_mu_ until made; used unlocked after
};

}  // namespace

const char* transport_name(Transport t) {
  switch (t) {
    case Transport::kAuto:
      return "auto";
    case Transport::kGrpc:
      return "grpc";
    case Transport::kShm:
      return "shm";
  }
  return "?";
}

std::optional<Transport> parse_transport(std::string_view name) {
  if (name == "auto") return Transport::kAuto;
  if (name == "grpc") return Transport::kGrpc;
  if (name == "shm") return Transport::kShm;
  return std::nullopt;
}

const char* multiply_rpc_name(MultiplyRpc rpc) {
  switch (rpc) {
    case MultiplyRpc::kAuto:
      return "auto";
    case MultiplyRpc::kStream:
      return "stream";
    case MultiplyRpc::kUnary:
      return "unary";
    case MultiplyRpc::kRing:
      return "ring";
  }
  return "?";
}

std::optional<MultiplyRpc> parse_multiply_rpc(std::string_view name) {
  if (name == "auto") return MultiplyRpc::kAuto;
  if (name == "stream") return MultiplyRpc::kStream;
  if (name == "unary") return MultiplyRpc::kUnary;
  if (name == "ring") return MultiplyRpc::kRing;
  return std::nullopt;
}

std::unique_ptr<Client> Client::connect(const std::string& target, const ClientOptions& options) {
  return std::make_unique<GrpcClient>(target, options);
}

}  // namespace sgemm
