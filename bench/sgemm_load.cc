// sgemm-load: drive a running sgemm-server with N concurrent clients, a mix of
// sizes and, optionally, misbehaving clients; verify every product; report
// throughput, latency percentiles, statuses and wrong results.
//
//   sgemm-load --server 127.0.0.1:50051 --clients 64 --requests 20 --sizes 64,256,512
//   # the issue-9 target scenario:
//   sgemm-load --server ... --clients 1 --requests 50 --sizes 256 --header-only 4 --trickle 1 --silent 300
//
// Misbehaving clients are attached before the normal ones start and stay for
// the whole run: header-only streams (a header at --header-dim^3, nothing
// else), tricklers (B in full, then A one row every --trickle-interval-ms),
// silent streams (open, never a message), non-readers (upload a k=1 product
// with a large C and never read it). All of them are cancelled at the end.
// --reset-storm N opens and resets N streams before anything else.
//
// Inputs: each client draws its A, B (and C) once per shape and sends them
// every time, so the load measures the server, not the client's random
// numbers; --fresh-inputs draws new ones for every product. Verification
// against the fp64 reference: every product by default; --verify-every N
// checks the first product of each client and shape, then one in N (the
// rest are counted as unverified), so that the client's CPU is not what
// saturates first on small products.
//
// Batched requests: --batch N makes each request a strided batch of N products
// of the shape (Client::multiply_batch, one stream), --group makes each request
// one group of every --sizes shape; throughput is then reported in products/s
// as well as requests/s, and a verified request checks every one of its
// products (rows sampled as for single products).
//
// Exit status: 0 when every normal request succeeded with a correct result,
// 1 when any result was wrong, 2 when any request failed.
#include <absl/synchronization/mutex.h>
#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "client/batch_command.h"
#include "client/sgemm_client.h"
#include "common/reference_gemm.h"
#include "resident_load.h"
#include "sgemm/v1/sgemm.grpc.pb.h"

namespace {

namespace v1 = ::sgemm::v1;
using Clock = std::chrono::steady_clock;

struct LoadOptions {
  std::string server = "localhost:50051";
  int clients = 8;                   // concurrent well-behaved clients
  bool one_connection = false;       // every client on one shared connection (else one each, as separate processes)
  int requests = 10;                 // products per client (when --duration-s is 0)
  double duration_s = 0;             // run for this long instead of a fixed count
  std::string sizes = "64,256,512";  // square sizes, or MxNxK shapes, comma-separated
  bool reactor_calls = false;        // ClientOptions::caller_thread_calls off
  std::string rpc = "auto";          // ClientOptions::rpc: auto | stream | unary | ring (single products)
  std::string transport = "auto";    // ClientOptions::transport: auto | grpc | shm
  bool with_c = false;               // send C with beta = 0.5
  int64_t timeout_ms = 60000;        // deadline of each request
  bool no_retry = false;
  int header_only = 0;         // misbehaving: header-only streams
  int64_t header_dim = 32768;  // their m = n = k
  int trickle = 0;             // misbehaving: B first, then A row by row
  int64_t trickle_dim = 1024;  // their m = n = k
  int trickle_interval_ms = 100;
  int silent = 0;                    // misbehaving: open streams that never send
  int no_read = 0;                   // misbehaving: upload, never read C
  int64_t no_read_dim = 4096;        // their m = n (k = 1)
  int streams_per_connection = 100;  // misbehaving streams per channel
  int reset_storm = 0;               // misbehaving: streams opened and reset at once, before the load
  int settle_ms = 500;               // after attaching misbehavers, before the normal clients start
  bool json = false;
  int verify_every = 1;       // verify one product in N per client (the first of each shape always)
  bool fresh_inputs = false;  // new random inputs for every product (else once per client and shape)
  int64_t batch = 0;          // > 0: each request a strided batch of this many products of its shape
  bool group = false;         // each request one group of every --sizes shape
};

// One client's batch or group and its concatenated operands, drawn once (or per request with --fresh-inputs).
struct BatchOperands {
  sgemm::BatchProducts products;
  sgemm::BatchLayout layout;
  uint64_t seed = 0;
  std::vector<float> a, b, c0;
  bool verified_once = false;
  void draw(uint64_t new_seed, bool with_c) {
    layout = sgemm::batch_layout(products);
    seed = new_seed;
    a.resize(std::size_t(layout.a_elements));
    b.resize(std::size_t(layout.b_elements));
    sgemm::fill_random(a, seed);
    sgemm::fill_random(b, seed + 1);
    if (with_c) {
      c0.resize(std::size_t(layout.c_elements));
      sgemm::fill_random(c0, seed + 2);
    }
  }
};

// One client's operands for one shape, drawn once (or per product with --fresh-inputs).
struct Operands {
  uint64_t seed = 0;
  std::vector<float> a, b, c0;
  bool verified_once = false;
  void draw(const sgemm::GemmShape& s, uint64_t new_seed, bool with_c) {
    seed = new_seed;
    a.resize(std::size_t(s.m * s.k));
    b.resize(std::size_t(s.k * s.n));
    sgemm::fill_random(a, seed);
    sgemm::fill_random(b, seed + 1);
    if (with_c) {
      c0.resize(std::size_t(s.m * s.n));
      sgemm::fill_random(c0, seed + 2);
    }
  }
};

std::vector<sgemm::GemmShape> parse_shapes(const std::string& text) {
  std::vector<sgemm::GemmShape> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    int64_t m = 0, n = 0, k = 0;
    if (std::sscanf(item.c_str(), "%ldx%ldx%ld", &m, &n, &k) == 3)
      out.push_back({m, n, k});
    else if (std::sscanf(item.c_str(), "%ld", &m) == 1)
      out.push_back({m, m, m});
  }
  return out;
}

std::shared_ptr<grpc::Channel> own_channel(const std::string& server, int index) {
  grpc::ChannelArguments args;
  args.SetInt("sgemm.load.channel", index);  // a distinct argument: a connection of its own
  args.SetMaxReceiveMessageSize(-1);
  return grpc::CreateCustomChannel(server, grpc::InsecureChannelCredentials(), args);
}

v1::MultiplyRequest header_msg(int64_t m, int64_t n, int64_t k) {
  v1::MultiplyRequest r;
  r.mutable_header()->set_m(m);
  r.mutable_header()->set_n(n);
  r.mutable_header()->set_k(k);
  return r;
}

// The misbehaving clients: streams held open until stop().
class Misbehavers {
 public:
  explicit Misbehavers(const LoadOptions& o) : o_(o) {}

  void start() {
    int stream_index = 0;
    auto stub_for = [&](int i) -> v1::Sgemm::Stub& {
      const int ch = i / std::max(1, o_.streams_per_connection);
      while (int(stubs_.size()) <= ch) stubs_.push_back(v1::Sgemm::NewStub(own_channel(o_.server, 1000 + ch)));
      return *stubs_[ch];
    };
    for (int i = 0; i < o_.silent; ++i) open(stub_for(stream_index++), false);
    for (int i = 0; i < o_.header_only; ++i) open(stub_for(stream_index++), true);
    for (int i = 0; i < o_.trickle; ++i) threads_.emplace_back([this, i] { trickle(i); });
    for (int i = 0; i < o_.no_read; ++i) threads_.emplace_back([this, i] { no_read(i); });
  }

  void stop() {
    stopping_ = true;
    {
      std::lock_guard lock(mu_);
      for (auto& c : contexts_) c->TryCancel();
    }
    for (auto& t : threads_) t.join();
    for (auto& s : streams_) s.stream->Finish();
    streams_.clear();
  }

 private:
  struct Held {
    std::unique_ptr<grpc::ClientReaderWriter<v1::MultiplyRequest, v1::MultiplyResponse>> stream;
  };

  grpc::ClientContext* new_context() {
    std::lock_guard lock(mu_);
    contexts_.push_back(std::make_unique<grpc::ClientContext>());
    return contexts_.back().get();
  }

  void open(v1::Sgemm::Stub& stub, bool send_header) {
    Held h;
    h.stream = stub.Multiply(new_context());
    if (send_header) h.stream->Write(header_msg(o_.header_dim, o_.header_dim, o_.header_dim));
    streams_.push_back(std::move(h));
  }

  void trickle(int i) {
    auto stub = v1::Sgemm::NewStub(own_channel(o_.server, 2000 + i));
    grpc::ClientContext* ctx = new_context();
    auto stream = stub->Multiply(ctx);
    const int64_t d = o_.trickle_dim;
    stream->Write(header_msg(d, d, d));
    std::vector<float> row(std::size_t(d), 0.25f);
    const int64_t rows_per_chunk = std::max<int64_t>(1, (1 << 20) / (d * 4));
    std::vector<float> block(std::size_t(rows_per_chunk * d), 0.5f);
    v1::MultiplyRequest req;
    for (int64_t r = 0; r < d && !stopping_; r += rows_per_chunk) {  // all of B
      const int64_t n = std::min(rows_per_chunk, d - r);
      req.mutable_chunk()->set_matrix(v1::MATRIX_B);
      req.mutable_chunk()->set_offset(r * d);
      req.mutable_chunk()->set_data(reinterpret_cast<const char*>(block.data()), std::size_t(n * d * 4));
      if (!stream->Write(req)) break;
    }
    for (int64_t r = 0; r < d && !stopping_; ++r) {  // then A, one row at a time
      req.mutable_chunk()->set_matrix(v1::MATRIX_A);
      req.mutable_chunk()->set_offset(r * d);
      req.mutable_chunk()->set_data(reinterpret_cast<const char*>(row.data()), std::size_t(d * 4));
      if (!stream->Write(req)) break;
      for (int w = 0; w < o_.trickle_interval_ms && !stopping_; w += 10)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    while (!stopping_) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    stream->Finish();
  }

  void no_read(int i) {
    auto stub = v1::Sgemm::NewStub(own_channel(o_.server, 3000 + i));
    grpc::ClientContext* ctx = new_context();
    auto stream = stub->Multiply(ctx);
    const int64_t d = o_.no_read_dim;
    stream->Write(header_msg(d, d, 1));
    std::vector<float> v(std::size_t(d), 1.0f);
    v1::MultiplyRequest req;
    for (auto m : {v1::MATRIX_A, v1::MATRIX_B}) {
      req.mutable_chunk()->set_matrix(m);
      req.mutable_chunk()->set_offset(0);
      req.mutable_chunk()->set_data(reinterpret_cast<const char*>(v.data()), v.size() * 4);
      stream->Write(req);
    }
    stream->WritesDone();
    while (!stopping_) std::this_thread::sleep_for(std::chrono::milliseconds(10));  // never reads
    stream->Finish();
  }

  const LoadOptions& o_;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts_;  // guarded by mu_
  std::vector<std::unique_ptr<v1::Sgemm::Stub>> stubs_;
  std::vector<Held> streams_;
  std::vector<std::thread> threads_;
};

struct Sample {
  double ms;
  sgemm::GemmShape shape;
  int64_t products = 1;     // in the request
  double flops = 0;         // of its products
  int launch_products = 1;  // products that shared its engine launch (the server's coalescing); 0: a batch request
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t i = std::min(v.size() - 1, std::size_t(std::lround(p / 100.0 * double(v.size() - 1))));
  return v[i];
}

}  // namespace

int main(int argc, char** argv) {
  // As sgemm-server does (server/main.cc): no lock-order graph behind gRPC's
  // every lock, so that the load measures the service, not a debugging aid.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  LoadOptions o;
  CLI::App app{"sgemm-load: concurrent clients, a mix of sizes, optional misbehaving clients"};
  app.add_option("--server", o.server, "sgemm-server host:port")->capture_default_str();
  app.add_flag("--one-connection", o.one_connection,
               "the clients share one connection (default: one each, as separate client processes would have)");
  app.add_option("--clients", o.clients, "concurrent well-behaved clients")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--requests", o.requests, "products per client")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--duration-s", o.duration_s, "run this long instead (0: --requests per client)");
  app.add_option("--sizes", o.sizes, "square sizes or MxNxK shapes, comma-separated")->capture_default_str();
  app.add_flag("--with-c", o.with_c, "send C too (beta 0.5)");
  app.add_option("--timeout-ms", o.timeout_ms, "deadline of each request")->capture_default_str();
  app.add_flag("--no-retry", o.no_retry, "do not retry UNAVAILABLE");
  app.add_option("--header-only", o.header_only, "misbehaving: streams that send only a header")->capture_default_str();
  app.add_option("--header-dim", o.header_dim, "their m = n = k")->capture_default_str();
  app.add_option("--trickle", o.trickle, "misbehaving: upload B, then A one row per interval")->capture_default_str();
  app.add_option("--trickle-dim", o.trickle_dim, "their m = n = k")->capture_default_str();
  app.add_option("--trickle-interval-ms", o.trickle_interval_ms, "between rows of A")->capture_default_str();
  app.add_option("--silent", o.silent, "misbehaving: streams that never send a message")->capture_default_str();
  app.add_option("--no-read", o.no_read, "misbehaving: upload a k=1 product and never read C")->capture_default_str();
  app.add_option("--no-read-dim", o.no_read_dim, "their m = n")->capture_default_str();
  app.add_option("--reset-storm", o.reset_storm, "misbehaving: open and reset this many streams before the load")
      ->capture_default_str();
  app.add_option("--streams-per-connection", o.streams_per_connection, "misbehaving streams per connection")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--settle-ms", o.settle_ms, "wait after attaching misbehavers")->capture_default_str();
  app.add_flag("--json", o.json, "print one JSON object");
  app.add_option("--verify-every", o.verify_every,
                 "verify the first product of each client and shape, then one in N (1: every product)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_flag("--fresh-inputs", o.fresh_inputs,
               "new random inputs for every product (else once per client and shape)");
  app.add_option("--batch", o.batch, "each request a strided batch of N products of its --sizes shape")
      ->check(CLI::PositiveNumber);
  app.add_flag("--group", o.group, "each request one group of every --sizes shape (different shapes in one request)");
  app.add_option("--rpc", o.rpc,
                 "single products: auto (MultiplyUnary when a product fits it), stream, unary, or ring (auto's "
                 "MultiplyUnary messages through a request ring in shared memory; docs/transport.md)")
      ->check(CLI::IsMember({"auto", "stream", "unary", "ring"}))
      ->capture_default_str();
  app.add_option("--transport", o.transport, "auto (shared memory on a Unix socket that offers it), grpc or shm")
      ->check(CLI::IsMember({"auto", "grpc", "shm"}))
      ->capture_default_str();
  app.add_flag("--reactor-calls", o.reactor_calls,
               "gRPC's callback threads drive each request's stream (the client's default: the calling thread)");
  // --resident: products against a resident B (docs/resident.md), bench/resident_load.h.
  bool resident = false;
  sgemm::bench::ResidentLoadOptions ro;
  app.add_flag("--resident", resident,
               "resident-matrix mode: streams of A (--a-rows) against a resident square B (--b-sizes), vs sending B");
  app.add_option("--b-sizes", ro.b_sizes, "--resident: square B sizes")->capture_default_str();
  app.add_option("--a-rows", ro.a_rows, "--resident: rows of each stream of A")->capture_default_str();
  app.add_option("--sent-requests", ro.sent_requests, "--resident: products per client sending B every time")
      ->capture_default_str();
  app.add_option("--warmup", ro.warmup, "--resident: untimed products per client first")->capture_default_str();
  app.add_option("--keep-requests", ro.keep_requests,
                 "--resident: repetitions of the kept-result vs upload-of-A comparison (0: skip)")
      ->capture_default_str();
  app.add_option("--keep-dim", ro.keep_dim, "--resident: its square size")->capture_default_str();
  app.add_option("--chunk-bytes", ro.chunk_bytes, "--resident: payload of each chunk sent")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help: 0; a bad argument: 2
  }
  if (resident) {
    ro.server = o.server;
    ro.clients = o.clients;
    ro.requests = o.requests;
    ro.json = o.json;
    ro.reactor_calls = o.reactor_calls;
    ro.rpc = sgemm::parse_multiply_rpc(o.rpc).value_or(sgemm::MultiplyRpc::kAuto);
    return sgemm::bench::run_resident_load(ro);
  }
  const auto shapes = parse_shapes(o.sizes);
  if (shapes.empty()) {
    std::fprintf(stderr, "sgemm-load: --sizes has no shape\n");
    return 2;
  }
  if (o.batch > 0 && o.group) {
    std::fprintf(stderr, "sgemm-load: --batch and --group are two request kinds: give one\n");
    return 2;
  }
  const bool batched = o.batch > 0 || o.group;

  double storm_ms = 0;
  if (o.reset_storm > 0) {  // as fast as one client can: open, reset, next
    auto stub = v1::Sgemm::NewStub(own_channel(o.server, 4000));
    const auto ts = Clock::now();
    for (int i = 0; i < o.reset_storm; ++i) {
      grpc::ClientContext ctx;
      auto s = stub->Multiply(&ctx);
      ctx.TryCancel();
      s->Finish();
    }
    storm_ms = std::chrono::duration<double, std::milli>(Clock::now() - ts).count();
  }
  Misbehavers bad(o);
  bad.start();
  if (o.header_only + o.trickle + o.silent + o.no_read > 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(o.settle_ms));
  auto probe = sgemm::Client::connect(o.server);
  auto before = probe->info();

  std::mutex mu;
  std::vector<Sample> samples;
  std::map<std::string, int64_t> rpcs_used;  // guarded by mu: single products by the RPC that carried them
  std::map<std::string, int64_t> statuses;
  std::map<std::string, std::string> first_message;
  std::atomic<int64_t> wrong{0}, retries{0}, unverified{0}, products_failed{0};
  std::atomic<int64_t> peak_held{0};
  const auto t0 = Clock::now();
  const auto end = t0 + std::chrono::milliseconds(int64_t(o.duration_s * 1000));
  std::atomic<bool> done{false};
  std::thread sampler([&] {  // the server's budget in use while the load runs
    while (!done) {
      auto i = probe->info(std::chrono::milliseconds(2000));
      if (i.ok()) peak_held = std::max<int64_t>(peak_held.load(), i->host_bytes_in_use);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  std::vector<std::thread> threads;
  threads.reserve(std::size_t(o.clients));
  for (int c = 0; c < o.clients; ++c) {
    threads.emplace_back([&, c] {
      sgemm::ClientOptions copt;
      if (o.no_retry) copt.retry.max_attempts = 1;
      copt.caller_thread_calls = !o.reactor_calls;
      copt.rpc = sgemm::parse_multiply_rpc(o.rpc).value_or(sgemm::MultiplyRpc::kAuto);
      copt.transport = sgemm::parse_transport(o.transport).value_or(sgemm::Transport::kAuto);
      // gRPC shares one connection among channels with equal arguments: a distinct
      // argument gives each client its own, as separate processes would have.
      if (!o.one_connection) copt.channel_args.emplace_back("sgemm.load.client", c);
      auto client = sgemm::Client::connect(o.server, copt);
      std::mt19937_64 rng((uint64_t(std::random_device{}()) << 32) ^ uint64_t(c));
      std::vector<Operands> operands(shapes.size());
      std::vector<BatchOperands> batches(o.group ? 1 : shapes.size());
      for (int r = 0;; ++r) {
        if (o.duration_s > 0 ? Clock::now() >= end : r >= o.requests) break;
        if (batched) {
          // A strided batch of the client's next shape, or the group of every shape.
          const std::size_t index = o.group ? 0 : (std::size_t(c) + std::size_t(r)) % shapes.size();
          BatchOperands& in = batches[index];
          if (in.a.empty() || o.fresh_inputs) {
            in.products = {};
            if (o.group) {
              in.products.group = shapes;
            } else {
              in.products.shape = shapes[index];
              in.products.count = o.batch;
            }
            in.draw(rng(), o.with_c);
          }
          const bool verify = !in.verified_once || (o.verify_every > 0 && r % o.verify_every == 0);
          sgemm::MultiplyOptions mo;
          mo.beta = o.with_c ? 0.5f : 0.0f;
          mo.timeout = std::chrono::milliseconds(o.timeout_ms);
          const auto ts = Clock::now();
          auto res =
              client->multiply_batch(in.products, in.a.data(), in.b.data(), o.with_c ? in.c0.data() : nullptr, mo);
          const double ms = std::chrono::duration<double, std::milli>(Clock::now() - ts).count();
          std::string code = res.ok() ? "OK" : std::string(sgemm::status_code_name(res.status().code()));
          bool bad_result = false;
          const int64_t count = int64_t(in.layout.c_offset.size());
          if (res.ok()) {
            retries += res->attempts - 1;
            products_failed += res->products_failed;
            if (!verify) unverified += count;
          }
          if (res.ok() && verify) {
            in.verified_once = true;
            for (const sgemm::ProductResult& p : res->products) {
              if (!p.status.ok()) continue;
              if (!sgemm::cli::verify_batch_product(in.products, in.layout, std::size_t(p.index), 1.0f, mo.beta,
                                                    sgemm::Op::kN, sgemm::Op::kN, in.a.data(), in.b.data(),
                                                    o.with_c ? in.c0.data() : nullptr, res->c.data(), in.seed)
                       .passed(sgemm::kSgemmTolerance)) {
                bad_result = true;
                ++wrong;
              }
            }
          }
          double flops = 0;
          for (const sgemm::GemmShape& s : in.products.shapes()) flops += s.flops();
          std::lock_guard lock(mu);
          ++statuses[code];
          if (!res.ok() && !first_message.count(code)) first_message[code] = res.status().message();
          if (res.ok() && !bad_result)
            samples.push_back({ms, in.products.group.empty() ? in.products.shape : sgemm::GemmShape{},
                               count - res->products_failed, flops, 0});
          continue;
        }
        const std::size_t shape_index = (std::size_t(c) + std::size_t(r)) % shapes.size();
        const sgemm::GemmShape s = shapes[shape_index];
        Operands& in = operands[shape_index];
        if (in.a.empty() || o.fresh_inputs) in.draw(s, rng(), o.with_c);
        const std::vector<float>& a = in.a;
        const std::vector<float>& b = in.b;
        const std::vector<float>& c0 = in.c0;
        const uint64_t seed = in.seed;
        const bool verify = !in.verified_once || (o.verify_every > 0 && r % o.verify_every == 0);
        sgemm::MultiplyOptions mo;
        mo.beta = o.with_c ? 0.5f : 0.0f;
        mo.timeout = std::chrono::milliseconds(o.timeout_ms);
        const auto ts = Clock::now();
        auto res = client->multiply(s, a.data(), b.data(), o.with_c ? c0.data() : nullptr, mo);
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - ts).count();
        std::string code = res.ok() ? "OK" : std::string(sgemm::status_code_name(res.status().code()));
        bool bad_result = false;
        if (res.ok() && !verify) ++unverified;
        if (res.ok()) retries += res->attempts - 1;
        if (res.ok() && verify) {
          in.verified_once = true;
          const auto rows = sgemm::rows_to_verify(s.m, s.n, s.k, seed);
          bad_result = !sgemm::verify_gemm(s.m, s.n, s.k, 1.0f, a.data(), b.data(), mo.beta,
                                           o.with_c ? c0.data() : nullptr, res->c.data(), rows)
                            .passed(sgemm::kSgemmTolerance);
          if (bad_result) ++wrong;
        }
        std::lock_guard lock(mu);
        ++statuses[code];
        if (!res.ok() && !first_message.count(code)) first_message[code] = res.status().message();
        if (res.ok() && !bad_result) samples.push_back({ms, s, 1, s.flops(), res->summary.launch_products});
        if (res.ok()) ++rpcs_used[sgemm::multiply_rpc_name(res->rpc)];
      }
    });
  }
  for (auto& t : threads) t.join();
  const double wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  done = true;
  sampler.join();
  auto during = probe->info();  // misbehavers still attached
  bad.stop();

  std::vector<double> lat;
  double flops = 0;
  int64_t products_ok = 0;
  std::map<int, int64_t> launch_products;  // requests by the products that shared their launch
  for (const auto& s : samples) {
    lat.push_back(s.ms);
    flops += s.flops;
    products_ok += s.products;
    if (s.launch_products > 0) ++launch_products[s.launch_products];
  }
  int64_t total = 0, ok = statuses.count("OK") ? statuses["OK"] : 0;
  for (const auto& [k, v] : statuses) total += v;
  nlohmann::json j;
  j["server"] = o.server;
  j["clients"] = o.clients;
  j["one_connection"] = o.one_connection;
  j["sizes"] = o.sizes;
  j["misbehaving"] = {{"header_only", o.header_only}, {"header_dim", o.header_dim}, {"trickle", o.trickle},
                      {"trickle_dim", o.trickle_dim}, {"silent", o.silent},         {"no_read", o.no_read},
                      {"reset_storm", o.reset_storm}, {"reset_storm_ms", storm_ms}};
  j["requests"] = total;
  j["ok"] = ok;
  j["wrong_results"] = wrong.load();
  j["unverified"] = unverified.load();
  j["verify_every"] = o.verify_every;
  j["fresh_inputs"] = o.fresh_inputs;
  j["retries"] = retries.load();
  j["statuses"] = statuses;
  j["first_error_message"] = first_message;
  j["wall_s"] = wall_s;
  j["mode"] = o.group ? "group" : o.batch > 0 ? "batch" : "single";
  j["batch"] = o.batch;
  j["products_ok"] = products_ok;  // in requests that succeeded with correct (or unverified) results
  j["products_failed"] = products_failed.load();
  j["throughput_rps"] = double(ok) / wall_s;  // requests per second
  j["products_per_s"] = double(products_ok) / wall_s;
  j["gflops"] = flops / wall_s / 1e9;
  // Single-product requests by how many products shared their launch (--coalesce-max-products): "1" ran alone.
  nlohmann::json shared = nlohmann::json::object();
  for (const auto& [n, requests] : launch_products) shared[std::to_string(n)] = requests;
  j["launch_products"] = shared;
  j["rpc"] = {{"asked", o.rpc}, {"transport", o.transport}, {"used", rpcs_used}};  // batches always stream
  j["latency_ms"] = {{"p50", percentile(lat, 50)},
                     {"p90", percentile(lat, 90)},
                     {"p99", percentile(lat, 99)},
                     {"max", lat.empty() ? 0 : *std::max_element(lat.begin(), lat.end())},
                     {"min", lat.empty() ? 0 : *std::min_element(lat.begin(), lat.end())}};
  if (before.ok()) {
    j["server_before"] = {{"backend", before->backend},
                          {"host_bytes_in_use", before->host_bytes_in_use},
                          {"host_memory_bytes", before->host_memory_bytes},
                          {"open_streams", before->open_streams}};
  }
  if (during.ok())
    j["server_after"] = {{"host_bytes_in_use", during->host_bytes_in_use}, {"open_streams", during->open_streams}};
  j["server_peak_host_bytes_in_use"] = peak_held.load();
  if (o.json) {
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf(
        "sgemm-load: %d clients (%s), sizes %s, misbehaving: %d header-only, %d trickle, %d silent, %d no-read\n",
        o.clients, o.one_connection ? "one shared connection" : "a connection each", o.sizes.c_str(), o.header_only,
        o.trickle, o.silent, o.no_read);
    if (o.reset_storm > 0)
      std::printf("reset storm: %d streams opened and reset in %.0f ms\n", o.reset_storm, storm_ms);
    std::printf(
        "requests %ld, ok %ld, wrong results %ld, unverified %ld (--verify-every %d), retries %ld, wall %.2f s\n",
        long(total), long(ok), long(wrong.load()), long(unverified.load()), o.verify_every, long(retries.load()),
        wall_s);
    for (const auto& [k, v] : statuses)
      std::printf("  %-20s %ld%s%s\n", k.c_str(), long(v), first_message.count(k) ? "  e.g. " : "",
                  first_message.count(k) ? first_message[k].c_str() : "");
    if (batched)
      std::printf(
          "requests: %s; %ld products computed, %ld failed on the server\n",
          o.group ? "one group of every --sizes shape" : ("strided batches of " + std::to_string(o.batch)).c_str(),
          long(products_ok), long(products_failed.load()));
    if (!batched) {
      std::string used;
      for (const auto& [name, n] : rpcs_used) used += (used.empty() ? "" : ", ") + name + " " + std::to_string(n);
      std::printf("rpc: --rpc %s --transport %s; used: %s\n", o.rpc.c_str(), o.transport.c_str(),
                  used.empty() ? "none" : used.c_str());
    }
    std::printf("throughput %.1f requests/s, %.1f products/s, %.2f GFLOP/s\n", double(ok) / wall_s,
                double(products_ok) / wall_s, flops / wall_s / 1e9);
    std::printf("latency ms: min %.2f p50 %.2f p90 %.2f p99 %.2f max %.2f\n", j["latency_ms"]["min"].get<double>(),
                percentile(lat, 50), percentile(lat, 90), percentile(lat, 99), j["latency_ms"]["max"].get<double>());
    if (before.ok())
      std::printf(
          "server (%s): budget %.2f GiB; with misbehavers attached before the load: %ld bytes held, %d streams "
          "open; peak during the load %ld bytes\n",
          before->backend.c_str(), before->host_memory_bytes / 1073741824.0, long(before->host_bytes_in_use),
          before->open_streams, long(peak_held.load()));
  }
  if (wrong > 0) return 1;
  return ok == total ? 0 : 2;
}
