// What an operator relies on, end to end (docs/operations.md): a busy port
// is an error naming the port (SO_REUSEPORT only when asked for); the start-up
// log says where the memory budgets came from and GetInfo and /metrics report
// them; the build, device and budget gauges; a request striped over several
// connections counts every byte of C in the summary, the log line,
// timings.jsonl, its trace and sgemm_sent_bytes_total; a kernel speeds file
// is read at start-up, and a bad one stops the server.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "client/sgemm_client.h"
#include "common/reference_gemm.h"
#include "common/timing_record.h"
#include "tests/e2e/metrics_scrape.h"
#include "tests/e2e/server_process.h"

namespace sgemm {
namespace {

using testing::first_key;
using testing::metrics_port;
using testing::samples;
using testing::scrape;
using testing::ServerProcess;
using testing::value;

class OperationsE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerProcess({"--metrics-listen", "127.0.0.1:0", "--host-memory-bytes", "1073741824"});
    ASSERT_TRUE(server_->running()) << server_->log();
  }
  static void TearDownTestSuite() {
    EXPECT_EQ(server_->stop(), 0);
    delete server_;
  }
  void SetUp() override { ASSERT_TRUE(server_->running()) << server_->log(); }
  static ServerProcess* server_;
};
ServerProcess* OperationsE2E::server_ = nullptr;

TEST_F(OperationsE2E, ASecondServerOnABusyPortExitsNonZeroNamingThePort) {
  const std::string busy = server_->tcp_address();
  const std::string port = busy.substr(busy.rfind(':') + 1);
  // A server that did start (sharing the port) is stopped by timeout(1) and fails the test, not hangs it.
  const auto r = testing::run_command("timeout 60 " + testing::server_bin() + " --backend cpu --no-warm-up --listen " +
                                      busy + " 2>&1");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("cannot listen on " + busy), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(port), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--reuse-port"), std::string::npos) << r.output;
  // The first server still answers.
  auto info = Client::connect(busy)->info();
  EXPECT_TRUE(info.ok()) << info.status().to_string();
}

// --kernel-speeds: a file sgemm-bench --speed-table wrote for this host's GPUs is
// read at start-up, added to the built-in rows; a bad one stops the server
// before it listens, naming the file, the line and the field.
TEST(KernelSpeedsE2E, AFileIsAddedAtStartUpAndABadOneStopsTheServerNamingLineAndField) {
  const std::string dir = testing::make_temp_dir();
  const std::string good = dir + "/speeds.csv", bad = dir + "/bad.csv";
  std::ofstream(good) << "# measured on this host\n"
                         "device,sm_count,commit,shape_class,m,n,k,kernel,tflops\n"
                         "Host GPU,84,abc1234,large,4096,4096,4096,cublas,30.5\n"
                         "Host GPU,84,abc1234,large,4096,4096,4096,pingpong,31.5\n";
  std::ofstream(bad) << "device,sm_count,commit,shape_class,m,n,k,kernel,tflops\n"
                        "Host GPU,84,abc1234,large,4096,4096,4096,cublas,30.5\n"
                        "Host GPU,84,abc1234,large,4096,4096,4096,magma,31.5\n";
  {
    ServerProcess server({"--kernel-speeds", good});
    ASSERT_TRUE(server.running()) << server.log();
    EXPECT_TRUE(server.log_has("kernel speeds: ")) << server.log();
    EXPECT_TRUE(server.log_has("the rest from " + good)) << server.log();
    EXPECT_TRUE(Client::connect(server.address())->info().ok());
    EXPECT_EQ(server.stop(), 0);
  }
  const auto r =
      testing::run_command("timeout 60 " + testing::server_bin() +
                           " --backend cpu --no-warm-up --listen 127.0.0.1:0 --kernel-speeds " + bad + " 2>&1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--kernel-speeds " + bad + ": kernel speeds, line 3: kernel 'magma' is not a kernel name"),
            std::string::npos)
      << r.output;
  const auto missing =
      testing::run_command("timeout 60 " + testing::server_bin() +
                           " --backend cpu --listen 127.0.0.1:0 --kernel-speeds " + dir + "/none.csv 2>&1");
  EXPECT_NE(missing.exit_code, 0) << missing.output;
  EXPECT_NE(missing.output.find("--kernel-speeds"), std::string::npos) << missing.output;
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

TEST_F(OperationsE2E, BudgetsAreLoggedAtStartUpAndReported) {
  // --host-memory-bytes given, --region-bytes derived from the memory limit.
  EXPECT_TRUE(server_->log_has("host memory budget 1.00 GiB (--host-memory-bytes)")) << server_->log();
  std::smatch m;
  const std::string log = server_->log();
  ASSERT_TRUE(std::regex_search(log, m, std::regex(R"(memory limit ([0-9.]+) GiB \(([^)]*)\))"))) << log;
  const double limit_gib = std::stod(m[1]);
  EXPECT_GT(limit_gib, 0.0);
  EXPECT_TRUE(m[2] == "physical memory" || std::string(m[2]).rfind("cgroup v", 0) == 0) << m[2];
  EXPECT_TRUE(server_->log_has("(a quarter of the limit)")) << log;

  auto info = Client::connect(server_->address())->info();
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_EQ(info->host_memory_bytes, int64_t{1} << 30);
  EXPECT_GT(info->region_bytes, 0);
  EXPECT_LE(double(info->region_bytes), (limit_gib + 0.005) * 1073741824.0 / 4);  // the log rounds to 0.01 GiB

  const auto g = samples(scrape(metrics_port(*server_)));
  EXPECT_EQ(value(g, "sgemm_host_memory_budget_bytes"), double(int64_t{1} << 30));
  EXPECT_EQ(value(g, "sgemm_region_budget_bytes"), double(info->region_bytes));
  EXPECT_TRUE(g.count("sgemm_region_bytes_in_use"));
  EXPECT_TRUE(g.count("sgemm_regions"));
}

TEST_F(OperationsE2E, BuildDeviceAndResidentGauges) {
  const auto g = samples(scrape(metrics_port(*server_)));
  ASSERT_FALSE(g.empty());
  const std::string build = first_key(g, "sgemm_build_info{");
  ASSERT_FALSE(build.empty());
  EXPECT_NE(build.find("version=\""), std::string::npos) << build;
  EXPECT_NE(build.find("commit=\""), std::string::npos) << build;
  EXPECT_EQ(value(g, build), 1.0);
  auto info = Client::connect(server_->address())->info();
  ASSERT_TRUE(info.ok());
  int healthy = 0, devices = 0;
  for (const auto& [k, v] : g)
    if (k.rfind("sgemm_device_healthy{", 0) == 0) {
      ++devices;
      healthy += v == 1.0;
    }
  EXPECT_EQ(devices, int(info->devices.size()));
  EXPECT_EQ(healthy, devices);
  EXPECT_FALSE(first_key(g, "sgemm_device_memory_bytes{").empty());
  EXPECT_TRUE(g.count("sgemm_resident_budget_bytes"));
  EXPECT_TRUE(g.count("sgemm_resident_matrices"));
  EXPECT_FALSE(first_key(g, "sgemm_resident_bytes_in_use{").empty());
}

TEST_F(OperationsE2E, AStripedRequestCountsEveryByteOfCEverywhere) {
  const int port = metrics_port(*server_);
  const auto before = samples(scrape(port));
  ClientOptions o;
  o.transport = Transport::kGrpc;
  o.connections = 4;
  o.chunk_bytes = 4096;  // small blocks: every stripe has rows of C
  o.retry.max_attempts = 1;
  auto client = Client::connect(server_->tcp_address(), o);
  const GemmShape s{301, 131, 67};
  const int64_t c_bytes = s.m * s.n * 4;  // 157,724
  std::vector<float> a(size_t(s.m * s.k)), b(size_t(s.k * s.n));
  fill_random(a, 41);
  fill_random(b, 42);
  MultiplyOptions opt;
  opt.trace = true;
  auto r = client->multiply(s, a.data(), b.data(), nullptr, opt);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const auto v = verify_gemm(s.m, s.n, s.k, 1.0f, a.data(), b.data(), 0.0f, nullptr, r->c.data(), {});
  EXPECT_TRUE(v.passed(kSgemmTolerance)) << v.max_rel_error;
  ASSERT_EQ(r->summary.stripes, 4);
  EXPECT_EQ(r->bytes_received, c_bytes);
  EXPECT_EQ(r->summary.bytes_out, c_bytes);
  const std::string id = r->summary.request_id;

  // The log line.
  EXPECT_TRUE(server_->log_has("request id=" + id + " ")) << server_->log();
  std::smatch m;
  const std::string log = server_->log();
  ASSERT_TRUE(std::regex_search(log, m, std::regex("request id=" + id + " [^\\n]* bytes_out=(\\d+)"))) << log;
  EXPECT_EQ(std::stoll(m[1]), c_bytes);

  // timings.jsonl.
  std::optional<TimingRecord> rec;
  for (int i = 0; i < 3000 && !rec; ++i) {
    std::ifstream f(server_->dir() + "/logs/timings.jsonl");
    for (std::string line; std::getline(f, line);)
      if (auto t = parse_timing_record(line); t.ok() && t->request_id == id) rec = *t;
    if (!rec) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->bytes_out, c_bytes);
  EXPECT_EQ(rec->bytes_in, (s.m * s.k + s.k * s.n) * 4);

  // The trace's send slice.
  const auto trace = nlohmann::json::parse(r->summary.trace_json);
  int64_t traced = -1;
  for (const auto& e : trace["traceEvents"])
    if (e["name"] == "send") traced = e["args"]["bytes"].get<int64_t>();
  EXPECT_EQ(traced, c_bytes);

  // sgemm_sent_bytes_total.
  const auto after = samples(scrape(port));
  EXPECT_EQ(value(after, "sgemm_sent_bytes_total") - value(before, "sgemm_sent_bytes_total"), double(c_bytes));
  EXPECT_EQ(value(after, "sgemm_received_bytes_total") - value(before, "sgemm_received_bytes_total"),
            double((s.m * s.k + s.k * s.n) * 4));
}

// A server in a memory cgroup (what a container's --memory makes) takes its
// budgets from the cgroup's limit. Needs a writable cgroup v1 memory
// hierarchy (root in a container or on a host with v1); skips otherwise.
TEST(OperationsCgroup, AServerInAMemoryCgroupBudgetsUnderItsLimit) {
  namespace fs = std::filesystem;
  const std::string cg = "/sys/fs/cgroup/memory/sgemm-e2e-" + std::to_string(getpid());
  std::error_code ec;
  if (!fs::create_directory(cg, ec))
    GTEST_SKIP() << "cannot make a memory cgroup (" << cg << ": " << ec.message() << ")";
  const int64_t limit = int64_t{3} << 30;
  std::ofstream(cg + "/memory.limit_in_bytes") << limit;
  struct Remove {  // the cgroup goes whatever the test's outcome, once the kernel has let go of the exited server
    std::string path;
    ~Remove() {
      std::error_code e;
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!fs::remove(path, e) && fs::exists(path) && std::chrono::steady_clock::now() < give_up)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      EXPECT_FALSE(fs::exists(path)) << "cannot remove " << path << ": " << e.message();
    }
  } remove_cgroup{cg};
  // A wrapper moves itself into the cgroup, then becomes the server.
  const std::string dir = testing::make_temp_dir(), wrapper = dir + "/in-cgroup.sh";
  std::ofstream(wrapper) << "#!/bin/sh\necho $$ > " << cg << "/cgroup.procs && exec " << testing::server_bin()
                         << " \"$@\"\n";
  fs::permissions(wrapper, fs::perms::owner_all);
  const std::string real = testing::server_bin();
  setenv("SGEMM_SERVER_BIN", wrapper.c_str(), 1);
  // No pinned pool (4 GiB by default on cuda: page-locked memory counts against the cgroup's limit).
  auto server = std::make_unique<ServerProcess>(std::vector<std::string>{"--pinned-pool-bytes", "0"});
  setenv("SGEMM_SERVER_BIN", real.c_str(), 1);
  ASSERT_TRUE(server->running()) << server->log();
  EXPECT_TRUE(server->log_has("memory limit 3.00 GiB (cgroup v1 " + cg + "/memory.limit_in_bytes)")) << server->log();
  auto info = Client::connect(server->address())->info();
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_EQ(info->host_memory_bytes, limit / 2);
  EXPECT_EQ(info->region_bytes, limit / 4);
  EXPECT_EQ(server->stop(), 0);
  server.reset();
  fs::remove_all(dir, ec);
}

TEST(OperationsLogs, LogFilesRotateBySizeKeepingTheirCount) {
  ServerProcess server({"--log-max-bytes", "4096", "--log-max-files", "2"});
  ASSERT_TRUE(server.running()) << server.log();
  auto client = Client::connect(server.address());
  const GemmShape s{33, 17, 9};
  std::vector<float> a(size_t(s.m * s.k), 1.0f), b(size_t(s.k * s.n), 1.0f);
  const std::string logs = server.dir() + "/logs/";
  // About 0.5 KB of log line and 1 KB of timing record a request: 40 requests rotate each file several times.
  for (int i = 0; i < 40; ++i) {
    auto r = client->multiply(s, a.data(), b.data(), nullptr, {});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
  }
  ASSERT_TRUE(server.log_count_reaches("status=OK", 40, 10000));
  namespace fs = std::filesystem;
  for (const char* f : {"sgemm-server.log", "sgemm-server.1.log", "sgemm-server.2.log", "timings.jsonl",
                        "timings.1.jsonl", "timings.2.jsonl"}) {
    EXPECT_TRUE(fs::exists(logs + f)) << f;
    if (fs::exists(logs + f)) {
      EXPECT_LE(fs::file_size(logs + f), 4096u + 2048u) << f;  // the limit and a line
    }
  }
  EXPECT_FALSE(fs::exists(logs + "sgemm-server.3.log"));
  EXPECT_FALSE(fs::exists(logs + "timings.3.jsonl"));
  // Every line of the kept timings is a whole record.
  std::ifstream t(logs + "timings.1.jsonl");
  int records = 0;
  for (std::string line; std::getline(t, line); ++records) EXPECT_TRUE(parse_timing_record(line).ok()) << line;
  EXPECT_GT(records, 0);
}

// Raw little-endian fp32 files of a product, for the CLI's --a/--b.
void write_raw(const std::string& path, const std::vector<float>& v) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * 4));
}

TEST_F(OperationsE2E, TheCliRefusesToComputeAFilesProductAndThrowItAway) {
  const std::string dir = server_->dir();
  std::vector<float> a(6 * 5), b(5 * 4);
  fill_random(a, 3);
  fill_random(b, 4);
  write_raw(dir + "/a.f32", a);
  write_raw(dir + "/b.f32", b);
  const std::string cli = testing::client_bin() + " submit --server " + server_->tcp_address() + " --a " + dir +
                          "/a.f32 --b " + dir + "/b.f32 --m 6 --n 4 --k 5";
  auto before = Client::connect(server_->address())->info();
  ASSERT_TRUE(before.ok());
  const auto refused = testing::run_command(cli + " 2>&1");
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("--out"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("--discard"), std::string::npos) << refused.output;
  auto after = Client::connect(server_->address())->info();
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->requests_total, before->requests_total) << "nothing is sent before the refusal";
  // Asked for: --discard (timing runs), --verify, or --out.
  for (const char* ok : {" --discard", " --verify", ""}) {
    const std::string out = *ok ? "" : " --out " + dir + "/c.f32";
    const auto r = testing::run_command(cli + ok + out + " 2>&1");
    EXPECT_EQ(r.exit_code, 0) << ok << ": " << r.output;
  }
  std::ifstream c(dir + "/c.f32", std::ios::binary | std::ios::ate);
  EXPECT_EQ(int64_t(c.tellg()), 6 * 4 * 4);
}

TEST_F(OperationsE2E, TheCliShowsProgressOnATerminalOnly) {
  const std::string submit =
      testing::client_bin() + " submit --server " + server_->tcp_address() + " --m 300 --n 200 --k 100 --verify";
  // script(1) gives the CLI a terminal: the progress line is drawn on it (at once, then 5 times a second).
  const auto tty = testing::run_command("script -qfec '" + submit + "' /dev/null");
  if (tty.exit_code == 127 || tty.output.find("not found") != std::string::npos)
    GTEST_SKIP() << "no script(1) here: " << tty.output;
  EXPECT_EQ(tty.exit_code, 0) << tty.output;
  EXPECT_NE(tty.output.find("upload "), std::string::npos) << tty.output;
  EXPECT_NE(tty.output.find(" MB/s"), std::string::npos) << tty.output;
  EXPECT_NE(tty.output.find("PASS"), std::string::npos) << tty.output;
  // Piped, and with --no-progress on a terminal: none.
  const auto piped = testing::run_command(submit + " 2>&1");
  EXPECT_EQ(piped.exit_code, 0) << piped.output;
  EXPECT_EQ(piped.output.find("upload "), std::string::npos) << piped.output;
  const auto quiet = testing::run_command("script -qfec '" + submit + " --no-progress' /dev/null");
  EXPECT_EQ(quiet.exit_code, 0) << quiet.output;
  EXPECT_EQ(quiet.output.find("upload "), std::string::npos) << quiet.output;
}

TEST_F(OperationsE2E, TheCliDocumentsItsExitCodes) {
  const auto help = testing::run_command(testing::client_bin() + " submit --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.output.find("Exit codes: 0 done; 1 --verify"), std::string::npos) << help.output;
  const auto bad = testing::run_command(testing::client_bin() + " submit --no-such-flag 2>&1");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  // A request that cannot reach a server (nothing listens on port 1): 3, naming the gRPC status.
  const auto failed = testing::run_command(testing::client_bin() +
                                           " submit --server 127.0.0.1:1 --size 8 --no-retry --timeout-ms 5000 2>&1");
  EXPECT_EQ(failed.exit_code, 3) << failed.output;
  EXPECT_NE(failed.output.find("UNAVAILABLE"), std::string::npos) << failed.output;
}

}  // namespace
}  // namespace sgemm
