// sgemm-attack-bench: each attack of docs/security.md against a real
// sgemm-server, started by this program (a fresh one per attack, CPU backend
// by default), while a normal client multiplies an odd shape (33 x 17 x 65)
// over TCP from 127.0.0.1 in a loop, every result checked against the fp64
// reference. The attackers connect from 127.0.0.2 and 127.0.0.3 (or the Unix
// socket). For each attack it reports the normal requests' latency (p50, p99,
// max) before and while the attack runs, their failures and wrong results,
// and the server's resident set: before, at its peak, and how long after the
// attack ended it came back within 5% of where it started (watched for 10 s).
//
// Targets (docs/security.md): a normal request completes correctly in under
// 100 ms (under 1 s during a rapid-reset storm), and memory is back within
// 5% within 10 s. The program prints each figure next to its target and
// exits 1 when a normal request failed or came back wrong (the latency
// targets are reported, not enforced: a loaded machine says nothing about
// the server).
//
//   sgemm-attack-bench [--server-bin PATH] [--seconds 5] [--attacks rapid-reset,silent-streams,...]
//                      [--backend cpu] [--server-flags=--max-resets-per-second,0] [--markdown]
//
// --server-flags adds flags to every server (to see an attack with a guard
// off, say); an attack stops early when the server grows by 2 GiB.
//
// The rows marked with tokens (stream-share, resident-puts, region-quota)
// start the server with --auth-tokens and two clients: the attacker, with
// quotas (max_resident_bytes 32 KiB, max_region_bytes 128 KiB), and the
// normal client.
//
// The cluster rows (cluster-*) start the server as a cluster coordinator
// (--cluster-listen, a cluster token, --cluster-always, so that every normal
// request runs over the cluster) and attack its listener: Joins without the
// token or with another, hellos whose fields are out of range, a member that
// never answers ready. Cluster mode needs GPUs; on a machine without them
// these rows say "not run".
#include <arpa/inet.h>
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "client/sgemm_client.h"
#include "common/reference_gemm.h"
#include "sgemm/v1/cluster.grpc.pb.h"
#include "sgemm/v1/sgemm.grpc.pb.h"
#include "tests/e2e/normal_traffic.h"
#include "tests/e2e/raw_connections.h"
#include "tests/e2e/raw_h2_client.h"
#include "tests/e2e/server_spawn.h"

namespace {

namespace v1 = ::sgemm::v1;
using Clock = std::chrono::steady_clock;
using sgemm::testing::RawH2Client;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

std::string run(const std::string& cmd) { return sgemm::testing::run_command(cmd).output; }

// The server under attack (tests/e2e/server_spawn.h): started with
// posix_spawn (through a launcher such as prlimit) on 127.0.0.1:0 and a Unix
// socket in a fresh directory, stopped with SIGTERM.
using Server = sgemm::testing::ServerProcess;
using sgemm::testing::rss_bytes;

// What the attack's threads see: the server and when to stop.
struct AttackContext {
  AttackContext(const Server& s, const std::atomic<bool>& st) : server(s), stop(st) {}
  const Server& server;
  const std::atomic<bool>& stop;
  std::string attacker_token;   // the attacker's bearer token (attacks with tokens)
  int cluster_port = 0;         // the coordinator's cluster listener (cluster attacks)
  std::string cluster_token;    // the cluster's secret (cluster attacks)
  std::atomic<int64_t> ops{0};  // attack operations done (a batch of streams, a request, a connection set)
  std::mutex mu;
  std::map<std::string, int64_t> statuses;  // what the attacker's requests got
  void saw(const std::string& status) {
    std::lock_guard lock(mu);
    ++statuses[status];
  }
};

struct Attack {
  std::string name, what;
  std::vector<std::string> flags;     // the server's, beside the defaults
  std::vector<std::string> launcher;  // e.g. prlimit
  bool tls = false;                   // the server (and the normal client) speak TLS
  bool rapid_reset = false;           // the 1 s target instead of 100 ms
  int threads = 1;
  std::function<void(AttackContext&, int thread)> body;
  // The server runs with --auth-tokens: the attacker and the normal client
  // each have a token (the attacker's with the quotas the header comment names).
  bool tokens = false;
  // The server coordinates a cluster (--cluster-listen on 127.0.0.1, a
  // cluster token, --cluster-always: every normal request runs over the
  // cluster). Cluster mode needs GPUs: elsewhere the row says it did not run.
  bool cluster = false;
};

// ---- The attacks -------------------------------------------------------------

void reset_storm(AttackContext& c, int t, bool tls) {
  RawH2Client h2;
  const char* source = t % 2 ? "127.0.0.3" : "127.0.0.2";
  while (!c.stop) {
    if (!h2.connected() && !(tls ? h2.connect_tls(c.server.port(), source) : h2.connect(c.server.port(), source)))
      continue;
    if (h2.open_streams("/sgemm.v1.Sgemm/Multiply", 64, true)) {
      c.ops += 64;
    } else {
      c.saw("connection closed by the server");
      h2.close_now();
    }
  }
}

void silent_streams(AttackContext& c, int) {
  std::vector<std::unique_ptr<RawH2Client>> conns;
  for (int i = 0; i < 5 && !c.stop; ++i) {  // 1,250 streams that never send a message, never acknowledging SETTINGS
    conns.push_back(std::make_unique<RawH2Client>());
    if (!conns.back()->connect(c.server.port(), "127.0.0.2")) continue;
    (void)conns.back()->open_streams(i % 2 ? "/sgemm.v1.Sgemm/PutMatrix" : "/sgemm.v1.Sgemm/Multiply", 250, false);
    c.ops += 250;
  }
  while (!c.stop)
    for (auto& h : conns) (void)h->wait_closed(50);  // keep reading what the server sends
}

// 1,000 streams on `path` per connection from 127.0.0.2, reconnecting when
// the server closes it (`empty_message`: each carries an empty message, as a
// health Watch request does).
void stream_flood(AttackContext& c, const std::string& path, bool empty_message) {
  RawH2Client h2;
  while (!c.stop) {
    if (!h2.connected() && !h2.connect(c.server.port(), "127.0.0.2")) continue;
    (void)h2.open_streams(path, 1000, false, empty_message);
    c.ops += 1000;
    if (h2.wait_closed(200)) {
      c.saw("connection closed by the server");
      h2.close_now();
    }
  }
}

// Connections from 127.0.0.2 that send nothing, 400 at once, held a second, then closed.
void descriptor_flood(AttackContext& c, int) {
  while (!c.stop) {
    const std::vector<int> fds = sgemm::testing::hold_connections(c.server.port(), 400);
    c.ops += int64_t(fds.size());
    for (int w = 0; w < 20 && !c.stop; ++w) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    for (int fd : fds) close(fd);
  }
}

std::shared_ptr<grpc::Channel> own_channel(const std::string& target, int index) {
  grpc::ChannelArguments args;
  args.SetInt("sgemm.attack.channel", index);  // a distinct argument: a connection of its own
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
}

v1::MultiplyRequest header_msg(int64_t m, int64_t n, int64_t k) {
  v1::MultiplyRequest r;
  r.mutable_header()->set_m(m);
  r.mutable_header()->set_n(n);
  r.mutable_header()->set_k(k);
  return r;
}

// A header whose footprint is 48 MiB, then 4 bytes a second: the memory is
// reserved at the first chunk and taken back when the upload rate falls
// behind after the grace (--idle-timeout 2 here). Each thread starts anew.
void trickler(AttackContext& c, int t) {
  auto stub = v1::Sgemm::NewStub(own_channel(c.server.tcp_address(), 100 + t));
  while (!c.stop) {
    grpc::ClientContext ctx;
    auto stream = stub->Multiply(&ctx);
    stream->Write(header_msg(2048, 2048, 2048));
    v1::MultiplyRequest chunk;
    chunk.mutable_chunk()->set_matrix(v1::MATRIX_A);
    const float four_bytes = 0.5f;
    bool ended_by_server = false;
    for (int64_t i = 0; !c.stop; ++i) {
      chunk.mutable_chunk()->set_offset(i);
      chunk.mutable_chunk()->set_data(reinterpret_cast<const char*>(&four_bytes), 4);
      if (!stream->Write(chunk)) {
        ended_by_server = true;
        break;
      }
      ++c.ops;
      for (int w = 0; w < 20 && !c.stop; ++w) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (!ended_by_server) ctx.TryCancel();
    v1::MultiplyResponse resp;
    while (stream->Read(&resp)) {
    }
    const grpc::Status st = stream->Finish();
    if (!c.stop) c.saw(std::to_string(int(st.error_code())) + " " + st.error_message().substr(0, 60));
  }
}

// m = n = 32768, k = 1: 256 KiB of A and B for 4 GiB of C, sent on a raw
// stream (the client library would make room for C before sending).
void output_bomb(AttackContext& c, int) {
  auto stub = v1::Sgemm::NewStub(own_channel(c.server.tcp_address(), 200));
  const std::vector<float> column(32768, 1.0f);
  while (!c.stop) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    auto stream = stub->Multiply(&ctx);
    stream->Write(header_msg(32768, 32768, 1));
    for (const v1::Matrix m : {v1::MATRIX_A, v1::MATRIX_B}) {
      v1::MultiplyRequest chunk;
      chunk.mutable_chunk()->set_matrix(m);
      chunk.mutable_chunk()->set_offset(0);
      chunk.mutable_chunk()->set_data(reinterpret_cast<const char*>(column.data()), column.size() * 4);
      if (!stream->Write(chunk)) break;
    }
    stream->WritesDone();
    v1::MultiplyResponse resp;
    while (stream->Read(&resp)) {
    }
    const grpc::Status st = stream->Finish();
    c.saw(st.ok() ? "OK" : std::to_string(int(st.error_code())) + " " + st.error_message().substr(0, 48));
    ++c.ops;
  }
}

// The same trickle against a PutMatrix: a 2048 x 2048 header (16 MiB of
// resident room), then 4 bytes a second.
void put_trickler(AttackContext& c, int t) {
  auto stub = v1::Sgemm::NewStub(own_channel(c.server.tcp_address(), 300 + t));
  while (!c.stop) {
    grpc::ClientContext ctx;
    v1::PutMatrixResponse resp;
    auto w = stub->PutMatrix(&ctx, &resp);
    v1::PutMatrixRequest h;
    h.mutable_header()->set_rows(2048);
    h.mutable_header()->set_cols(2048);
    w->Write(h);
    const float four_bytes = 0.5f;
    bool ended_by_server = false;
    for (int64_t i = 0; !c.stop; ++i) {
      v1::PutMatrixRequest chunk;
      chunk.mutable_chunk()->set_offset(i);
      chunk.mutable_chunk()->set_data(reinterpret_cast<const char*>(&four_bytes), 4);
      if (!w->Write(chunk)) {
        ended_by_server = true;
        break;
      }
      ++c.ops;
      for (int k = 0; k < 20 && !c.stop; ++k) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (!ended_by_server) ctx.TryCancel();
    const grpc::Status st = w->Finish();
    if (!c.stop) c.saw(std::to_string(int(st.error_code())) + " " + st.error_message().substr(0, 60));
  }
}

// The attacker's streams with its token: its whole share of --max-open-streams
// (20 of 40, two clients) held open, and one more tried over and over.
void stream_share_hog(AttackContext& c, int) {
  auto stub = v1::Sgemm::NewStub(own_channel(c.server.tcp_address(), 400));
  struct Held {
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReaderWriter<v1::MultiplyRequest, v1::MultiplyResponse>> stream;
  };
  std::vector<std::unique_ptr<Held>> held;
  for (int i = 0; i < 20; ++i) {
    held.push_back(std::make_unique<Held>());
    held.back()->ctx.AddMetadata("authorization", "Bearer " + c.attacker_token);
    held.back()->stream = stub->Multiply(&held.back()->ctx);
  }
  c.ops += 20;
  while (!c.stop) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + c.attacker_token);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    auto over = stub->Multiply(&ctx);
    over->WritesDone();
    v1::MultiplyResponse resp;
    while (over->Read(&resp)) {
    }
    const grpc::Status st = over->Finish();
    c.saw(std::to_string(int(st.error_code())) + " " + st.error_message().substr(0, 60));
    ++c.ops;
  }
  for (auto& h : held) h->ctx.TryCancel();
  for (auto& h : held) (void)h->stream->Finish();
}

// Sixteen PutMatrix of 16 KiB at once, each alone within the attacker's
// max_resident_bytes (32 KiB), every header and first chunk sent before any
// completes; the stored ones are deleted, and again.
void resident_puts(AttackContext& c, int) {
  auto stub = v1::Sgemm::NewStub(own_channel(c.server.tcp_address(), 500));
  sgemm::ClientOptions o;
  o.token = c.attacker_token;
  auto client = sgemm::Client::connect(c.server.tcp_address(), o);
  constexpr int64_t kRows = 64, kCols = 64;
  const std::vector<float> data(std::size_t(kRows * kCols), 0.5f);
  while (!c.stop) {
    struct Put {
      grpc::ClientContext ctx;
      v1::PutMatrixResponse resp;
      std::unique_ptr<grpc::ClientWriter<v1::PutMatrixRequest>> w;
    };
    std::vector<std::unique_ptr<Put>> puts;
    for (int i = 0; i < 16; ++i) {
      auto p = std::make_unique<Put>();
      p->ctx.AddMetadata("authorization", "Bearer " + c.attacker_token);
      p->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      p->w = stub->PutMatrix(&p->ctx, &p->resp);
      v1::PutMatrixRequest h;
      h.mutable_header()->set_rows(kRows);
      h.mutable_header()->set_cols(kCols);
      p->w->Write(h);
      v1::PutMatrixRequest first;
      first.mutable_chunk()->set_offset(0);
      first.mutable_chunk()->set_data(reinterpret_cast<const char*>(data.data()), 16 * 4);
      p->w->Write(first);
      puts.push_back(std::move(p));
    }
    for (auto& p : puts) {
      v1::PutMatrixRequest rest;
      rest.mutable_chunk()->set_offset(16);
      rest.mutable_chunk()->set_data(reinterpret_cast<const char*>(data.data() + 16), (data.size() - 16) * 4);
      p->w->Write(rest);
      p->w->WritesDone();
      const grpc::Status st = p->w->Finish();
      c.saw(st.ok() ? "stored" : std::to_string(int(st.error_code())) + " " + st.error_message().substr(0, 48));
      if (st.ok()) (void)client->remove(p->resp.handle());
    }
    ++c.ops;
  }
}

// Regions of 64 KiB registered with the attacker's token until one is
// refused (max_region_bytes 128 KiB), then unregistered, and again.
void region_quota(AttackContext& c, int) {
  sgemm::ClientOptions o;
  o.token = c.attacker_token;
  auto client = sgemm::Client::connect(c.server.unix_address(), o);
  while (!c.stop) {
    std::vector<std::unique_ptr<sgemm::Region>> regions;
    for (int i = 0; i < 4 && !c.stop; ++i) {
      auto r = client->create_region(65536);
      if (!r.ok()) {
        c.saw(std::string(sgemm::status_code_name(r.status().code())));
        break;
      }
      regions.push_back(std::move(r).value());
      c.saw("registered");
    }
    for (auto& r : regions) (void)r->unregister();
    ++c.ops;
  }
}

// A region (the caller's own shared-memory object) that the caller shrinks
// and then names; or names with a leading dimension of 2^31 for one row.
class OwnedRegion final : public sgemm::Region {
 public:
  OwnedRegion(const std::string& name, int64_t bytes) : name_(name), bytes_(bytes) {
    fd_ = shm_open(name_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd_ >= 0 && ftruncate(fd_, bytes) == 0)
      data_ = mmap(nullptr, std::size_t(bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  }
  ~OwnedRegion() override {
    if (data_ && data_ != MAP_FAILED) munmap(data_, std::size_t(bytes_));
    if (fd_ >= 0) close(fd_);
    shm_unlink(name_.c_str());
  }
  const std::string& name() const override { return name_; }
  void* data() const override { return data_; }
  int64_t bytes() const override { return bytes_; }
  sgemm::StatusOr<int> unregister() override { return 0; }
  void shrink() { (void)!ftruncate(fd_, 0); }

 private:
  std::string name_;
  int fd_ = -1;
  void* data_ = nullptr;
  int64_t bytes_ = 0;
};

void region_attack(AttackContext& c, bool shrink) {
  auto stub = v1::Sgemm::NewStub(grpc::CreateChannel(c.server.unix_address(), grpc::InsecureChannelCredentials()));
  auto client = sgemm::Client::connect(c.server.unix_address());
  for (int i = 0; !c.stop; ++i) {
    OwnedRegion r("/sgemm-attack-bench-" + std::to_string(getpid()) + "-" + std::to_string(i), 1 << 16);
    if (!r.data() || r.data() == MAP_FAILED) break;
    std::memset(r.data(), 0, 1 << 16);
    grpc::ClientContext ctx;
    v1::RegisterRegionRequest req;
    req.set_name(r.name());
    req.set_shm_name(r.name());
    v1::RegisterRegionResponse resp;
    if (!stub->RegisterRegion(&ctx, req, &resp).ok()) {
      c.saw("register refused");
      continue;
    }
    sgemm::StatusOr<sgemm::MultiplyResult> res = sgemm::Internal("not run");
    if (shrink) {
      r.shrink();
      res = client->multiply_regions({64, 64, 64}, sgemm::RegionMatrix{&r, 0, 0}, sgemm::RegionMatrix{&r, 16384, 0},
                                     std::nullopt, sgemm::RegionMatrix{&r, 32768, 0}, {});
    } else {
      res = client->multiply_regions({1, 8, 16}, sgemm::RegionMatrix{&r, 0, int64_t{1} << 31},
                                     sgemm::RegionMatrix{&r, 4096, 0}, std::nullopt, sgemm::RegionMatrix{&r, 8192, 0},
                                     {});
    }
    c.saw(std::string(sgemm::status_code_name(res.status().code())));
    ++c.ops;
    grpc::ClientContext uctx;
    v1::UnregisterRegionRequest ureq;
    ureq.set_name(r.name());
    v1::UnregisterRegionResponse uresp;
    (void)stub->UnregisterRegion(&uctx, ureq, &uresp);
  }
}

// A name with a newline and a quote, named in a Multiply: NOT_FOUND, and a log line that cannot be forged.
void log_forging(AttackContext& c, int) {
  auto client = sgemm::Client::connect(c.server.unix_address());
  class NamedOnly final : public sgemm::Region {
   public:
    const std::string& name() const override { return name_; }
    void* data() const override { return nullptr; }
    int64_t bytes() const override { return 0; }
    sgemm::StatusOr<int> unregister() override { return 0; }
    std::string name_ = "x\n[2026-01-01 00:00:00.000] [sgemm] [info] request id=forged status=OK\" error=\"none";
  } r;
  while (!c.stop) {
    auto res = client->multiply_regions({4, 4, 4}, sgemm::RegionMatrix{&r, 0, 0}, sgemm::RegionMatrix{&r, 64, 0},
                                        std::nullopt, std::nullopt, {});
    c.saw(std::string(sgemm::status_code_name(res.status().code())));
    ++c.ops;
  }
}

// 40 metrics connections, one byte each every 200 ms.
void slowloris(AttackContext& c, int) {
  c.ops += sgemm::testing::metrics_slowloris(sgemm::testing::metrics_port(c.server), 40, c.stop);
}

// ---- The cluster listener ------------------------------------------------------

v1::ClusterHello member_hello() {
  v1::ClusterHello h;
  h.set_host("attack-member");
  h.add_devices("NVIDIA H100 80GB HBM3");
  return h;
}

// One Join on the coordinator's cluster listener with `hello`, under `token`
// ("" = none). Without `stay` it leaves once welcomed; with it, it stays and
// never answers `ready`, until the coordinator ends the stream or the attack
// ends. The status the coordinator gave, as a short line.
std::string cluster_join(AttackContext& c, v1::Cluster::Stub& stub, const v1::ClusterHello& hello,
                         const std::string& token, bool stay) {
  grpc::ClientContext ctx;
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  auto stream = stub.Join(&ctx);
  v1::ClusterMemberMessage m;
  *m.mutable_hello() = hello;
  stream->Write(m);
  std::atomic<bool> done{false};
  std::thread stopper([&] {  // the attack's end cancels a stream the coordinator keeps
    while (!done && !c.stop) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (!done) ctx.TryCancel();
  });
  v1::ClusterCoordinatorMessage in;
  while (stream->Read(&in)) {
    if (in.has_welcome() && !stay) ctx.TryCancel();
    if (in.has_comm()) c.saw("asked for ready, never answered");
  }
  done = true;
  stopper.join();
  const grpc::Status st = stream->Finish();
  ++c.ops;
  return st.ok() ? "OK" : std::to_string(int(st.error_code())) + " " + st.error_message().substr(0, 56);
}

std::unique_ptr<v1::Cluster::Stub> cluster_stub(const AttackContext& c) {
  return v1::Cluster::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(c.cluster_port), grpc::InsecureChannelCredentials()));
}

// Joins without the cluster token, or with another, in a loop.
void cluster_join_refused(AttackContext& c, const std::string& token) {
  auto stub = cluster_stub(c);
  while (!c.stop) c.saw(cluster_join(c, *stub, member_hello(), token, false));
}

// Hellos (with the token) whose fields are out of range: a newline in the
// host, more devices than a member may have, none, a device name of 200 bytes.
void cluster_bad_hellos(AttackContext& c, int) {
  auto stub = cluster_stub(c);
  std::vector<v1::ClusterHello> bad(4, member_hello());
  bad[0].set_host("node\n[2026-01-01] [sgemm] [info] forged");
  for (int i = 0; i < 64; ++i) bad[1].add_devices("GPU");
  bad[2].clear_devices();
  bad[3].set_devices(0, std::string(200, 'x'));
  for (std::size_t i = 0; !c.stop; ++i) c.saw(cluster_join(c, *stub, bad[i % bad.size()], c.cluster_token, false));
}

// A member with the token that joins and never answers `ready`, joining again
// each time it is dropped.
void cluster_never_ready(AttackContext& c, int) {
  auto stub = cluster_stub(c);
  while (!c.stop) c.saw(cluster_join(c, *stub, member_hello(), c.cluster_token, true));
}

std::vector<Attack> all_attacks() {
  std::vector<Attack> a;
  a.push_back({"rapid-reset",
               "HEADERS + RST_STREAM, 64 per write, 2 connections reconnecting",
               {},
               {},
               false,
               true,
               2,
               [](AttackContext& c, int t) { reset_storm(c, t, false); }});
  a.push_back({"rapid-reset-tls", "the same over TLS", {}, {}, true, true, 2, [](AttackContext& c, int t) {
                 reset_storm(c, t, true);
               }});
  a.push_back({"silent-streams",
               "1,250 Multiply and PutMatrix streams on 5 connections that never ack SETTINGS",
               {},
               {},
               false,
               false,
               1,
               silent_streams});
  a.push_back({"stream-share",
               "a client (token) holding its share of --max-open-streams 40 and asking for more, in a loop",
               {"--max-open-streams", "40"},
               {},
               false,
               false,
               1,
               stream_share_hog});
  a.back().tokens = true;
  a.push_back({"health-watch",
               "1,000 health Watch streams per connection, reconnecting",
               {},
               {},
               false,
               false,
               1,
               [](AttackContext& c, int) { stream_flood(c, "/grpc.health.v1.Health/Watch", true); }});
  a.push_back({"reflection-streams",
               "1,000 reflection streams per connection (--reflection), reconnecting",
               {"--reflection"},
               {},
               false,
               false,
               1,
               [](AttackContext& c, int) {
                 stream_flood(c, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", false);
               }});
  a.push_back({"descriptor-flood",
               "400 silent connections at a time under an open-files limit of 256",
               {},
               {"/usr/bin/prlimit", "--nofile=256:256", "--"},
               false,
               false,
               1,
               descriptor_flood});
  a.push_back({"trickle",
               "4 streams, each a 2048^3 header then 4 bytes a second (--idle-timeout 2)",
               {"--idle-timeout", "2"},
               {},
               false,
               false,
               4,
               trickler});
  a.push_back({"put-trickle",
               "4 PutMatrix streams, each a 2048 x 2048 header then 4 bytes a second (--idle-timeout 2)",
               {"--idle-timeout", "2"},
               {},
               false,
               false,
               4,
               put_trickler});
  a.push_back({"resident-puts",
               "16 concurrent 16 KiB puts of a client whose max_resident_bytes is 32 KiB, in a loop",
               {},
               {},
               false,
               false,
               1,
               resident_puts});
  a.back().tokens = true;
  a.push_back({"output-bomb",
               "m = n = 32768, k = 1: 256 KiB up for 4 GiB of C, in a loop",
               {},
               {},
               false,
               false,
               1,
               output_bomb});
  a.push_back({"region-shrink",
               "register a region, ftruncate it to 0, multiply naming it, in a loop",
               {},
               {},
               false,
               false,
               1,
               [](AttackContext& c, int) { region_attack(c, true); }});
  a.push_back({"huge-ld",
               "a one-row region operand with ld = 2^31, in a loop",
               {},
               {},
               false,
               false,
               1,
               [](AttackContext& c, int) { region_attack(c, false); }});
  a.push_back(
      {"log-forging", "a region name with a newline and a quote, in a loop", {}, {}, false, false, 1, log_forging});
  a.push_back({"region-quota",
               "64 KiB regions registered by a client (token) until its max_region_bytes (128 KiB) refuses, in a loop",
               {},
               {},
               false,
               false,
               1,
               region_quota});
  a.back().tokens = true;
  a.push_back({"metrics-slowloris",
               "40 metrics connections sending a byte every 200 ms",
               {"--metrics-listen", "127.0.0.1:0"},
               {},
               false,
               false,
               1,
               slowloris});
  a.push_back({"cluster-no-token",
               "Join the cluster listener without the cluster token, in a loop",
               {},
               {},
               false,
               false,
               1,
               [](AttackContext& c, int) { cluster_join_refused(c, ""); }});
  a.push_back(
      {"cluster-wrong-token", "Join with another token, in a loop", {}, {}, false, false, 1, [](AttackContext& c, int) {
         cluster_join_refused(c, "not-the-secret-0123456789abcdef");
       }});
  a.push_back({"cluster-bad-hello",
               "hellos with fields out of range (a newline, 64 devices, none, a 200-byte name)",
               {},
               {},
               false,
               false,
               1,
               cluster_bad_hellos});
  a.push_back({"cluster-never-ready",
               "a member with the token that never answers ready, rejoining",
               {"--cluster-timeout", "2"},
               {},
               false,
               false,
               1,
               cluster_never_ready});
  for (Attack& row : a) row.cluster = row.name.rfind("cluster-", 0) == 0;
  return a;
}

// ---- The normal client and the figures ----------------------------------------

using Latencies = sgemm::testing::NormalTraffic;

struct Row {
  std::string name;
  std::string not_run;  // why the attack did not run ("" when it did)
  Latencies before, during;
  int64_t rss_start = 0, rss_peak = 0, rss_end = 0;
  int64_t held_peak = 0;   // request memory the server held (GetInfo host_bytes_in_use), its peak
  int64_t held_end = 0;    // and after the attack
  bool cut_short = false;  // stopped when the server grew by 2 GiB
  double attack_s = 0;
  double back_s = -1;  // seconds after the attack until within 5%; -1: not within 10 s
  int64_t ops = 0;
  std::string statuses;
  bool survived = false;
  double target_ms = 100;
};

struct Args {
  std::string server_bin = SGEMM_SERVER_BIN;
  std::string backend = "cpu";
  double seconds = 5;
  std::vector<std::string> attacks;
  std::vector<std::string> server_flags;  // added to every server's flags
  bool markdown = false;
};

bool run_attack(const Args& args, const Attack& attack, const std::string& pki_dir, Row* row) {
  row->name = attack.name;
  row->target_ms = attack.rapid_reset ? 1000 : 100;
  std::vector<std::string> flags = attack.flags;
  flags.insert(flags.end(), args.server_flags.begin(), args.server_flags.end());
  sgemm::ClientOptions normal_options;
  if (attack.tls) {
    for (const std::string& f :
         {std::string("--tls-cert"), pki_dir + "/server.pem", std::string("--tls-key"), pki_dir + "/server.key"})
      flags.push_back(f);
    normal_options.tls.ca_file = pki_dir + "/ca.pem";
  }
  const std::string attacker_token = "attacker-token-0123456789abcdef", normal_token = "normal-token-0123456789abcdef";
  if (attack.tokens) {
    std::ofstream(pki_dir + "/tokens.json") << R"({"clients": [{"name": "attacker", "token": ")" << attacker_token
                                            << R"(", "max_resident_bytes": 32768, "max_region_bytes": 131072},
                           {"name": "normal", "token": ")"
                                            << normal_token << R"("}]})";
    flags.push_back("--auth-tokens");
    flags.push_back(pki_dir + "/tokens.json");
    normal_options.token = normal_token;
  }
  const std::string cluster_token = "cluster-secret-0123456789abcdef";
  if (attack.cluster) {
    std::ofstream(pki_dir + "/cluster.token") << cluster_token << "\n";
    for (const std::string& f :
         {std::string("--cluster-listen"), std::string("127.0.0.1:0"), std::string("--cluster-token-file"),
          pki_dir + "/cluster.token", std::string("--cluster-always")})
      flags.push_back(f);
  }
  Server server(flags, attack.launcher, args.server_bin, args.backend);
  if (!server.running()) {
    if (attack.cluster && server.log().find("cluster mode needs GPUs") != std::string::npos) {
      row->not_run = "cluster mode needs GPUs";
      return true;
    }
    std::fprintf(stderr, "%s: the server did not start:\n%s\n", attack.name.c_str(), server.log().c_str());
    return false;
  }
  auto client = sgemm::Client::connect(server.tcp_address(), normal_options);
  {  // a second of normal requests: the baseline, and the server's one-time costs paid
    std::atomic<bool> stop{false};
    std::thread t([&] { sgemm::testing::run_normal_traffic(*client, stop, &row->before); });
    std::this_thread::sleep_for(std::chrono::seconds(1));
    stop = true;
    t.join();
  }
  row->rss_start = row->rss_peak = rss_bytes(server.pid());
  std::atomic<bool> stop{false};
  AttackContext ctx(server, stop);
  ctx.attacker_token = attacker_token;
  if (attack.cluster) {
    std::smatch m;
    const std::string log = server.log();
    if (std::regex_search(log, m, std::regex(R"(\(port (\d+)\): members join)"))) ctx.cluster_port = std::stoi(m[1]);
    ctx.cluster_token = cluster_token;
  }
  std::vector<std::thread> attackers;
  for (int t = 0; t < attack.threads; ++t) attackers.emplace_back([&, t] { attack.body(ctx, t); });
  std::atomic<bool> normal_stop{false};
  std::thread held([&] {  // the request memory the server holds (its budget), every 50 ms
    auto watcher = sgemm::Client::connect(server.tcp_address(), normal_options);
    while (!normal_stop) {
      if (auto info = watcher->info(); info.ok()) row->held_peak = std::max(row->held_peak, info->host_bytes_in_use);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  std::thread normal([&] {  // the peak resident set sampled after each normal request
    sgemm::testing::run_normal_traffic(*client, normal_stop, &row->during,
                                       [&] { row->rss_peak = std::max(row->rss_peak, rss_bytes(server.pid())); });
  });
  // The attack runs its time, or until the server holds 2 GiB more than at
  // the start (an unguarded storm grows it by gigabytes a second: the bench
  // must not take the machine down with it).
  const auto started = Clock::now();
  while (ms_since(started) < args.seconds * 1000) {
    if (rss_bytes(server.pid()) > row->rss_start + (int64_t{2} << 30)) {
      row->cut_short = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  row->attack_s = ms_since(started) / 1000;
  normal_stop = true;
  normal.join();
  held.join();
  stop = true;
  for (auto& t : attackers) t.join();
  const auto ended = Clock::now();
  const sgemm::testing::RssRecovery back =
      sgemm::testing::wait_rss_at_most(server.pid(), row->rss_start + row->rss_start / 20);
  row->rss_end = back.rss;
  row->back_s = back.back ? back.after_s : -1;
  {  // the request memory held once the attack's streams are gone (waited for up to 10 s; asked at least once)
    auto watcher = sgemm::Client::connect(server.tcp_address(), normal_options);
    row->held_end = -1;
    for (;;) {
      auto info = watcher->info();
      if (info.ok()) row->held_end = info->host_bytes_in_use;
      if (row->held_end == 0 || ms_since(ended) >= 10000) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  row->survived = server.running() && server.alive();
  row->ops = ctx.ops;
  for (const auto& [status, n] : ctx.statuses)
    row->statuses += (row->statuses.empty() ? "" : "; ") + status + " x" + std::to_string(n);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  CLI::App app{"sgemm-attack-bench: each attack against a real sgemm-server while a normal client is measured"};
  app.add_option("--server-bin", args.server_bin, "the sgemm-server binary")->capture_default_str();
  app.add_option("--backend", args.backend, "the server's --backend")->capture_default_str();
  app.add_option("--seconds", args.seconds, "how long each attack runs")->capture_default_str();
  app.add_option("--attacks", args.attacks, "which attacks (default: all)")->delimiter(',');
  app.add_option("--server-flags", args.server_flags,
                 "more server flags, comma-separated (e.g. --server-flags=--max-resets-per-second,0)")
      ->delimiter(',');
  app.add_flag("--markdown", args.markdown, "print a Markdown table");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help: 0; a bad argument: 2
  }
  std::vector<Attack> chosen;
  for (const Attack& a : all_attacks())
    if (args.attacks.empty() || std::find(args.attacks.begin(), args.attacks.end(), a.name) != args.attacks.end())
      chosen.push_back(a);
  if (chosen.empty()) {
    std::fprintf(stderr, "no such attack; the attacks are:");
    for (const Attack& a : all_attacks()) std::fprintf(stderr, " %s", a.name.c_str());
    std::fprintf(stderr, "\n");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  // A CA and a server certificate for 127.0.0.1, for the TLS attacks.
  char tmpl[] = "/tmp/sgemm-attack-pki-XXXXXX";
  const std::string pki = mkdtemp(tmpl) ? tmpl : "/tmp";
  run("cd '" + pki +
      "' && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -keyout ca.key -out "
      "ca.pem -subj /CN=ca 2>&1 && openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "
      "server.key -out server.csr -subj /CN=server 2>&1 && printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > "
      "server.ext && openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -out "
      "server.pem -extfile server.ext 2>&1");
  bool all_correct = true;
  std::vector<Row> rows;
  for (const Attack& attack : chosen) {
    std::fprintf(stderr, "%s: %s (%.0f s)...\n", attack.name.c_str(), attack.what.c_str(), args.seconds);
    Row row;
    if (!run_attack(args, attack, pki, &row)) {
      all_correct = false;
      continue;
    }
    all_correct =
        all_correct && (!row.not_run.empty() || (row.survived && row.during.failed == 0 && row.during.wrong == 0));
    rows.push_back(row);
  }
  std::error_code ec;
  std::filesystem::remove_all(pki, ec);
  const char* head =
      args.markdown
          ? "| attack | normal requests | p50 ms before | p50 ms | p99 ms | max ms | target | failed | wrong | RSS "
            "MiB before | peak | after | back within 5% | request memory held, peak / after, MiB | attack ops | "
            "attacker saw "
            "|\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
          : "";
  std::printf("%s", head);
  for (const Row& r : rows) {
    if (!r.not_run.empty()) {
      std::printf(args.markdown ? "| %s | not run: %s |||||||||||||||\n" : "%-18s not run: %s\n", r.name.c_str(),
                  r.not_run.c_str());
      continue;
    }
    const auto mib = [](int64_t b) { return double(b) / 1048576.0; };
    char back[32];
    if (r.back_s >= 0)
      std::snprintf(back, sizeof back, "%.2f s", r.back_s);
    else
      std::snprintf(back, sizeof back, "not in 10 s");
    const bool meets = r.during.max() < r.target_ms;
    const std::string held_end = r.held_end < 0 ? "no answer" : std::to_string(r.held_end >> 20);  // MiB
    if (args.markdown) {
      std::printf(
          "| %s | %zu | %.2f | %.2f | %.2f | %.1f | < %.0f ms: %s | %lld | %lld | %.1f | %.1f | %.1f | %s | %.1f / %s "
          "| %lld | %s |\n",
          r.name.c_str(), r.during.count(), r.before.pct(0.5), r.during.pct(0.5), r.during.pct(0.99), r.during.max(),
          r.target_ms, meets ? "yes" : "NO", (long long)r.during.failed, (long long)r.during.wrong, mib(r.rss_start),
          mib(r.rss_peak), mib(r.rss_end), back, mib(r.held_peak), held_end.c_str(), (long long)r.ops,
          r.statuses.c_str());
    } else {
      std::printf(
          "%-18s normal %5zu  p50 %6.2f ms (before %5.2f)  p99 %7.2f ms  max %7.1f ms  target < %.0f ms: %-3s  failed "
          "%lld  wrong %lld  RSS %.1f -> peak %.1f -> %.1f MiB, back within 5%%: %s  held %.1f MiB, %s after  %s  "
          "ops %lld  "
          "attacker saw: %s\n",
          r.name.c_str(), r.during.count(), r.during.pct(0.5), r.before.pct(0.5), r.during.pct(0.99), r.during.max(),
          r.target_ms, meets ? "yes" : "NO", (long long)r.during.failed, (long long)r.during.wrong, mib(r.rss_start),
          mib(r.rss_peak), mib(r.rss_end), back, mib(r.held_peak), held_end.c_str(),
          r.survived ? "server alive" : "SERVER GONE", (long long)r.ops, r.statuses.c_str());
    }
    if (r.cut_short) std::printf("%s: stopped after %.1f s: the server grew by 2 GiB\n", r.name.c_str(), r.attack_s);
    if (r.during.failed) std::fprintf(stderr, "%s: first failure: %s\n", r.name.c_str(), r.during.first_error.c_str());
  }
  return all_correct ? 0 : 1;
}
