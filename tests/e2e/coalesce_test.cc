// Coalescing of small requests, end to end (docs/lifecycle.md, "Coalescing"):
// the real server in process (SGEMM_E2E_BACKEND) with --coalesce-max-products
// and a window, many clients on their own connections sending odd small
// shapes at once with alpha, beta, C in and out, op(A) and op(B); every
// result against the fp64 reference; the summary and timings.jsonl say how
// many products shared each launch (and the sgemm_launch_products
// histogram); a request whose deadline passes fails
// alone; bad flag values stop the start naming the flag. That requests which
// wait while the engine is busy share one launch, each with its own status,
// is shown deterministically against a held engine in
// tests/server/service/request_coalescer_test.cc.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <vector>

#include "client/sgemm_client.h"
#include "common/reference_gemm.h"
#include "tests/e2e/in_process_server.h"
#include "tests/e2e/metrics_scrape.h"

namespace sgemm {
namespace {

using testing::InProcessServer;

constexpr auto kDeadline = std::chrono::seconds(60);

const GemmShape kOddShapes[] = {{1, 1, 1}, {17, 33, 29}, {64, 64, 64}, {5, 61, 2}, {31, 7, 19}, {47, 1, 65}};

struct Scalars {
  float alpha, beta;
  bool has_c;
};
constexpr Scalars kScalars[] = {{1.0f, 0.0f, false}, {-1.5f, 0.75f, true}};

// The stored operand (rows x cols, row-major) transposed.
std::vector<float> transposed(const std::vector<float>& x, int64_t rows, int64_t cols) {
  std::vector<float> t(x.size());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) t[std::size_t(j * rows + i)] = x[std::size_t(i * cols + j)];
  return t;
}

// One product with the given ops and scalars; its result checked against the
// fp64 reference. Returns the summary's launch_products, or 0 on a failure
// (recorded as a test failure).
int multiply_and_check(Client& client, const GemmShape& s, Op op_a, Op op_b, const Scalars& sc, uint64_t seed) {
  std::vector<float> a(std::size_t(s.m * s.k)), b(std::size_t(s.k * s.n)), c0(std::size_t(s.m * s.n));
  fill_random(a, seed);
  fill_random(b, seed + 1);
  fill_random(c0, seed + 2);
  // Sent as stored: A k x m under op(A) = T, B n x k under op(B) = T.
  const std::vector<float> a_sent = op_a == Op::kT ? transposed(a, s.m, s.k) : a;
  const std::vector<float> b_sent = op_b == Op::kT ? transposed(b, s.k, s.n) : b;
  MultiplyOptions opt;
  opt.alpha = sc.alpha;
  opt.beta = sc.beta;
  opt.op_a = op_a;
  opt.op_b = op_b;
  auto r = client.multiply(s, a_sent.data(), b_sent.data(), sc.has_c ? c0.data() : nullptr, opt);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  if (!r.ok()) return 0;
  const VerifyResult v =
      verify_gemm(s.m, s.n, s.k, sc.alpha, a.data(), b.data(), sc.beta, sc.has_c ? c0.data() : nullptr, r->c.data());
  EXPECT_TRUE(v.passed(kSgemmTolerance)) << s.m << "x" << s.n << "x" << s.k << " op_a " << op_name(op_a) << " op_b "
                                         << op_name(op_b) << ": max rel error " << v.max_rel_error;
  EXPECT_GE(r->summary.launch_products, 1);
  return v.passed(kSgemmTolerance) ? r->summary.launch_products : 0;
}

class CoalesceE2E : public testing::SuiteServer<CoalesceE2E> {
 public:
  static void configure(ServerOptions& o, EngineOptions&) {
    o.service.log_lines_per_second = 0;
    o.service.max_in_flight = 1;  // one compute slot: requests that arrive while it computes wait together
    o.service.coalesce.max_products = 8;
    o.coalesce_window_us = 20000;  // a burst's requests find each other even on a loaded machine
    o.metrics_listen = "127.0.0.1:0";
  }

 protected:
  void SetUp() override { ASSERT_TRUE(server_->running()) << server_->log(); }
  std::unique_ptr<Client> connect() {
    ClientOptions o;
    o.retry.max_attempts = 1;
    return Client::connect(server_->tcp_address(), o);
  }
};

TEST_F(CoalesceE2E, ManyConcurrentClientsWithOddShapesEachGetTheirOwnCorrectResult) {
  constexpr int kClients = 12, kPerClient = 8;
  std::atomic<int> shared_launches{0}, checked{0};
  std::vector<std::thread> threads;
  const uint64_t base_seed = std::random_device{}();
  for (int t = 0; t < kClients; ++t)
    threads.emplace_back([&, t] {
      auto client = connect();
      for (int i = 0; i < kPerClient; ++i) {
        const GemmShape& s = kOddShapes[(t + i) % std::size(kOddShapes)];
        const Op op_a = (t & 1) ? Op::kT : Op::kN, op_b = (t & 2) ? Op::kT : Op::kN;
        const int products = multiply_and_check(*client, s, op_a, op_b, kScalars[(t / 4) % std::size(kScalars)],
                                                base_seed + uint64_t(t * 1000 + i * 3));
        if (products > 0) ++checked;
        if (products > 1) ++shared_launches;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(checked.load(), kClients * kPerClient);
  // timings.jsonl gives each request's launch_products; those of shared launches match the summaries.
  int in_timings = 0, shared_in_timings = 0;
  std::ifstream timings(server_->dir() + "/logs/timings.jsonl");
  for (std::string line; std::getline(timings, line);) {
    const auto j = nlohmann::json::parse(line);
    ASSERT_TRUE(j.contains("launch_products")) << line;
    ++in_timings;
    if (j["launch_products"].get<int>() > 1) ++shared_in_timings;
  }
  EXPECT_GE(in_timings, kClients * kPerClient);
  EXPECT_GE(shared_in_timings, shared_launches.load());
}

TEST_F(CoalesceE2E, ConcurrentRequestsShareALaunchAndTheSummarySaysSo) {
  // Bursts of requests from clients on their own connections, until one
  // summary reports a launch shared with others (the server coalesces what
  // arrives within the window), or the deadline passes.
  constexpr int kBurst = 6;
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < kBurst; ++i) clients.push_back(connect());
  int best = 0;
  for (const auto give_up = std::chrono::steady_clock::now() + kDeadline;
       best <= 1 && std::chrono::steady_clock::now() < give_up;) {
    std::vector<int> products(kBurst);
    std::vector<std::thread> threads;
    for (int i = 0; i < kBurst; ++i)
      threads.emplace_back([&, i] {
        products[std::size_t(i)] =
            multiply_and_check(*clients[std::size_t(i)], {16, 16, 16}, Op::kN, Op::kN, kScalars[0], 77 + uint64_t(i));
      });
    for (auto& th : threads) th.join();
    for (int p : products) best = std::max(best, p);
    if (::testing::Test::HasFailure()) return;
  }
  EXPECT_GT(best, 1) << "no launch was shared within " << kDeadline.count() << " s";
  EXPECT_LE(best, 8) << "--coalesce-max-products bounds a launch";
  // The histogram of products per launch saw that launch: more products than launches.
  const auto m = testing::samples(testing::scrape(server_->server().metrics_port()));
  EXPECT_GE(testing::value(m, "sgemm_launch_products_count"), 1.0);
  EXPECT_GT(testing::value(m, "sgemm_launch_products_sum"), testing::value(m, "sgemm_launch_products_count"));
  // Kernel launches are counted once per launch, not once per request that
  // shared it: on the cpu backend every 16x16x16 product is one cblas_sgemm
  // call, alone or in a group, so the launches are the requests.
  const std::string openblas = R"(sgemm_kernel_launches_total{row="openblas"})";
  if (m.count(openblas)) {
    EXPECT_EQ(testing::value(m, openblas), testing::value(m, R"(sgemm_requests_total{client="",code="OK"})"));
  }
}

TEST_F(CoalesceE2E, ARequestWhoseDeadlinePassesFailsAloneAmongOthers) {
  constexpr int kBurst = 6;
  std::vector<Status> statuses(kBurst);
  std::vector<std::thread> threads;
  for (int i = 0; i < kBurst; ++i)
    threads.emplace_back([&, i] {
      auto client = connect();
      if (i == 2) {
        // Its deadline passes while it waits out the window (or sooner): DEADLINE_EXCEEDED, for it alone.
        const GemmShape s{9, 9, 9};
        std::vector<float> a(81, 1.0f), b(81, 1.0f);
        MultiplyOptions opt;
        opt.timeout = std::chrono::milliseconds(1);
        auto r = client->multiply(s, a.data(), b.data(), nullptr, opt);
        statuses[std::size_t(i)] = r.status();
        return;
      }
      statuses[std::size_t(i)] =
          multiply_and_check(*client, {13, 11, 7}, Op::kN, Op::kT, kScalars[1], 500 + uint64_t(i)) > 0
              ? Status::Ok()
              : Internal("wrong or failed");
    });
  for (auto& th : threads) th.join();
  for (int i = 0; i < kBurst; ++i) {
    if (i == 2)
      EXPECT_TRUE(statuses[std::size_t(i)].ok() || statuses[std::size_t(i)].code() == StatusCode::kDeadlineExceeded)
          << statuses[std::size_t(i)].to_string();
    else
      EXPECT_TRUE(statuses[std::size_t(i)].ok()) << i << ": " << statuses[std::size_t(i)].to_string();
  }
}

TEST(CoalesceFlags, BadValuesStopTheStartNamingTheFlag) {
  struct Case {
    std::function<void(ServerOptions&)> set;
    std::string flag;
  };
  const Case cases[] = {
      {[](ServerOptions& o) { o.service.coalesce.max_products = 0; }, "--coalesce-max-products"},
      {[](ServerOptions& o) { o.service.coalesce.max_products = 1 << 20; }, "--coalesce-max-products"},
      {[](ServerOptions& o) { o.coalesce_window_us = -1; }, "--coalesce-window-us"},
      {[](ServerOptions& o) { o.coalesce_window_us = 10'000'000; }, "--coalesce-window-us"},
      {[](ServerOptions& o) { o.service.coalesce.max_bytes = 0; }, "--coalesce-max-bytes"},
  };
  for (const Case& c : cases) {
    InProcessServer srv([&](ServerOptions& o, EngineOptions&) { c.set(o); });
    EXPECT_FALSE(srv.running()) << c.flag;
    EXPECT_EQ(srv.start_status().code(), StatusCode::kInvalidArgument) << srv.start_status().to_string();
    EXPECT_NE(srv.start_status().message().find(c.flag), std::string::npos) << srv.start_status().to_string();
  }
}

}  // namespace
}  // namespace sgemm
