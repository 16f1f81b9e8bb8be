// Observability end to end (docs/observability.md): a request's trace in its
// summary (header.trace), --trace-dir, the timings.jsonl record, the CLI's
// --json and --trace, and the Prometheus endpoint scraped with a plain HTTP GET
// over loopback before and after requests: the counters moved by what the
// requests did.
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
#include "tests/e2e/in_process_server.h"
#include "tests/e2e/metrics_scrape.h"

namespace sgemm {
namespace {

using testing::InProcessServer;
using testing::metrics_port;
using testing::samples;
using testing::scrape;
using testing::value;

struct Inputs {
  GemmShape s;
  std::vector<float> a, b;
};

Inputs inputs(GemmShape s, uint64_t seed) {
  Inputs in{s, std::vector<float>(size_t(s.m * s.k)), std::vector<float>(size_t(s.k * s.n))};
  fill_random(in.a, seed);
  fill_random(in.b, seed + 1);
  return in;
}

class ObservabilityE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    trace_dir_ = testing::make_temp_dir();
    server_ = std::make_unique<InProcessServer>([&](ServerOptions& o, EngineOptions&) {
      o.metrics_listen = "127.0.0.1:0";
      o.service.trace_dir = trace_dir_;
      o.service.limits.max_matrix_elements = 1000000;
    });
    ASSERT_TRUE(server_->running()) << server_->log();
    port_ = metrics_port(*server_);
    ASSERT_GT(port_, 0) << server_->log();
  }
  void TearDown() override {
    server_.reset();
    std::error_code ec;
    std::filesystem::remove_all(trace_dir_, ec);
  }
  std::string trace_dir_;
  std::unique_ptr<InProcessServer> server_;
  int port_ = 0;
};

TEST_F(ObservabilityE2E, MetricsCountRequestsBytesPhasesAndDeviceTime) {
  const auto before = samples(scrape(port_));
  ASSERT_FALSE(before.empty());
  // Gauges are there from the start.
  for (const char* g : {"sgemm_queued_requests", "sgemm_in_flight_requests", "sgemm_open_streams",
                        "sgemm_host_memory_in_use_bytes", "sgemm_host_memory_budget_bytes"})
    EXPECT_TRUE(before.count(g)) << g;
  EXPECT_GT(value(before, "sgemm_host_memory_budget_bytes"), 0.0);

  auto client = Client::connect(server_->address());
  const Inputs in = inputs({301, 67, 129}, 5);
  int64_t listed_launches = 0;
  std::string backend;
  for (int i = 0; i < 2; ++i) {
    auto r = client->multiply(in.s, in.a.data(), in.b.data(), nullptr, {});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    for (const KernelRowResult& k : r->summary.kernel_rows) listed_launches += k.launches;
    backend = r->summary.backend;
    const auto v = verify_gemm(in.s.m, in.s.n, in.s.k, 1.0f, in.a.data(), in.b.data(), 0.0f, nullptr, r->c.data(), {});
    EXPECT_TRUE(v.passed(kSgemmTolerance)) << v.max_rel_error;
  }
  // One refused request: over --max-matrix-elements.
  const Inputs big = inputs({2000, 1, 1000}, 9);
  auto refused = client->multiply(big.s, big.a.data(), big.b.data(), nullptr, {});
  ASSERT_EQ(refused.status().code(), StatusCode::kResourceExhausted) << refused.status().to_string();
  ASSERT_TRUE(server_->log_has("RESOURCE_EXHAUSTED"));

  const auto after = samples(scrape(port_));
  EXPECT_EQ(value(after, R"(sgemm_requests_total{client="",code="OK"})") -
                value(before, R"(sgemm_requests_total{client="",code="OK"})"),
            2.0);
  EXPECT_EQ(value(after, R"(sgemm_requests_total{client="",code="RESOURCE_EXHAUSTED"})") -
                value(before, R"(sgemm_requests_total{client="",code="RESOURCE_EXHAUSTED"})"),
            1.0);
  const double in_bytes = 2.0 * 4 * (in.s.m * in.s.k + in.s.k * in.s.n);
  EXPECT_EQ(value(after, "sgemm_received_bytes_total") - value(before, "sgemm_received_bytes_total"), in_bytes);
  EXPECT_EQ(value(after, "sgemm_sent_bytes_total") - value(before, "sgemm_sent_bytes_total"),
            2.0 * 4 * in.s.m * in.s.n);
  for (const char* phase : {"receive", "queue", "compute", "send", "total"}) {
    const std::string count = std::string("sgemm_request_phase_seconds_count{phase=\"") + phase + "\"}";
    EXPECT_EQ(value(after, count), 2.0) << count;
  }
  EXPECT_GT(value(after, R"(sgemm_request_phase_seconds_sum{phase="total"})"), 0.0);
  // Busy seconds by device and phase: the kernel ran somewhere.
  double kernel_busy = 0;
  for (const auto& [key, v] : after)
    if (key.rfind("sgemm_gpu_busy_seconds_total{", 0) == 0 && key.find("phase=\"kernel\"") != std::string::npos)
      kernel_busy += v;
  EXPECT_GT(kernel_busy, 0.0);
  // Kernel launches by row: the two requests' launches, as their summaries listed them.
  double launched = 0;
  for (const auto& [key, v] : after)
    if (key.rfind("sgemm_kernel_launches_total{", 0) == 0) launched += v - value(before, key);
  EXPECT_EQ(launched, double(listed_launches));
  if (backend == "cpu") {  // 301 rows: two blocks of 256 per request
    EXPECT_EQ(value(after, R"(sgemm_kernel_launches_total{row="openblas"})") -
                  value(before, R"(sgemm_kernel_launches_total{row="openblas"})"),
              4.0);
  }
}

TEST_F(ObservabilityE2E, TraceInSummaryInTraceDirAndTimingRecord) {
  auto client = Client::connect(server_->address());
  const Inputs in = inputs({257, 131, 97}, 11);
  MultiplyOptions opt;
  opt.trace = true;
  auto r = client->multiply(in.s, in.a.data(), in.b.data(), nullptr, opt);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const auto v = verify_gemm(in.s.m, in.s.n, in.s.k, 1.0f, in.a.data(), in.b.data(), 0.0f, nullptr, r->c.data(), {});
  EXPECT_TRUE(v.passed(kSgemmTolerance));

  // The trace: Chrome trace-event JSON with the service's phases and the device's steps.
  ASSERT_FALSE(r->summary.trace_json.empty());
  const auto trace = nlohmann::json::parse(r->summary.trace_json);
  std::map<std::string, int> names;
  std::map<std::string, int64_t> launches;  // kernel slices over rows of C, by the row each names
  int64_t kernel_rows = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    names[e["name"].get<std::string>()]++;
    EXPECT_GE(e["dur"].get<double>(), 0.0);
    if (e["cat"] == "kernel") {
      EXPECT_TRUE(e["args"].contains("bytes"));
      EXPECT_TRUE(e["args"].contains("shard"));
      const std::string rows = e["args"]["rows"];
      const auto dash = rows.find('-');
      const int64_t n_rows = std::stoll(rows.substr(dash + 1)) - std::stoll(rows.substr(0, dash));
      kernel_rows += n_rows;
      if (n_rows > 0) launches[e["name"].get<std::string>()]++;  // rows 0-0: B prepared once, not a product
    }
  }
  for (const char* phase : {"receive", "queue", "compute", "send"}) EXPECT_EQ(names[phase], 1) << phase;
  EXPECT_EQ(kernel_rows, in.s.m);  // the kernels' slices cover every row of C once

  // The summary lists every concrete kernel that ran with its launches: the
  // kernel slices, each named by its own launch's row; `kernel` ran the most.
  ASSERT_FALSE(r->summary.kernel_rows.empty());
  std::map<std::string, int64_t> listed;
  const KernelRowResult* most = &r->summary.kernel_rows[0];
  for (const KernelRowResult& k : r->summary.kernel_rows) {
    EXPECT_TRUE(listed.emplace(k.name, k.launches).second) << k.name << " is listed twice";
    if (k.launches > most->launches) most = &k;
  }
  EXPECT_EQ(listed, launches);
  EXPECT_EQ(r->summary.kernel, most->name);
  if (r->summary.backend == "cpu") {  // one cblas_sgemm call per 256 rows: 257 rows are 2
    EXPECT_EQ(listed, (std::map<std::string, int64_t>{{"openblas", 2}}));
  }
  EXPECT_EQ(trace["otherData"]["kernel_rows"].size(), r->summary.kernel_rows.size());

  // The same trace in --trace-dir, named by the request id.
  const std::string path = trace_dir_ + "/trace-" + r->summary.request_id + ".json";
  for (int i = 0; i < 3000 && !std::filesystem::exists(path); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::ifstream f(path);
  ASSERT_TRUE(f.good()) << path;
  EXPECT_EQ(nlohmann::json::parse(f)["otherData"]["request_id"], r->summary.request_id);

  // timings.jsonl: one sgemm.timing/1 record, the summary's figures.
  std::ifstream log(server_->dir() + "/logs/timings.jsonl");
  std::string line, last;
  while (std::getline(log, line)) last = line;
  auto rec = parse_timing_record(last);
  ASSERT_TRUE(rec.ok()) << rec.status().to_string() << ": " << last;
  EXPECT_EQ(rec->request_id, r->summary.request_id);
  EXPECT_EQ(rec->kernel, r->summary.kernel);
  ASSERT_EQ(rec->kernel_rows.size(), r->summary.kernel_rows.size());
  for (std::size_t i = 0; i < rec->kernel_rows.size(); ++i) {
    EXPECT_EQ(rec->kernel_rows[i].name, r->summary.kernel_rows[i].name);
    EXPECT_EQ(rec->kernel_rows[i].launches, r->summary.kernel_rows[i].launches);
  }
  EXPECT_EQ(rec->shape.m, in.s.m);
  EXPECT_EQ(rec->bytes_in, 4 * (in.s.m * in.s.k + in.s.k * in.s.n));
  ASSERT_EQ(rec->devices.size(), r->summary.devices.size());
  EXPECT_DOUBLE_EQ(rec->devices[0].kernel_ms, r->summary.devices[0].kernel_ms);
  EXPECT_DOUBLE_EQ(rec->devices[0].copy_in_wait_ms, r->summary.devices[0].copy_in_wait_ms);
  EXPECT_GE(rec->send_ms, 0.0);
  EXPECT_LE(rec->receive_ms + rec->queue_ms + rec->compute_ms, rec->total_ms + 1e-6);
}

TEST_F(ObservabilityE2E, CliJsonIsATimingRecordAndTraceGoesToAFile) {
  const std::string trace = trace_dir_ + "/cli-trace.json";
  auto r = testing::run_command(testing::client_bin() + " submit --server " + server_->address() +
                                " --m 99 --n 45 --k 77 --verify --json --trace " + trace);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto rec = parse_timing_record(r.output.substr(0, r.output.find('\n')));
  ASSERT_TRUE(rec.ok()) << rec.status().to_string() << ": " << r.output;
  ASSERT_TRUE(rec->client.has_value());
  EXPECT_EQ(rec->client->bytes_sent, 4 * (99 * 77 + 77 * 45));
  EXPECT_EQ(rec->bytes_in, rec->client->bytes_sent);  // the server's view and the client's agree
  // The concrete kernels, with their launches (99 rows: one launch on the cpu backend).
  ASSERT_FALSE(rec->kernel_rows.empty());
  if (rec->backend == "cpu") {
    ASSERT_EQ(rec->kernel_rows.size(), 1u);
    EXPECT_EQ(rec->kernel_rows[0].name, "openblas");
    EXPECT_EQ(rec->kernel_rows[0].launches, 1);
  }
  std::ifstream f(trace);
  ASSERT_TRUE(f.good());
  EXPECT_FALSE(nlohmann::json::parse(f)["traceEvents"].empty());

  // The table submit prints names every kernel with its launches.
  auto table = testing::run_command(testing::client_bin() + " submit --server " + server_->address() +
                                    " --m 99 --n 45 --k 77 --verify");
  ASSERT_EQ(table.exit_code, 0) << table.output;
  const std::string line = "kernels: " + rec->kernel_rows[0].name + " x ";
  EXPECT_NE(table.output.find(line), std::string::npos) << table.output;
}

}  // namespace
}  // namespace sgemm
