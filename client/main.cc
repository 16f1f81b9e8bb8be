// sgemm-client: submit products to sgemm-server and show where the time went.
//
//   sgemm-client submit --size 4096 --verify
//   sgemm-client submit --m 1000 --n 1 --k 1000 --alpha 2 --beta 0.5 --json
//   sgemm-client submit --a a.npy --b b.npy [--c c.npy --beta 1] --out c_out.npy
//   sgemm-client submit --unix /run/sgemm/sgemm.sock --size 8192 --transport shm   (docs/transport.md)
//   sgemm-client submit --size 4096 --split rows --trace trace.json   # open in ui.perfetto.dev
//   sgemm-client info
//   H=$(sgemm-client put --rows 4096 --cols 4096)       # resident matrices (docs/resident.md)
//   sgemm-client submit --m 1 --n 4096 --k 4096 --b-handle $H; sgemm-client ls; sgemm-client rm $H
//   sgemm-client submit --server host:50051 --tls-ca ca.pem --token "$TOKEN" --size 1024
//
// Exit codes (also in --help): 0 done; 1 --verify found a wrong result, or
// health answered NOT_SERVING; 2 bad arguments or unreadable files (nothing
// was sent); 3 the request or the connection failed (the message names the
// gRPC status), or C could not be written.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <thread>
#include <tuple>
#include <vector>

#include "client/batch_command.h"
#include "client/cuda_ipc.h"
#include "client/matrix_files.h"
#include "client/resident_commands.h"
#include "client/sgemm_client.h"
#include "common/reference_gemm.h"
#include "common/timing_record.h"

namespace {

struct SubmitOptions {
  int64_t size = 0, m = 0, n = 0, k = 0;
  float alpha = 1.0f, beta = 0.0f;
  bool with_c = false;  // send C (implied by a non-zero --beta)
  uint64_t seed = 0;    // 0: a fresh random seed
  int repeat = 1;
  bool verify = false, json = false;
  std::string kernel, split;
  std::string precision = "fp32";
  int64_t timeout_ms = 0;
  std::string a_file, b_file, c_file, out_file;  // matrices from/to files (client/matrix_files.h)
  std::string transport = "auto";                // auto | grpc | shm | cuda-ipc
  std::string rpc = "auto";                      // auto | stream | unary (ClientOptions::rpc)
  int gpu = 0;                                   // cuda-ipc: the CUDA device holding A, B and C
  std::string unix_path;                         // the server's Unix socket (shared memory); "" = none
  std::string trace_file;                        // Chrome trace of the (last) request; "" = none
  std::string a_handle, b_handle, c_handle;      // resident operands (docs/resident.md)
  std::string op_a = "n", op_b = "n";            // BLAS transa / transb: "t" = the operand is stored transposed
  std::string a_at, b_at, c_at;                  // "ROW,COL": a submatrix of the resident operand
  bool keep = false, keep_evictable = false, send_c = false;
  bool discard = false;    // --a/--b without --out: compute and throw C away (timing runs)
  bool progress = true;    // a progress line on stderr when it is a terminal (--no-progress: never)
  int64_t batch = 0;       // --batch N: N products of the shape in one request (client/batch_command.h)
  std::string group_file;  // --group FILE: a group of shapes in one request
  bool fail_fast = false, check_finite = false;
};

constexpr const char* kExitCodes =
    "Exit codes: 0 done; 1 --verify found a wrong result, or health answered NOT_SERVING; 2 bad arguments or "
    "unreadable files (nothing was sent); 3 the request or the connection failed (the message names the gRPC "
    "status), or C could not be written.";

std::string rate_text(double bytes, double seconds) {
  const double r = seconds > 0 ? bytes / seconds : 0;
  char buf[32];
  if (r >= 1e9)
    std::snprintf(buf, sizeof buf, "%.2f GB/s", r / 1e9);
  else
    std::snprintf(buf, sizeof buf, "%.1f MB/s", r / 1e6);
  return buf;
}

// One status line on stderr, rewritten in place five times a second while a
// request runs: upload (share of A, B and C written, rate), compute (time
// since the upload ended, until C's first bytes), download (share of C
// received, rate). Counters come from gRPC's threads (MultiplyOptions::on_sent,
// on_chunk); the line is drawn by a thread of its own, and erased at stop().
class Progress {
 public:
  Progress(int64_t bytes_in, int64_t bytes_out) : in_(bytes_in), out_(bytes_out), start_(Clock::now()) {
    thread_ = std::thread([this] { draw_loop(); });
  }
  ~Progress() { stop(); }
  void sent(int64_t bytes) { sent_.fetch_add(bytes, std::memory_order_relaxed); }
  void received(int64_t bytes) { received_.fetch_add(bytes, std::memory_order_relaxed); }
  void stop() {
    {
      std::lock_guard lock(mu_);
      if (stopped_) return;
      stopped_ = true;
    }
    cv_.notify_all();
    thread_.join();
    std::fprintf(stderr, "\r\033[K");  // the table follows on a clean line
    std::fflush(stderr);
  }

 private:
  using Clock = std::chrono::steady_clock;
  static double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

  void draw_loop() {
    std::unique_lock lock(mu_);
    do draw();  // at once: a request shorter than one period still shows what it did
    while (!cv_.wait_for(lock, std::chrono::milliseconds(200), [this] { return stopped_; }));
  }

  void draw() {
    const auto now = Clock::now();
    const int64_t sent = std::min(sent_.load(std::memory_order_relaxed), in_);  // a retry sends again
    const int64_t got = received_.load(std::memory_order_relaxed);
    if ((sent >= in_ || in_ == 0) && !upload_end_) upload_end_ = now;
    if (got > 0 && !download_start_) download_start_ = now;
    std::vector<std::string> parts;  // what applies: nothing is uploaded or downloaded over shared memory
    char buf[160];
    const double up_s = seconds((upload_end_ ? *upload_end_ : now) - start_);
    if (in_ > 0) {
      std::snprintf(buf, sizeof buf, "upload %3.0f%% %s", 100.0 * double(sent) / double(in_),
                    rate_text(double(sent), up_s).c_str());
      parts.emplace_back(buf);
    }
    if (upload_end_) {
      std::snprintf(buf, sizeof buf, "compute %.1f s",
                    seconds((download_start_ ? *download_start_ : now) - *upload_end_));
      parts.emplace_back(buf);
    }
    if (download_start_) {
      std::snprintf(buf, sizeof buf, "download %3.0f%% %s", out_ ? 100.0 * double(got) / double(out_) : 100.0,
                    rate_text(double(got), seconds(now - *download_start_)).c_str());
      parts.emplace_back(buf);
    }
    std::snprintf(buf, sizeof buf, "%.1f s", seconds(now - start_));
    parts.emplace_back(buf);
    std::string line;
    for (const std::string& p : parts) line += (line.empty() ? "" : " | ") + p;
    std::fprintf(stderr, "\r\033[K%s", line.c_str());
    std::fflush(stderr);
  }

  const int64_t in_, out_;
  const Clock::time_point start_;
  std::atomic<int64_t> sent_{0}, received_{0};
  std::optional<Clock::time_point> upload_end_, download_start_;  // the drawing thread's
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopped_ = false;  // guarded by mu_
  std::thread thread_;    // last: starts once the rest is set
};

// The target and transport of a submit: shm needs the Unix socket (--unix, or
// --server unix:PATH); auto takes it when the server answers there and offers
// regions, and otherwise uses --server over gRPC.
std::string pick_target(const std::string& server, const SubmitOptions& o, sgemm::ClientOptions* copt,
                        std::string* note) {
  std::string unix_target =
      !o.unix_path.empty() ? "unix:" + o.unix_path : (server.rfind("unix:", 0) == 0 ? server : "");
  if (o.transport == "cuda-ipc") return unix_target.empty() ? server : unix_target;  // the server refuses TCP
  copt->transport = sgemm::parse_transport(o.transport).value_or(sgemm::Transport::kAuto);
  if (copt->transport == sgemm::Transport::kGrpc) return o.unix_path.empty() ? server : unix_target;
  if (unix_target.empty()) {
    if (copt->transport == sgemm::Transport::kAuto) *note = "transport auto: no Unix socket given (--unix): grpc";
    return server;  // kShm fails there with a message saying what it needs
  }
  if (copt->transport == sgemm::Transport::kShm) return unix_target;
  auto probe = sgemm::Client::connect(unix_target, *copt);
  auto t = probe->transport();
  if (t.ok() && *t == sgemm::Transport::kShm) return unix_target;
  *note = "transport auto: " + unix_target + " " + (t.ok() ? "offers no regions" : t.status().to_string()) +
          ": grpc to " + server;
  copt->transport = sgemm::Transport::kGrpc;
  return server;
}

// --transport cuda-ipc (docs/transport.md "Device buffers"): A, B (and C)
// copied once into device memory of GPU --gpu, exported through CUDA IPC; each
// run multiplies them there with C written into a device buffer, and prints
// the server's kernel phase beside the client's wall time. Over the Unix
// socket only (--unix, or --server unix:PATH).
int submit_cuda_ipc(sgemm::Client& client, const SubmitOptions& o, const sgemm::GemmShape& s,
                    const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& c0, bool with_c,
                    sgemm::MultiplyOptions mopt) {
  auto rt = sgemm::CudaRuntime::load();
  if (!rt.ok()) {
    std::fprintf(stderr, "sgemm-client: %s\n", rt.status().to_string().c_str());
    return 3;
  }
  if (o.gpu < 0 || o.gpu >= (*rt)->device_count()) {
    std::fprintf(stderr, "sgemm-client: --gpu %d: this host's CUDA runtime sees %d GPUs\n", o.gpu,
                 (*rt)->device_count());
    return 2;
  }
  const int64_t c_bytes = 4 * s.m * s.n;
  auto da = (*rt)->allocate(o.gpu, 4 * s.m * s.k);
  auto db = da.ok() ? (*rt)->allocate(o.gpu, 4 * s.k * s.n) : da.status();
  auto dc = db.ok() ? (*rt)->allocate(o.gpu, c_bytes) : db.status();
  sgemm::Status st = dc.ok() ? sgemm::Status::Ok() : dc.status();
  if (st.ok()) st = (*da)->upload(a.data(), 4 * s.m * s.k);
  if (st.ok()) st = (*db)->upload(b.data(), 4 * s.k * s.n);
  if (!st.ok()) {
    std::fprintf(stderr, "sgemm-client: %s\n", st.to_string().c_str());
    return 3;
  }
  mopt.c_out = nullptr;
  std::vector<float> c(std::size_t(s.m * s.n));
  std::vector<double> walls, kernels;
  int exit_code = 0;
  for (int rep = 0; rep < o.repeat; ++rep) {
    // With C as input the product is written over it: every run starts from C0 again.
    if (with_c) st = (*dc)->upload(c0.data(), c_bytes);
    if (!st.ok()) {
      std::fprintf(stderr, "sgemm-client: %s\n", st.to_string().c_str());
      return 3;
    }
    std::optional<sgemm::DeviceBufferMatrix> c_in;
    if (with_c) c_in = (*dc)->matrix();
    auto r = client.multiply_device(s, (*da)->matrix(), (*db)->matrix(), c_in, (*dc)->matrix(), mopt);
    if (!r.ok()) {
      std::fprintf(stderr, "sgemm-client: %s\n", r.status().to_string().c_str());
      return 3;
    }
    double kernel_ms = 0;
    for (const auto& d : r->summary.devices) kernel_ms = std::max(kernel_ms, d.kernel_ms);
    walls.push_back(r->wall_ms);
    kernels.push_back(kernel_ms);
    const double tflops = 2.0 * double(s.m) * double(s.n) * double(s.k) / (r->wall_ms * 1e9);
    std::printf(
        "run %d: client %.3f ms (%.1f TFLOP/s), server kernel %.3f ms, compute %.3f ms: %.3fx the kernel; "
        "%s, %s on %zu GPU(s)\n",
        rep + 1, r->wall_ms, tflops, kernel_ms, r->summary.compute_ms, kernel_ms > 0 ? r->wall_ms / kernel_ms : 0.0,
        r->summary.kernel.c_str(), r->summary.split.c_str(), r->summary.devices.size());
  }
  if (o.repeat > 1) {
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    const double w = median(walls), k = median(kernels);
    std::printf("%d runs: client median %.3f ms, server kernel median %.3f ms: %.3fx\n", o.repeat, w, k,
                k > 0 ? w / k : 0.0);
  }
  if (o.verify) {
    st = (*dc)->download(c.data(), c_bytes);
    if (!st.ok()) {
      std::fprintf(stderr, "sgemm-client: %s\n", st.to_string().c_str());
      return 3;
    }
    const auto rows = sgemm::rows_to_verify(s.m, s.n, s.k, o.seed);
    const auto v = sgemm::verify_gemm(s.m, s.n, s.k, o.alpha, a.data(), b.data(), o.beta, with_c ? c0.data() : nullptr,
                                      c.data(), rows);
    const double tolerance = mopt.precision == sgemm::Precision::kTf32 ? 1e-2 : sgemm::kSgemmTolerance;
    const bool pass = v.passed(tolerance);
    std::printf("verify: max relative error %.3e over %zu of %lld rows (fp64 reference, tolerance %.0e): %s\n",
                v.max_rel_error, rows.size(), (long long)s.m, tolerance, pass ? "PASS" : "FAIL");
    if (!pass) exit_code = 1;
  }
  return exit_code;
}

void print_info(const sgemm::ServerInfo& info) {
  std::printf("sgemm-server %s, backend %s (this build has:", info.version.c_str(), info.backend.c_str());
  for (const auto& b : info.backends) std::printf(" %s", b.c_str());
  std::printf(")\nkernels:");
  for (const auto& k : info.kernels) std::printf(" %s", k.c_str());
  std::printf("\nprecisions:");
  for (const auto& p : info.precisions) std::printf(" %s", p.c_str());
  for (const auto& c : info.contracts) {
    std::printf("\n  %s: %s; kernels:", c.precision.c_str(), c.promise.c_str());
    for (const auto& k : c.kernels) std::printf(" %s", k.c_str());
  }
  std::printf("\n%-6s %-32s %6s %10s %8s\n", "device", "name", "SMs", "memory", "cc");
  for (const auto& d : info.devices)
    std::printf("%-6d %-32s %6d %8.1fG %6d.%d\n", d.index, d.name.c_str(), d.sm_count, d.memory_bytes / 1073741824.0,
                d.compute_major, d.compute_minor);
  std::printf(
      "limits: %lld elements per matrix, %d in flight, %d queued, %lld bytes per chunk, %d connections per "
      "request\n",
      (long long)info.max_matrix_elements, info.max_in_flight, info.max_queued, (long long)info.max_chunk_bytes,
      info.max_stripes);
  std::printf("host memory budget: %.2f GiB; pinned pool %.2f GiB; engine started in %.0f ms\n",
              info.host_memory_bytes / 1073741824.0, info.pinned_pool_bytes / 1073741824.0, info.startup_ms);
  std::printf("load: %d in flight, %d queued, %d streams open, %lld requests (%lld failed), %lld host bytes held\n",
              info.in_flight, info.queued, info.open_streams, (long long)info.requests_total,
              (long long)info.requests_failed, (long long)info.host_bytes_in_use);
  std::printf("resident matrices: %d, %lld bytes; budget %.2f GiB per GPU (host on cpu)\n", info.resident_matrices,
              (long long)info.resident_bytes_in_use, info.resident_bytes / 1073741824.0);
}

// "row x launches, row x launches" in the order the server listed them.
std::string kernel_rows_text(const sgemm::MultiplySummary& sum) {
  std::string text;
  for (const auto& k : sum.kernel_rows)
    text += (text.empty() ? "" : ", ") + k.name + " x " + std::to_string(k.launches);
  return text;
}

void print_table(const sgemm::GemmShape& s, const sgemm::MultiplyResult& r) {
  const auto& sum = r.summary;
  std::printf("request %s: %lldx%lldx%lld on backend %s, kernel %s, precision %s, split %s\n", sum.request_id.c_str(),
              (long long)s.m, (long long)s.n, (long long)s.k, sum.backend.c_str(), sum.kernel.c_str(),
              sum.precision.c_str(), sum.split.c_str());
  if (!sum.kernel_rows.empty()) std::printf("kernels: %s\n", kernel_rows_text(sum).c_str());
  if (!sum.plan_reason.empty()) std::printf("plan: %s\n", sum.plan_reason.c_str());
  // Each phase: working, then waiting (copy-in: for the client's data; kernel:
  // for copies in; reduce: for peer GPUs; copy-out: for kernels).
  std::printf("%-6s %-24s %-13s %-13s %10s %8s %10s %8s %10s %8s %11s %8s\n", "device", "name", "rows", "k",
              "copy-in ms", "wait", "kernel ms", "wait", "reduce ms", "wait", "copy-out ms", "wait");
  double order_wait = 0;
  for (const auto& d : sum.devices) {
    const std::string rows = std::to_string(d.row_begin) + "-" + std::to_string(d.row_end);
    const std::string ks = std::to_string(d.k_begin) + "-" + std::to_string(d.k_end);
    std::printf("%-6d %-24.24s %-13s %-13s %10.3f %8.3f %10.3f %8.3f %10.3f %8.3f %11.3f %8.3f%s%s\n", d.index,
                d.name.c_str(), rows.c_str(), ks.c_str(), d.copy_in_ms, d.copy_in_wait_ms, d.kernel_ms,
                d.kernel_wait_ms, d.reduce_ms, d.reduce_wait_ms, d.copy_out_ms, d.copy_out_wait_ms,
                d.host.empty() ? "" : "  on ", d.host.c_str());
    order_wait = std::max(order_wait, d.order_wait_ms);
  }
  std::printf("waits: copy-in for the client's data, kernel for copies in, reduce for peer GPUs, copy-out for kernels");
  if (order_wait > 0) std::printf("; %.3f ms for the NCCL order", order_wait);
  std::printf("\nserver: receive %.3f ms, queue %.3f ms, compute %.3f ms, send %.3f ms, total %.3f ms\n",
              sum.receive_ms, sum.queue_ms, sum.compute_ms, sum.send_ms, sum.total_ms);
  std::printf("client: total %.3f ms, effective %.1f GFLOP/s, %.1f MB sent, %.1f MB received, %d connection%s\n",
              r.wall_ms, s.flops() / (r.wall_ms * 1e6), r.bytes_sent / 1e6, r.bytes_received / 1e6, sum.stripes,
              sum.stripes == 1 ? "" : "s");
}

// The request as a timing record (common/timing_record.h): the same schema as
// the server's timings.jsonl, with the client's own figures added.
sgemm::TimingRecord to_record(const sgemm::GemmShape& s, bool has_c, const sgemm::MultiplyResult& r) {
  const auto& sum = r.summary;
  sgemm::TimingRecord t;
  t.request_id = sum.request_id;
  t.time = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  t.shape = s;
  t.has_c = has_c;
  t.backend = sum.backend;
  t.kernel = sum.kernel;
  for (const auto& k : sum.kernel_rows) t.kernel_rows.push_back(sgemm::KernelRowRecord{k.name, k.launches});
  t.precision = sum.precision;
  t.split = sum.split;
  t.plan = sum.plan_reason;
  t.receive_ms = sum.receive_ms;
  t.queue_ms = sum.queue_ms;
  t.compute_ms = sum.compute_ms;
  t.send_ms = sum.send_ms;
  t.total_ms = sum.total_ms;
  t.bytes_in = sum.bytes_in;
  t.bytes_out = sum.bytes_out;
  for (const auto& d : sum.devices)
    t.devices.push_back({d.index, d.name, d.row_begin, d.row_end, d.k_begin, d.k_end, d.copy_in_ms, d.copy_in_wait_ms,
                         d.kernel_ms, d.kernel_wait_ms, d.reduce_ms, d.reduce_wait_ms, d.copy_out_ms,
                         d.copy_out_wait_ms, d.order_wait_ms});
  t.client = sgemm::ClientTimingRecord{r.wall_ms, r.attempts, r.bytes_sent, r.bytes_received, {}};
  return t;
}

// --tls-ca, --tls-cert, --tls-key, --tls-server-name, --token: on the app and on each subcommand.
void add_connection_options(CLI::App* app, sgemm::ClientOptions* c) {
  app->add_option("--tls-ca", c->tls.ca_file, "PEM CA of the server's certificate: connect with TLS");
  app->add_option("--tls-cert", c->tls.cert_file, "PEM client certificate, for servers that require one (mutual TLS)");
  app->add_option("--tls-key", c->tls.key_file, "PEM private key of --tls-cert");
  app->add_option("--tls-server-name", c->tls.server_name,
                  "name the server's certificate must carry, when not the --server host");
  app->add_flag("--tls", c->tls.enabled, "connect with TLS (implied by --tls-ca/--tls-cert)");
  app->add_option("--token", c->token, "bearer token for servers started with --auth-tokens")->envname("SGEMM_TOKEN");
}

// The cols x rows transpose of a rows x cols row-major matrix (for --verify's reference).
std::vector<float> transposed(const std::vector<float>& x, int64_t rows, int64_t cols) {
  std::vector<float> t(x.size());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) t[std::size_t(j * rows + i)] = x[std::size_t(i * cols + j)];
  return t;
}

// The options every submit mode takes from the command line as they are
// (the flags were validated when parsed).
sgemm::MultiplyOptions multiply_options(const SubmitOptions& o) {
  sgemm::MultiplyOptions mopt;
  mopt.alpha = o.alpha;
  mopt.beta = o.beta;
  if (!o.kernel.empty()) mopt.kernel = sgemm::parse_kernel_kind(o.kernel);
  mopt.precision = sgemm::parse_precision(o.precision).value_or(sgemm::Precision::kFp32);
  if (!o.split.empty()) mopt.split = sgemm::parse_split_mode(o.split).value_or(sgemm::SplitMode::kAuto);
  mopt.timeout = std::chrono::milliseconds(o.timeout_ms);
  mopt.op_a = sgemm::parse_op(o.op_a).value_or(sgemm::Op::kN);
  mopt.op_b = sgemm::parse_op(o.op_b).value_or(sgemm::Op::kN);
  return mopt;
}

// submit --batch / --group: the flags a batch cannot take refused (exit 2),
// the transport resolved, then batch_command() with submit's product options.
int submit_batch(const std::string& server, int64_t chunk_bytes, bool no_retry, const SubmitOptions& o,
                 const sgemm::ClientOptions& connection, const sgemm::GemmShape& shape) {
  if (o.batch > 0 && !o.group_file.empty()) {
    std::fprintf(stderr, "sgemm-client: --batch and --group are two kinds of request: give one\n");
    return 2;
  }
  // What one product's request can say and a batch cannot (batch_command.h checks the rest).
  const std::pair<const char*, bool> refused[] = {
      {"--a/--b/--c (a batch's operands are random)", !o.a_file.empty()},
      {"--c-handle (a batch's input C is sent, --with-c)", !o.c_handle.empty()},
      {"--a-at/--b-at/--c-at (a shared handle is the whole operand)",
       !o.a_at.empty() || !o.b_at.empty() || !o.c_at.empty()},
      {"--keep/--keep-evictable/--send-c (a batch's C comes back)", o.keep || o.keep_evictable || o.send_c},
      {"--transport cuda-ipc", o.transport == "cuda-ipc"},
      {"--split rows/k (a batch is split across GPUs by product)", o.split == "rows" || o.split == "k"},
  };
  for (const auto& [what, set] : refused)
    if (set) {
      std::fprintf(stderr, "sgemm-client: --batch/--group do not take %s\n", what);
      return 2;
    }
  sgemm::cli::BatchArgs args;
  args.count = o.batch;
  args.group_file = o.group_file;
  args.shape = shape;
  args.fail_fast = o.fail_fast;
  args.check_finite = o.check_finite;
  args.with_c = o.with_c || o.beta != 0.0f;
  args.seed = o.seed;
  args.repeat = o.repeat;
  args.verify = o.verify;
  args.json = o.json;
  args.a_handle = o.a_handle;
  args.b_handle = o.b_handle;
  args.out_file = o.out_file;
  // The transport as a single submit resolves it, except that a handle keeps
  // auto on gRPC (the server takes regions or handles, not both): shm writes
  // the operands into a region of this client's.
  const bool handle = !o.a_handle.empty() || !o.b_handle.empty();
  args.regions = o.transport == "shm";
  if (sgemm::Status st = sgemm::cli::check_batch_args(args); !st.ok()) {
    std::fprintf(stderr, "sgemm-client: %s\n", st.message().c_str());
    return 2;
  }
  sgemm::ClientOptions copt = connection;
  copt.chunk_bytes = chunk_bytes;
  if (no_retry) copt.retry.max_attempts = 1;
  std::string note;
  SubmitOptions picked = o;
  if (handle && o.transport == "auto") {
    picked.transport = "grpc";
    if (!o.unix_path.empty() || server.rfind("unix:", 0) == 0)
      note = "transport auto: a resident operand (--a-handle/--b-handle): grpc";
  }
  const std::string target = pick_target(server, picked, &copt, &note);
  if (!note.empty() && !o.json) std::fprintf(stderr, "sgemm-client: %s\n", note.c_str());
  auto client = sgemm::Client::connect(target, copt);
  const auto transport = client->transport();
  if (!transport.ok()) {
    std::fprintf(stderr, "sgemm-client: %s\n", transport.status().to_string().c_str());
    return 3;
  }
  args.regions = *transport == sgemm::Transport::kShm;
  return sgemm::cli::batch_command(*client, args, multiply_options(o));
}

int submit(const std::string& server, int64_t chunk_bytes, bool no_retry, SubmitOptions o,
           const sgemm::ClientOptions& connection) {
  sgemm::GemmShape s{o.m, o.n, o.k};
  if (o.size > 0) s = {o.size, o.size, o.size};
  if (o.batch > 0 || !o.group_file.empty()) return submit_batch(server, chunk_bytes, no_retry, o, connection, s);
  std::optional<sgemm::GemmInputs> files;
  // What is sent: the requested ops, flipped for a Fortran-order .npy A or B.
  sgemm::Op op_a = sgemm::parse_op(o.op_a).value_or(sgemm::Op::kN);
  sgemm::Op op_b = sgemm::parse_op(o.op_b).value_or(sgemm::Op::kN);
  std::optional<sgemm::MatrixOffset> at[3];
  for (auto [text, flag, out] : {std::tuple{&o.a_at, "--a-at", &at[0]}, std::tuple{&o.b_at, "--b-at", &at[1]},
                                 std::tuple{&o.c_at, "--c-at", &at[2]}}) {
    if (text->empty()) continue;
    long long row = -1, col = -1;
    char tail = 0;
    if (std::sscanf(text->c_str(), "%lld,%lld%c", &row, &col, &tail) != 2 || row < 0 || col < 0) {
      std::fprintf(stderr, "sgemm-client: %s wants ROW,COL (two integers >= 0), got '%s'\n", flag, text->c_str());
      return 2;
    }
    *out = sgemm::MatrixOffset{row, col};
  }
  if (!o.a_file.empty()) {
    auto in = sgemm::read_gemm_inputs(o.a_file, o.b_file, o.c_file, s.m, s.n, s.k, op_a, op_b);
    if (!in.ok()) {
      std::fprintf(stderr, "sgemm-client: %s\n", in.status().to_string().c_str());
      return 2;
    }
    if (!in->c && (o.with_c || o.beta != 0.0f)) {
      std::fprintf(stderr, "sgemm-client: --beta and --with-c need --c FILE when A and B come from files\n");
      return 2;
    }
    files = std::move(*in);
    s = files->shape;
    op_a = files->op_a;
    op_b = files->op_b;
    if (o.out_file.empty() && !o.verify && !o.discard && !o.keep) {
      std::fprintf(stderr,
                   "sgemm-client: --a/--b without --out: C would be computed and thrown away; give --out FILE, "
                   "--verify, --keep, or --discard to time the product alone\n");
      return 2;
    }
  }
  if (s.m < 1 || s.n < 1 || s.k < 1) {
    std::fprintf(stderr, "sgemm-client: give --size N or all of --m, --n, --k (each >= 1)\n");
    return 2;
  }
  if (o.seed == 0) o.seed = std::random_device{}() | (uint64_t(std::random_device{}()) << 32);
  const bool with_c = files ? files->c.has_value() : o.with_c || o.beta != 0.0f;
  std::vector<float> a(std::size_t(s.m * s.k)), b(std::size_t(s.k * s.n)), c0;
  if (files) {
    a = std::move(files->a.values);
    b = std::move(files->b.values);
    if (with_c) c0 = std::move(files->c->values);
  } else {
    sgemm::fill_random(a, o.seed);
    sgemm::fill_random(b, o.seed + 1);
  }
  if (with_c && !files) {
    c0.resize(std::size_t(s.m * s.n));
    sgemm::fill_random(c0, o.seed + 2);
  }
  sgemm::ClientOptions copt = connection;
  copt.chunk_bytes = chunk_bytes;
  if (no_retry) copt.retry.max_attempts = 1;
  copt.rpc = sgemm::parse_multiply_rpc(o.rpc).value_or(sgemm::MultiplyRpc::kAuto);
  std::string note;
  const std::string target = pick_target(server, o, &copt, &note);
  if (!note.empty() && !o.json) std::fprintf(stderr, "sgemm-client: %s\n", note.c_str());
  auto client = sgemm::Client::connect(target, copt);
  const auto transport = client->transport();
  if (!transport.ok()) {
    std::fprintf(stderr, "sgemm-client: %s\n", transport.status().to_string().c_str());
    return 3;
  }
  const bool cuda_ipc = o.transport == "cuda-ipc";
  if (!o.json)
    std::printf("transport: %s (%s)\n", cuda_ipc ? "cuda-ipc" : sgemm::transport_name(*transport), target.c_str());
  sgemm::MultiplyOptions mopt = multiply_options(o);
  mopt.trace = !o.trace_file.empty();
  mopt.op_a = op_a;
  mopt.op_b = op_b;
  mopt.a_at = at[0];
  mopt.b_at = at[1];
  mopt.c_at = at[2];
  mopt.a_handle = o.a_handle;
  mopt.b_handle = o.b_handle;
  mopt.c_handle = o.c_handle;
  mopt.keep_result = o.keep;
  mopt.keep_evictable = o.keep_evictable;
  mopt.send_c = o.send_c || !o.out_file.empty() || o.verify;
  if (o.verify && (!o.a_handle.empty() || !o.b_handle.empty() || !o.c_handle.empty())) {
    std::fprintf(stderr, "sgemm-client: --verify needs every operand's values here: not with --a/b/c-handle\n");
    return 2;
  }
  // C goes straight into one buffer reused by every run (never zero-filled: the server sends every element).
  std::unique_ptr<float[]> c_out(new float[std::size_t(s.m * s.n)]);
  mopt.c_out = c_out.get();
  if (cuda_ipc) {
    if (op_a != sgemm::Op::kN || op_b != sgemm::Op::kN || !o.a_handle.empty() || !o.b_handle.empty() ||
        !o.c_handle.empty() || o.keep) {
      std::fprintf(stderr, "sgemm-client: --transport cuda-ipc takes untransposed operands and no handles or --keep\n");
      return 2;
    }
    return submit_cuda_ipc(*client, o, s, a, b, c0, with_c, mopt);
  }

  nlohmann::json runs = nlohmann::json::array();
  int exit_code = 0;
  const bool show_progress = o.progress && isatty(STDERR_FILENO) == 1;
  // Over shared memory nothing is written or read on the stream: the line shows the request's time alone.
  const bool streamed = *transport != sgemm::Transport::kShm;
  const int64_t bytes_in = streamed ? 4 * ((o.a_handle.empty() ? s.m * s.k : 0) + (o.b_handle.empty() ? s.k * s.n : 0) +
                                           (with_c && o.c_handle.empty() ? s.m * s.n : 0))
                                    : 0;
  const int64_t bytes_out = streamed && (mopt.send_c || !o.keep) ? 4 * s.m * s.n : 0;
  for (int rep = 0; rep < o.repeat; ++rep) {
    std::optional<Progress> progress;
    if (show_progress) {
      progress.emplace(bytes_in, bytes_out);
      mopt.on_sent = [&progress](int64_t bytes) { progress->sent(bytes); };
      mopt.on_chunk = [&progress](int64_t, int64_t count) { progress->received(count * int64_t(sizeof(float))); };
    }
    auto r = client->multiply(s, a.data(), b.data(), with_c ? c0.data() : nullptr, mopt);
    if (progress) progress->stop();
    if (!r.ok()) {
      if (o.json) {
        std::printf(
            "%s\n",
            nlohmann::json(
                {{"shape", {{"m", s.m}, {"n", s.n}, {"k", s.k}}},
                 {"error", {{"code", sgemm::status_code_name(r.status().code())}, {"message", r.status().message()}}}})
                .dump()
                .c_str());
      } else {
        std::fprintf(stderr, "sgemm-client: %s\n", r.status().to_string().c_str());
      }
      return 3;
    }
    if (!r->summary.result_handle.empty()) {
      if (o.json)
        std::fprintf(stderr, "result handle: %s\n", r->summary.result_handle.c_str());
      else
        std::printf("result handle: %s\n", r->summary.result_handle.c_str());
    }
    const sgemm::TimingRecord record = to_record(s, with_c, *r);
    nlohmann::json j;  // the CLI's own additions to the record: transport, verify, seed, out
    j["transport"] = sgemm::transport_name(*transport);
    j["rpc"] = sgemm::multiply_rpc_name(r->rpc);
    if (!o.json) {
      std::printf("rpc: %s\n", sgemm::multiply_rpc_name(r->rpc));
      print_table(s, *r);
    }
    if (!o.trace_file.empty()) {
      if (r->summary.trace_json.empty()) {
        std::fprintf(stderr, "sgemm-client: the server sent no trace (is it older than header.trace?)\n");
        return 3;
      }
      std::FILE* f = std::fopen(o.trace_file.c_str(), "w");
      const std::string& tj = r->summary.trace_json;
      if (!f || std::fwrite(tj.data(), 1, tj.size(), f) != tj.size()) {
        std::fprintf(stderr, "sgemm-client: cannot write the trace to %s\n", o.trace_file.c_str());
        if (f) std::fclose(f);
        return 3;
      }
      std::fclose(f);
      if (!o.json) std::printf("trace: %s (open in ui.perfetto.dev)\n", o.trace_file.c_str());
    }
    if (o.verify) {
      const auto rows = sgemm::rows_to_verify(s.m, s.n, s.k, o.seed);
      // The reference multiplies op(A) and op(B): transposed copies of what was sent under op = t.
      const std::vector<float> ref_a = op_a == sgemm::Op::kT ? transposed(a, s.k, s.m) : std::vector<float>{};
      const std::vector<float> ref_b = op_b == sgemm::Op::kT ? transposed(b, s.n, s.k) : std::vector<float>{};
      const auto v = sgemm::verify_gemm(s.m, s.n, s.k, o.alpha, ref_a.empty() ? a.data() : ref_a.data(),
                                        ref_b.empty() ? b.data() : ref_b.data(), o.beta, with_c ? c0.data() : nullptr,
                                        c_out.get(), rows);
      // tf32 is documented as less accurate (about 1e-4): it is held to 1e-2, the rest to fp32's tolerance.
      const double tolerance = mopt.precision == sgemm::Precision::kTf32 ? 1e-2 : sgemm::kSgemmTolerance;
      const bool pass = v.passed(tolerance);
      j["verify"] = {{"max_rel_error", v.max_rel_error}, {"rows_checked", rows.size()},
                     {"elements_checked", v.checked},    {"nonfinite_mismatches", v.mismatched_nonfinite},
                     {"tolerance", tolerance},           {"passed", pass}};
      if (!o.json)
        std::printf("verify: max relative error %.3e over %zu of %lld rows (fp64 reference, tolerance %.0e): %s\n",
                    v.max_rel_error, rows.size(), (long long)s.m, tolerance, pass ? "PASS" : "FAIL");
      if (!pass) exit_code = 1;
    }
    j["seed"] = o.seed;
    if (!o.out_file.empty()) {
      const auto w =
          sgemm::write_matrix_file(o.out_file, c_out.get(), s.m, s.n, sgemm::matrix_format_for_path(o.out_file));
      if (!w.ok()) {
        std::fprintf(stderr, "sgemm-client: %s\n", w.to_string().c_str());
        return 3;
      }
      j["out"] = o.out_file;
    }
    j["record"] = sgemm::timing_record_json(record, j.dump());
    j["client_total_ms"] = r->wall_ms;
    j["connections"] = r->summary.stripes;
    runs.push_back(j);
  }
  if (o.json) {
    // One sgemm.timing/1 record (docs/observability.md), the last run's; with
    // --repeat, client.total_ms_all lists every run's client time.
    nlohmann::ordered_json out = nlohmann::ordered_json::parse(runs.back()["record"].get<std::string>());
    if (o.repeat > 1) {
      std::vector<double> walls;
      for (const auto& r : runs) walls.push_back(r["client_total_ms"].get<double>());
      out["client"]["total_ms_all"] = walls;
      out["repeat"] = o.repeat;
    }
    std::printf("%s\n", out.dump().c_str());
  } else if (o.repeat > 1) {
    std::vector<double> walls;
    for (const auto& r : runs) walls.push_back(r["client_total_ms"].get<double>());
    std::sort(walls.begin(), walls.end());
    std::printf("%d runs: client total min %.3f ms, median %.3f ms, max %.3f ms\n", o.repeat, walls.front(),
                walls[walls.size() / 2], walls.back());
  }
  return exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sgemm-client: submit SGEMM products to sgemm-server"};
  app.require_subcommand(1);
  app.footer(kExitCodes);
  std::string server = "localhost:50051";
  int64_t chunk_bytes = 1 << 20;
  bool no_retry = false;
  app.add_flag("--no-retry", no_retry, "do not retry a request that got UNAVAILABLE (default: up to 5 attempts)");
  app.add_option("--server", server, "sgemm-server address host:port")->capture_default_str();
  sgemm::ClientOptions connection;
  add_connection_options(&app, &connection);
  app.add_option("--chunk-bytes", chunk_bytes, "payload of each chunk sent")
      ->check(CLI::Range(int64_t{4}, int64_t{(4 << 20) - 1024}))
      ->capture_default_str();

  SubmitOptions o;
  CLI::App* sub = app.add_subcommand("submit", "multiply random matrices, or matrices from files, on the server");
  sub->add_option("--server", server, "sgemm-server address host:port");
  add_connection_options(sub, &connection);
  sub->add_option("--size", o.size, "square problem: m = n = k = SIZE")->check(CLI::PositiveNumber);
  sub->add_option("--m", o.m, "rows of op(A) and C")->check(CLI::PositiveNumber);
  sub->add_option("--n", o.n, "columns of op(B) and C")->check(CLI::PositiveNumber);
  sub->add_option("--k", o.k, "columns of op(A), rows of op(B)")->check(CLI::PositiveNumber);
  sub->add_option("--alpha", o.alpha, "C = alpha*A*B + beta*C")->capture_default_str();
  sub->add_option("--beta", o.beta, "non-zero sends a random C")->capture_default_str();
  sub->add_flag("--with-c", o.with_c, "send a random C even when beta is 0");
  sub->add_option("--seed", o.seed, "random seed for A, B, C (default: fresh)");
  sub->add_option("--repeat", o.repeat, "run the product this many times")->check(CLI::PositiveNumber);
  sub->add_flag("--verify", o.verify, "check C against an fp64 reference on the CPU (sampled rows when large)");
  sub->add_flag("--json", o.json, "print one JSON object instead of the table");
  sub->add_option("--kernel", o.kernel, "pingpong or cublas (default: the server's)")
      ->check(CLI::IsMember({"pingpong", "cublas"}));
  sub->add_option("--precision", o.precision,
                  "fp32 (default: error no larger than cuBLAS SGEMM's, tensor cores where that holds); fp32-ffma "
                  "(FFMA only); tf32 (tensor cores, ~1e-4 error: less accurate); fp32x3 (3xTF32 on every shape)")
      ->check(CLI::IsMember({"fp32", "fp32-ffma", "tf32", "fp32x3"}));
  sub->add_option("--split", o.split, "auto, single, rows or k")->check(CLI::IsMember({"auto", "single", "rows", "k"}));
  sub->add_option("--timeout-ms", o.timeout_ms, "deadline for the request (0 = none)");
  sub->add_option("--chunk-bytes", chunk_bytes, "payload of each chunk sent");
  sub->add_option("--connections", connection.connections,
                  "connections one request spreads over (gRPC; docs/transport.md); 0 = by size: 1 below 16 MiB of "
                  "payload, else 4")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  auto* a_opt = sub->add_option("--a", o.a_file, "A from a .npy file (or raw little-endian fp32 with --m, --k)")
                    ->check(CLI::ExistingFile);
  auto* b_opt = sub->add_option("--b", o.b_file, "B from a .npy or raw fp32 file")->check(CLI::ExistingFile);
  sub->add_option("--c", o.c_file, "C from a .npy or raw fp32 file (sent; see --beta)")
      ->check(CLI::ExistingFile)
      ->needs(a_opt);
  sub->add_option("--out", o.out_file,
                  "write C here (.npy when the name ends in .npy, else raw fp32); with --batch the products' C "
                  "stacked, (N*m) x n, with --group one row of every product's C in order");
  sub->add_flag("--discard", o.discard, "with --a/--b and no --out: compute C and throw it away (timing runs)");
  sub->add_flag(
      "--no-progress", [&o](int64_t) { o.progress = false; },
      "no progress line (upload, compute, download, with rates); it is drawn on stderr only when stderr "
      "is a terminal");
  sub->footer(kExitCodes);
  sub->add_option("--trace", o.trace_file,
                  "ask the server for a Chrome trace of the request and write it here (ui.perfetto.dev opens it)");
  a_opt->needs(b_opt);
  b_opt->needs(a_opt);
  sub->add_flag("--no-retry", no_retry, "do not retry a request that got UNAVAILABLE (default: up to 5 attempts)");
  sub->add_option("--transport", o.transport,
                  "auto (shared memory when the server answers on its Unix socket), grpc, shm, or cuda-ipc (A, B "
                  "and C in device memory of --gpu, exported through CUDA IPC; the Unix socket and a cuda server)")
      ->check(CLI::IsMember({"auto", "grpc", "shm", "cuda-ipc"}))
      ->capture_default_str();
  sub->add_option("--rpc", o.rpc,
                  "auto (MultiplyUnary, one message each way, for a product that fits it on the grpc transport; "
                  "else the Multiply stream), stream, unary, or ring (auto's MultiplyUnary messages through a request "
                  "ring in shared memory, on the server's Unix socket; docs/transport.md)")
      ->check(CLI::IsMember({"auto", "stream", "unary", "ring"}))
      ->capture_default_str();
  sub->add_option("--gpu", o.gpu, "--transport cuda-ipc: the CUDA device (this host's ordinal) holding A, B and C")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--unix", o.unix_path, "the server's Unix socket (sgemm-server --listen unix:PATH)");
  sub->add_option("--op-a", o.op_a,
                  "n: A is m x k; t: A is stored k x m and the product uses A^T (BLAS transa; a Fortran-order .npy "
                  "is sent as it is, its op flipped)")
      ->check(CLI::IsMember({"n", "t", "N", "T"}))
      ->capture_default_str();
  sub->add_option("--op-b", o.op_b, "n: B is k x n; t: B is stored n x k and the product uses B^T (BLAS transb)")
      ->check(CLI::IsMember({"n", "t", "N", "T"}))
      ->capture_default_str();
  sub->add_option("--a-at", o.a_at,
                  "ROW,COL: with --a-handle, A is the block of its stored shape at this element of the resident "
                  "matrix (a submatrix, multiplied in place)");
  sub->add_option("--b-at", o.b_at, "ROW,COL: with --b-handle, B is the block at this element");
  sub->add_option("--c-at", o.c_at, "ROW,COL: with --c-handle, the input C is the m x n block at this element");
  sub->add_option("--a-handle", o.a_handle,
                  "A is this resident matrix (sgemm-client put), not sent; with --batch every product reads it");
  sub->add_option("--b-handle", o.b_handle, "B is this resident matrix, not sent; with --batch every product reads it");
  sub->add_option("--c-handle", o.c_handle, "the input C is this resident matrix (beta applies)");
  sub->add_flag("--keep", o.keep, "keep C resident on the server and print its handle (C is not sent back)");
  sub->add_flag("--keep-evictable", o.keep_evictable, "with --keep: the kept C may be evicted");
  sub->add_flag("--send-c", o.send_c, "with --keep: send C back as well");
  sub->add_option("--batch", o.batch,
                  "N products of the --size/--m --n --k shape in one request (strided batch): random operands sent "
                  "on the stream or, with --transport shm (auto on the Unix socket), written into one shared-memory "
                  "region; --a-handle/--b-handle: one resident A or B every product reads (then gRPC, no --verify)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--group", o.group_file,
                  "a group of products in one request: shapes 'm n k', one per line (operands sent or in a region, "
                  "as --batch; no handles)")
      ->check(CLI::ExistingFile);
  sub->add_flag("--fail-fast", o.fail_fast, "with --batch/--group: a failing product fails the whole request");
  sub->add_flag("--check-finite", o.check_finite,
                "with --batch/--group: the server skips products whose inputs hold NaN or infinity");

  sgemm::cli::PutArgs put_args;
  CLI::App* put = app.add_subcommand("put", "upload a matrix once and print its handle (docs/resident.md)");
  put->add_option("--server", server, "sgemm-server address host:port");
  add_connection_options(put, &connection);
  put->add_option("--file", put_args.file, "a .npy or raw fp32 file (raw needs --rows and --cols)");
  put->add_option("--rows", put_args.rows, "rows (random values without --file)");
  put->add_option("--cols", put_args.cols, "columns");
  put->add_option("--seed", put_args.seed, "random values' seed (default: fresh)");
  put->add_flag("--evictable", put_args.evictable, "the server may drop it (least recently used first) for room");
  put->add_option("--label", put_args.label, "a name shown by ls");
  put->add_flag("--json", put_args.json, "print JSON");
  std::string rm_handle;
  CLI::App* rm = app.add_subcommand("rm", "delete a resident matrix");
  rm->add_option("--server", server, "sgemm-server address host:port");
  add_connection_options(rm, &connection);
  rm->add_option("handle", rm_handle, "the handle put printed")->required();
  bool ls_json = false;
  CLI::App* ls = app.add_subcommand("ls", "list this client's resident matrices");
  ls->add_option("--server", server, "sgemm-server address host:port");
  add_connection_options(ls, &connection);
  ls->add_flag("--json", ls_json, "print JSON");

  CLI::App* info = app.add_subcommand("info", "print the server's devices, kernels, limits and load");
  info->add_option("--server", server, "sgemm-server address host:port");
  add_connection_options(info, &connection);
  bool info_json = false;
  info->add_flag("--json", info_json, "print JSON");

  CLI::App* health = app.add_subcommand("health", "exit 0 when the server reports SERVING (grpc.health.v1)");
  health->add_option("--server", server, "sgemm-server address host:port");
  add_connection_options(health, &connection);
  std::string health_service;
  health->add_option("--service", health_service, "service name to ask about (\"\" = the whole server)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help: 0; a bad argument: 2, after CLI11's message
  }

  if (*sub) return submit(server, chunk_bytes, no_retry, o, connection);
  if (*put) {
    sgemm::ClientOptions copt = connection;
    copt.chunk_bytes = chunk_bytes;
    return sgemm::cli::put_command(server, copt, put_args);
  }
  if (*rm) return sgemm::cli::rm_command(server, connection, rm_handle);
  if (*ls) return sgemm::cli::ls_command(server, connection, ls_json);
  if (*health) {
    auto r = sgemm::Client::connect(server, connection)->serving(health_service);
    if (!r.ok()) {
      std::fprintf(stderr, "sgemm-client: %s\n", r.status().to_string().c_str());
      return 3;
    }
    std::printf("%s\n", *r ? "SERVING" : "NOT_SERVING");
    return *r ? 0 : 1;
  }
  auto client = sgemm::Client::connect(server, connection);
  auto r = client->info();
  if (!r.ok()) {
    std::fprintf(stderr, "sgemm-client: %s\n", r.status().to_string().c_str());
    return 3;
  }
  if (info_json) {
    nlohmann::json j = {{"version", r->version},
                        {"backend", r->backend},
                        {"backends", r->backends},
                        {"kernels", r->kernels},
                        {"max_matrix_elements", r->max_matrix_elements},
                        {"max_in_flight", r->max_in_flight},
                        {"max_queued", r->max_queued},
                        {"in_flight", r->in_flight},
                        {"queued", r->queued},
                        {"open_streams", r->open_streams},
                        {"host_memory_bytes", r->host_memory_bytes},
                        {"requests_total", r->requests_total},
                        {"requests_failed", r->requests_failed},
                        {"host_bytes_in_use", r->host_bytes_in_use},
                        {"startup_ms", r->startup_ms},
                        {"pinned_pool_bytes", r->pinned_pool_bytes},
                        {"resident_bytes", r->resident_bytes},
                        {"resident_bytes_in_use", r->resident_bytes_in_use},
                        {"resident_matrices", r->resident_matrices}};
    if (!r->client.empty()) {
      j["client"] = r->client;
      j["client_max_in_flight"] = r->client_max_in_flight;
      j["client_max_bytes_in_flight"] = r->client_max_bytes_in_flight;
      j["client_in_flight"] = r->client_in_flight;
      j["client_bytes_in_flight"] = r->client_bytes_in_flight;
    }
    auto& devs = j["devices"] = nlohmann::json::array();
    for (const auto& d : r->devices) {
      devs.push_back(
          {{"index", d.index}, {"name", d.name}, {"memory_bytes", d.memory_bytes}, {"sm_count", d.sm_count}});
      if (d.unhealthy) devs.back()["unhealthy"] = d.health_reason;
    }
    std::printf("%s\n", j.dump().c_str());
  } else {
    print_info(*r);
  }
  return 0;
}
