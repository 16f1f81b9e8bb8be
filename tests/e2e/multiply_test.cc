// End to end: the real server binary, the real client library, results
// checked against an fp64 reference on fresh random inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <thread>

#include "client/sgemm_client.h"
#include "common/reference_gemm.h"
#include "tests/e2e/in_process_server.h"

namespace sgemm {
namespace {

using testing::InProcessServer;

uint64_t fresh_seed() { return (uint64_t(std::random_device{}()) << 32) | std::random_device{}(); }

struct Case {
  GemmShape shape;
  float alpha, beta;
  bool with_c;
};

void multiply_and_verify(Client& client, const Case& c, const MultiplyOptions& base = {}) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("shape " + std::to_string(c.shape.m) + "x" + std::to_string(c.shape.n) + "x" +
               std::to_string(c.shape.k) + " alpha " + std::to_string(c.alpha) + " beta " + std::to_string(c.beta) +
               " seed " + std::to_string(seed));
  const GemmShape s = c.shape;
  std::vector<float> a(s.m * s.k), b(s.k * s.n), c0;
  fill_random(a, seed);
  fill_random(b, seed + 1);
  if (c.with_c) {
    c0.resize(s.m * s.n);
    fill_random(c0, seed + 2);
  }
  MultiplyOptions opt = base;
  opt.alpha = c.alpha;
  opt.beta = c.beta;
  auto r = client.multiply(s, a.data(), b.data(), c.with_c ? c0.data() : nullptr, opt);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(int64_t(r->c.size()), s.m * s.n);
  const auto rows = rows_to_verify(s.m, s.n, s.k, seed);
  auto v = verify_gemm(s.m, s.n, s.k, c.alpha, a.data(), b.data(), c.beta, c.with_c ? c0.data() : nullptr, r->c.data(),
                       rows);
  EXPECT_TRUE(v.passed(kSgemmTolerance)) << "max rel error " << v.max_rel_error << " at (" << v.worst_row << ", "
                                         << v.worst_col << ")";
  EXPECT_FALSE(r->summary.devices.empty());
  EXPECT_EQ(r->bytes_received, s.m * s.n * 4);
  EXPECT_EQ(r->bytes_sent, (s.m * s.k + s.k * s.n + (c.with_c ? s.m * s.n : 0)) * 4);
  // The devices' shards cover every row of C.
  int64_t rows_covered = 0;
  for (const auto& d : r->summary.devices)
    if (d.k_begin == 0) rows_covered += d.row_end - d.row_begin;
  EXPECT_EQ(rows_covered, s.m);
}

// One product on fresh random inputs, every element checked against fp64;
// false (and the reason reported) when it failed or was wrong. For tests that
// run many clients at once and count failures.
bool product_is_right(Client& client, const GemmShape& s, float alpha, float beta, bool with_c) {
  const uint64_t seed = fresh_seed();
  std::vector<float> a(s.m * s.k), b(s.k * s.n), c0(s.m * s.n);
  fill_random(a, seed);
  fill_random(b, seed + 1);
  fill_random(c0, seed + 2);
  MultiplyOptions o;
  o.alpha = alpha;
  o.beta = beta;
  auto r = client.multiply(s, a.data(), b.data(), with_c ? c0.data() : nullptr, o);
  if (!r.ok()) {
    ADD_FAILURE() << r.status().to_string();
    return false;
  }
  const auto v = verify_gemm(s.m, s.n, s.k, alpha, a.data(), b.data(), beta, with_c ? c0.data() : nullptr, r->c.data());
  if (!v.passed(kSgemmTolerance)) {
    ADD_FAILURE() << s.m << "x" << s.n << "x" << s.k << " seed " << seed << ": max rel error " << v.max_rel_error;
    return false;
  }
  return true;
}

class MultiplyE2E : public testing::SuiteServer<MultiplyE2E> {};

TEST_F(MultiplyE2E, OddAndRoundShapesAgainstFp64Reference) {
  auto client = Client::connect(server_->address());
  for (GemmShape s : {GemmShape{1, 1, 1}, GemmShape{17, 33, 65}, GemmShape{1000, 1, 1000}, GemmShape{513, 1025, 257},
                      GemmShape{1, 1000, 1}, GemmShape{64, 64, 64}}) {
    multiply_and_verify(*client, {s, 1.0f, 0.0f, false});
  }
}

TEST_F(MultiplyE2E, LargeProductTravelsInManyChunks) {
  ClientOptions opt;
  opt.chunk_bytes = 1 << 20;  // A and B are 16 MiB each: 16 chunks apiece, C comes back in 16
  auto client = Client::connect(server_->address(), opt);
  std::atomic<int64_t> chunks{0};  // 48 MiB of payload: several connections, on_chunk on several threads
  MultiplyOptions mopt;
  mopt.on_chunk = [&](int64_t, int64_t) { ++chunks; };
  multiply_and_verify(*client, {{2048, 2048, 2048}, 1.0f, 0.0f, false}, mopt);
  EXPECT_GE(chunks.load(), 16);
}

TEST_F(MultiplyE2E, AlphaBetaVariantsWithAndWithoutC) {
  auto client = Client::connect(server_->address());
  const GemmShape s{129, 77, 301};
  multiply_and_verify(*client, {s, 2.5f, 0.0f, false});
  multiply_and_verify(*client, {s, -1.0f, 0.0f, true});  // C given, beta 0: C is ignored
  multiply_and_verify(*client, {s, 1.0f, 1.0f, true});
  multiply_and_verify(*client, {s, 0.5f, -2.0f, true});
  multiply_and_verify(*client, {s, 0.0f, 3.0f, true});  // alpha 0: C = beta*C
  multiply_and_verify(*client, {{513, 1025, 257}, 1.5f, 0.25f, true});
}

// The client sends B (and C) first, then A, from the caller's memory, and
// can write C into the caller's buffer (MultiplyOptions::c_out).
TEST_F(MultiplyE2E, OddShapesIntoTheCallersOutputBuffer) {
  auto client = Client::connect(server_->address());
  for (const GemmShape s : {GemmShape{1, 1, 1}, GemmShape{777, 301, 129}, GemmShape{1025, 3, 2049}}) {
    const uint64_t seed = fresh_seed();
    std::vector<float> a(s.m * s.k), b(s.k * s.n), c0(s.m * s.n), out(s.m * s.n, -1.0f);
    fill_random(a, seed);
    fill_random(b, seed + 1);
    fill_random(c0, seed + 2);
    MultiplyOptions opt;
    opt.alpha = 0.75f;
    opt.beta = -1.5f;
    opt.c_out = out.data();
    auto r = client->multiply(s, a.data(), b.data(), c0.data(), opt);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_TRUE(r->c.empty());
    auto v = verify_gemm(s.m, s.n, s.k, 0.75f, a.data(), b.data(), -1.5f, c0.data(), out.data(),
                         rows_to_verify(s.m, s.n, s.k, seed));
    EXPECT_TRUE(v.passed(kSgemmTolerance)) << s.m << "x" << s.n << "x" << s.k << ": " << v.max_rel_error;
  }
}

TEST_F(MultiplyE2E, SmallChunksFromTheClientStillAssemble) {
  ClientOptions opt;
  opt.chunk_bytes = 4 * 37;  // chunks that straddle rows
  auto client = Client::connect(server_->address(), opt);
  multiply_and_verify(*client, {{45, 23, 31}, 1.0f, 0.5f, true});
}

TEST_F(MultiplyE2E, NanAndInfInInputsPropagateAsData) {
  auto client = Client::connect(server_->address());
  const GemmShape s{8, 8, 8};
  std::vector<float> a(64), b(64);
  fill_random(a, fresh_seed());
  fill_random(b, fresh_seed());
  a[2 * 8 + 3] = std::numeric_limits<float>::quiet_NaN();  // row 2 of C becomes NaN
  auto r = client->multiply(s, a.data(), b.data(), nullptr, {});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  for (int j = 0; j < 8; ++j) EXPECT_TRUE(std::isnan(r->c[2 * 8 + j]));
  auto v = verify_gemm(8, 8, 8, 1, a.data(), b.data(), 0, nullptr, r->c.data());
  EXPECT_TRUE(v.passed(kSgemmTolerance)) << v.max_rel_error;
}

TEST_F(MultiplyE2E, EightClientsAtOnceAllCorrect) {
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      auto client = Client::connect(server_->address());
      const GemmShape s{100 + 37 * t, 90 + 11 * t, 200 + 53 * t};
      for (int rep = 0; rep < 3; ++rep)
        if (!product_is_right(*client, s, 1.25f, 0.75f, /*with_c=*/true)) ++failures;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  auto client = Client::connect(server_->address());
  testing::expect_released(*client, "request buffers leaked");
}

// --inline-compute-ms (docs/lifecycle.md): products the engine estimates as
// quick compute on the gRPC thread that read their last message. With a limit
// no product exceeds, whatever slot is idle is taken that way: concurrent
// clients on both client drivers, odd shapes, C in and out, all against fp64.
TEST(MultiplyInlineE2E, QuickProductsComputedOnTheReadingThreadAreRightUnderConcurrency) {
  InProcessServer server([](ServerOptions& o, EngineOptions&) {
    o.service.inline_compute_ms = 100000;
    o.service.max_in_flight = 2;
  });
  ASSERT_TRUE(server.running()) << server.log();
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      ClientOptions co;
      co.caller_thread_calls = t % 2 == 0;
      auto client = Client::connect(server.address(), co);
      for (int rep = 0; rep < 4; ++rep) {
        const GemmShape s{1 + 31 * t + rep, 67 + 13 * t, 45 + 29 * rep};
        const bool with_c = rep % 2 == 1;
        if (!product_is_right(*client, s, 0.5f, with_c ? 2.0f : 0.0f, with_c)) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  auto client = Client::connect(server.address());
  testing::expect_released(*client, "request buffers leaked");
  EXPECT_EQ(server.stop(), 0) << server.log();
}

TEST_F(MultiplyE2E, InfoReportsDevicesKernelsLimitsAndHealth) {
  auto client = Client::connect(server_->address());
  auto info = client->info();
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_FALSE(info->version.empty());
  EXPECT_FALSE(info->devices.empty());
  EXPECT_FALSE(info->kernels.empty());
  EXPECT_GT(info->max_matrix_elements, 0);
  auto serving = client->serving();
  ASSERT_TRUE(serving.ok()) << serving.status().to_string();
  EXPECT_TRUE(*serving);
  // Probes that name the service get an answer too; unknown names NOT_FOUND.
  auto by_name = client->serving("sgemm.v1.Sgemm");
  ASSERT_TRUE(by_name.ok()) << by_name.status().to_string();
  EXPECT_TRUE(*by_name);
  auto unknown = client->serving("no.such.Service");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(int(unknown.status().code()), 5) << unknown.status().to_string();  // NOT_FOUND
  EXPECT_GT(info->host_memory_bytes, 0);
}

// Every precision the server offers runs and reports itself; tf32 is held to
// its documented accuracy, fp32x3 (and the cpu backend, which computes fp32
// for every precision and says so) to fp32's.
TEST_F(MultiplyE2E, PrecisionsRunAndReportWhatRan) {
  auto client = Client::connect(server_->address());
  auto info = client->info();
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  ASSERT_FALSE(info->precisions.empty());
  EXPECT_EQ(info->precisions.front(), "fp32");
  for (Precision p : {Precision::kFp32, Precision::kTf32, Precision::kFp32x3}) {
    const std::string name(precision_name(p));
    SCOPED_TRACE(name);
    const bool offered = std::find(info->precisions.begin(), info->precisions.end(), name) != info->precisions.end();
    const GemmShape s{257, 131, 1029};
    std::vector<float> a(s.m * s.k), b(s.k * s.n), c0(s.m * s.n);
    const uint64_t seed = fresh_seed();
    fill_random(a, seed);
    fill_random(b, seed + 1);
    fill_random(c0, seed + 2);
    MultiplyOptions opt;
    opt.precision = p;
    opt.alpha = 0.5f;
    opt.beta = 2.0f;
    auto r = client->multiply(s, a.data(), b.data(), c0.data(), opt);
    if (!offered && info->backend == "cuda") {  // GPUs without it (fp32x3 needs sm_90): refused, named
      EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status().to_string();
      continue;
    }
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    const auto v = verify_gemm(s.m, s.n, s.k, 0.5f, a.data(), b.data(), 2.0f, c0.data(), r->c.data(), {});
    const bool tf32_ran = r->summary.precision == "tf32";
    EXPECT_TRUE(v.passed(tf32_ran ? 1e-2 : kSgemmTolerance)) << v.max_rel_error;
    if (offered) {
      EXPECT_EQ(r->summary.precision, name);
    } else {  // the cpu backend: fp32 for every precision, and the summary says so
      EXPECT_EQ(r->summary.precision, "fp32");
      EXPECT_NE(r->summary.plan_reason.find("computes fp32"), std::string::npos) << r->summary.plan_reason;
    }
  }
}

TEST_F(MultiplyE2E, TimingLogHasOneJsonLinePerRequest) {
  auto client = Client::connect(server_->address());
  multiply_and_verify(*client, {{31, 29, 23}, 1.0f, 0.0f, false});
  std::ifstream f(server_->dir() + "/logs/timings.jsonl");
  std::string line, last;
  while (std::getline(f, line)) last = line;
  EXPECT_NE(last.find("\"devices\":[{"), std::string::npos) << last;
  EXPECT_NE(last.find("\"kernel_ms\""), std::string::npos) << last;
  EXPECT_NE(last.find("\"m\":31"), std::string::npos) << last;
}

}  // namespace
}  // namespace sgemm
