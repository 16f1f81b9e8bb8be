// RequestCoalescer against an engine the test holds busy: requests that wait
// while it computes go together in one group launch, each with its own
// result and status, checked against the fp64 reference.
#include "server/service/request_coalescer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <random>
#include <vector>

#include "tests/server/engine/fake_engine_base.h"

namespace sgemm {
namespace {

constexpr auto kDeadline = std::chrono::seconds(30);

// Element (i, p) of op(A) and (p, j) of op(B) for operands stored as `op` says.
double op_a(const GemmRequest& r, const float* a, int64_t i, int64_t p) {
  return r.op_a == Op::kT ? a[p * r.shape.m + i] : a[i * r.shape.k + p];
}
double op_b(const GemmRequest& r, const float* b, int64_t p, int64_t j) {
  return r.op_b == Op::kT ? b[j * r.shape.k + p] : b[p * r.shape.n + j];
}

// Computes each product naively in fp32. While closed, a run waits at the
// gate (the test holds the engine busy); it can fail a whole group or one
// product of it.
class GatedEngine final : public testing::FakeEngineBase {
 public:
  EngineInfo info() const override {
    EngineInfo info;
    info.backend = "fake";
    return info;
  }
  HostAllocator& host_allocator() override { return alloc_; }
  Status validate(const GemmRequest& r) const override {
    if (r.batch && refuse_groups_) return InvalidArgument("no groups on this engine (fake)");
    return r.batch ? check_batch_request(r) : check_gemm_request(r);
  }
  StatusOr<GemmReport> run(const GemmJob& job) override {
    {
      std::unique_lock lock(mu_);
      ++entered_;
      launches_.push_back(job.request.batch ? int(job.request.batch->count()) : 1);
      cv_.notify_all();
      if (!cv_.wait_for(lock, kDeadline, [&] { return open_; })) return Internal("the test never opened the gate");
      if (job.request.batch && fail_groups_) return Internal("group launch failed (fake)");
    }
    GemmReport report;
    report.backend = "fake";
    if (!job.request.batch) {
      multiply(job.request, job.a, job.b, job.c);
      if (job.sink) job.sink->rows_ready(0, job.request.shape.m);
      return report;
    }
    const BatchSpec& spec = *job.request.batch;
    for (std::size_t i = 0; i < spec.products.size(); ++i) {
      const BatchProduct& p = spec.products[i];
      if (int(i) == fail_product_) {
        report.product_status.push_back(InvalidArgument("product " + std::to_string(i) + " refused (fake)"));
        continue;
      }
      GemmRequest one = job.request;
      one.shape = p.shape;
      multiply(one, job.a + p.a_offset, job.b + p.b_offset, job.c + p.c_offset);
      report.product_status.push_back(Status::Ok());
    }
    return report;
  }

  void close() {
    std::lock_guard lock(mu_);
    open_ = false;
  }
  void open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  bool wait_entered(int runs) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, kDeadline, [&] { return entered_ >= runs; });
  }
  std::vector<int> launches() const {
    std::lock_guard lock(mu_);
    return launches_;
  }
  bool fail_groups_ = false;    // set before the runs
  bool refuse_groups_ = false;  // set before the runs
  int fail_product_ = -1;       // set before the runs

 private:
  static void multiply(const GemmRequest& r, const float* a, const float* b, float* c) {
    const GemmShape& s = r.shape;
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t j = 0; j < s.n; ++j) {
        float acc = 0;
        for (int64_t p = 0; p < s.k; ++p) acc += float(op_a(r, a, i, p) * op_b(r, b, p, j));
        c[i * s.n + j] = r.alpha * acc + (r.has_c ? r.beta * c[i * s.n + j] : 0.0f);
      }
  }
  AlignedHostAllocator alloc_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;
  int entered_ = 0;
  std::vector<int> launches_;
};

// One small request: its operands, its C, and what the coalescer answered.
class TestRequest final : public CoalescedRequest {
 public:
  TestRequest(GemmShape shape, float alpha, float beta, bool has_c, Op a_op, Op b_op, uint32_t seed) {
    job_.request.shape = shape;
    job_.request.alpha = alpha;
    job_.request.beta = beta;
    job_.request.has_c = has_c;
    job_.request.op_a = a_op;
    job_.request.op_b = b_op;
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-1, 1);
    a_.resize(std::size_t(shape.m * shape.k));
    b_.resize(std::size_t(shape.k * shape.n));
    c_.resize(std::size_t(shape.m * shape.n));
    for (auto* v : {&a_, &b_, &c_})
      for (float& x : *v) x = dist(rng);
    c_in_ = c_;
    job_.a = a_.data();
    job_.b = b_.data();
    job_.c = c_.data();
    job_.cancel = &cancel_;
  }
  const GemmJob& coalesced_job() const override { return job_; }
  void coalesced_started() override {}
  void coalesced_done(StatusOr<GemmReport> result, int launch_products) override {
    std::lock_guard lock(mu_);
    status_ = result.status();
    launch_products_ = launch_products;
    done_ = true;
    cv_.notify_all();
  }
  bool wait_done() {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, kDeadline, [&] { return done_; });
  }
  // The largest error of C against the fp64 reference, relative to the largest reference element.
  double error() const {
    const GemmRequest& r = job_.request;
    double worst = 0, scale = 1e-30;
    for (int64_t i = 0; i < r.shape.m; ++i)
      for (int64_t j = 0; j < r.shape.n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < r.shape.k; ++p) acc += op_a(r, a_.data(), i, p) * op_b(r, b_.data(), p, j);
        const std::size_t at = std::size_t(i * r.shape.n + j);
        const double want = r.alpha * acc + (r.has_c ? double(r.beta) * c_in_[at] : 0.0);
        worst = std::max(worst, std::abs(want - c_[at]));
        scale = std::max(scale, std::abs(want));
      }
    return worst / scale;
  }
  Status status() const {
    std::lock_guard lock(mu_);
    return status_;
  }
  int launch_products() const {
    std::lock_guard lock(mu_);
    return launch_products_;
  }
  CancelToken& cancel() { return cancel_; }

 private:
  std::vector<float> a_, b_, c_, c_in_;
  GemmJob job_;
  CancelToken cancel_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  Status status_ = Internal("not answered");
  int launch_products_ = 0;
};

struct Fixture {
  explicit Fixture(CoalesceOptions o)
      : coalescer(engine, o, 64, nullptr, [this](const std::string&) { ++warnings; }), pool(1, 64) {}
  // Submits `r` and expects it queued (never on the test's own thread).
  void submit(TestRequest& r) {
    auto start = coalescer.submit(&r, pool, /*may_run_here=*/false);
    ASSERT_TRUE(start.ok()) << start.status().to_string();
    EXPECT_EQ(*start, RequestCoalescer::Start::kQueued);
  }
  // Holds the engine busy with a lone request, so what is submitted next waits.
  void hold_busy(TestRequest& first) {
    engine.close();
    submit(first);
    ASSERT_TRUE(engine.wait_entered(1));
  }
  GatedEngine engine;
  std::atomic<int> warnings{0};  // lines the coalescer logged
  RequestCoalescer coalescer;
  ComputePool pool;  // after the coalescer: its destructor runs the queued launches
};

CoalesceOptions options(int max_products, std::chrono::microseconds window = std::chrono::microseconds(0)) {
  CoalesceOptions o;
  o.max_products = max_products;
  o.window = window;
  return o;
}

TEST(RequestCoalescer, RequestsThatWaitWhileTheEngineIsBusyShareOneGroupLaunchEachWithItsOwnResult) {
  Fixture f(options(16));
  TestRequest first({9, 7, 5}, 1.5f, 0.5f, true, Op::kT, Op::kN, 1);
  f.hold_busy(first);
  // Odd shapes, both op(A) and op(B) transposed, alpha, beta and C in and out.
  const GemmShape shapes[] = {{1, 1, 1}, {17, 33, 29}, {64, 3, 65}, {5, 61, 2}, {31, 31, 31}};
  std::vector<std::unique_ptr<TestRequest>> waiting;
  for (int i = 0; i < 5; ++i) {
    waiting.push_back(std::make_unique<TestRequest>(shapes[i], 1.5f, 0.5f, true, Op::kT, Op::kT, 10 + i));
    f.submit(*waiting.back());
  }
  EXPECT_EQ(f.coalescer.waiting(), 5);
  f.engine.open();
  ASSERT_TRUE(first.wait_done());
  EXPECT_TRUE(first.status().ok()) << first.status().to_string();
  EXPECT_EQ(first.launch_products(), 1);
  EXPECT_LT(first.error(), 1e-5);
  for (auto& r : waiting) {
    ASSERT_TRUE(r->wait_done());
    EXPECT_TRUE(r->status().ok()) << r->status().to_string();
    EXPECT_EQ(r->launch_products(), 5);
    EXPECT_LT(r->error(), 1e-5) << r->coalesced_job().request.shape.m;
  }
  EXPECT_EQ(f.engine.launches(), (std::vector<int>{1, 5}));
}

TEST(RequestCoalescer, OnlyRequestsOfTheSameArithmeticShareALaunchAndTheLargestBatchIsKept) {
  Fixture f(options(2));
  TestRequest first({4, 4, 4}, 1.0f, 0.0f, false, Op::kN, Op::kN, 1);
  f.hold_busy(first);
  TestRequest x1({3, 5, 7}, 1.0f, 0.0f, false, Op::kN, Op::kN, 2);
  TestRequest other({3, 5, 7}, 2.0f, 0.0f, false, Op::kN, Op::kN, 3);  // another alpha: another launch
  TestRequest x2({6, 2, 9}, 1.0f, 0.0f, false, Op::kN, Op::kN, 4);
  TestRequest x3({2, 2, 2}, 1.0f, 0.0f, false, Op::kN, Op::kN, 5);  // past the largest batch of 2
  for (TestRequest* r : {&x1, &other, &x2, &x3}) f.submit(*r);
  f.engine.open();
  for (TestRequest* r : {&first, &x1, &other, &x2, &x3}) {
    ASSERT_TRUE(r->wait_done());
    EXPECT_TRUE(r->status().ok()) << r->status().to_string();
    EXPECT_LT(r->error(), 1e-5);
  }
  EXPECT_EQ(x1.launch_products(), 2);
  EXPECT_EQ(x2.launch_products(), 2);
  EXPECT_EQ(other.launch_products(), 1);
  EXPECT_EQ(x3.launch_products(), 1);
}

TEST(RequestCoalescer, ACancelledRequestAndAFailedProductFailAloneInsideACoalescedLaunch) {
  Fixture f(options(16));
  f.engine.fail_product_ = 1;  // the group's second product (the first launch is a single product)
  TestRequest first({4, 4, 4}, 1.0f, 0.0f, false, Op::kN, Op::kN, 1);
  f.hold_busy(first);
  std::vector<std::unique_ptr<TestRequest>> waiting;
  for (int i = 0; i < 5; ++i) {
    waiting.push_back(std::make_unique<TestRequest>(GemmShape{7 + i, 5, 3}, 1.0f, 0.0f, false, Op::kN, Op::kN, i));
    f.submit(*waiting.back());
  }
  waiting[3]->cancel().cancel(Cancelled("the client cancelled (test)"));
  f.engine.open();
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(waiting[i]->wait_done());
    if (i == 3) {
      EXPECT_EQ(waiting[i]->status().code(), StatusCode::kCancelled);
    } else if (i == 1) {
      EXPECT_EQ(waiting[i]->status().code(), StatusCode::kInvalidArgument) << waiting[i]->status().to_string();
    } else {
      EXPECT_TRUE(waiting[i]->status().ok()) << i << ": " << waiting[i]->status().to_string();
      EXPECT_EQ(waiting[i]->launch_products(), 4) << "the cancelled request computes nothing";
      EXPECT_LT(waiting[i]->error(), 1e-5);
    }
  }
}

// Two requests wait behind a busy engine that will not run them as a group:
// each still gets its own correct result, from a launch of its own.
void expect_two_waiting_run_alone(Fixture& f) {
  TestRequest first({4, 4, 4}, 1.0f, 0.0f, false, Op::kN, Op::kN, 1);
  f.hold_busy(first);
  TestRequest x1({3, 5, 7}, 1.0f, 0.0f, false, Op::kN, Op::kN, 2), x2({6, 2, 9}, 1.0f, 0.0f, false, Op::kN, Op::kN, 3);
  f.submit(x1);
  f.submit(x2);
  f.engine.open();
  for (TestRequest* r : {&first, &x1, &x2}) {
    ASSERT_TRUE(r->wait_done());
    EXPECT_TRUE(r->status().ok()) << r->status().to_string();
    EXPECT_EQ(r->launch_products(), 1);
    EXPECT_LT(r->error(), 1e-5);
  }
}

TEST(RequestCoalescer, WhenTheGroupLaunchFailsEachRequestRunsAgainAlone) {
  Fixture f(options(16));
  f.engine.fail_groups_ = true;
  expect_two_waiting_run_alone(f);
  EXPECT_EQ(f.engine.launches(), (std::vector<int>{1, 2, 1, 1}));
  EXPECT_EQ(f.warnings.load(), 1) << "a failed group launch is logged";
}

TEST(RequestCoalescer, AGroupTheEngineWouldRefuseRunsAloneWithoutAWarning) {
  Fixture f(options(16));
  f.engine.refuse_groups_ = true;
  expect_two_waiting_run_alone(f);
  EXPECT_EQ(f.engine.launches(), (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(f.warnings.load(), 0);
}

TEST(RequestCoalescer, TheWindowWaitsForMoreAtMostItsLengthAndAFullBatchGoesAtOnce) {
  {
    // A lone request on an idle engine waits out the window for company, then runs alone.
    const auto window = std::chrono::milliseconds(50);
    Fixture f(options(4, window));
    TestRequest lone({5, 5, 5}, 1.0f, 0.0f, false, Op::kN, Op::kN, 1);
    const auto t0 = std::chrono::steady_clock::now();
    f.submit(lone);
    ASSERT_TRUE(lone.wait_done());
    EXPECT_GE(std::chrono::steady_clock::now() - t0, window);
    EXPECT_EQ(lone.launch_products(), 1);
    EXPECT_TRUE(lone.status().ok());
  }
  {
    // The longest window: a launch that finds the largest batch waiting takes it without waiting.
    Fixture f(options(3, CoalesceOptions::kMaxWindow));
    TestRequest first({4, 4, 4}, 1.0f, 0.0f, false, Op::kN, Op::kN, 9);
    f.hold_busy(first);  // alone: it waited out the window first
    std::vector<std::unique_ptr<TestRequest>> rs;
    for (int i = 0; i < 3; ++i) {
      rs.push_back(std::make_unique<TestRequest>(GemmShape{3, 4, 5}, 1.0f, 0.0f, false, Op::kN, Op::kN, i));
      f.submit(*rs.back());
    }
    f.engine.open();
    for (auto& r : rs) {
      ASSERT_TRUE(r->wait_done());
      EXPECT_TRUE(r->status().ok());
      EXPECT_EQ(r->launch_products(), 3);
      EXPECT_LT(r->error(), 1e-5);
    }
    EXPECT_EQ(f.engine.launches(), (std::vector<int>{1, 3}));
  }
}

TEST(RequestCoalescer, OnlySmallSingleProductRequestsInHostMemoryAreEligible) {
  GatedEngine engine;
  CoalesceOptions o = options(8);
  o.max_bytes = 3 * 16 * 16 * 4;
  RequestCoalescer on(engine, o, 8, nullptr, nullptr), off(engine, options(1), 8, nullptr, nullptr);
  TestRequest r({16, 16, 16}, 1.0f, 0.0f, false, Op::kN, Op::kN, 1);
  GemmJob job = r.coalesced_job();
  EXPECT_TRUE(on.eligible(job, o.max_bytes));
  EXPECT_FALSE(on.eligible(job, o.max_bytes + 1)) << "past --coalesce-max-bytes";
  EXPECT_FALSE(off.eligible(job, 16)) << "--coalesce-max-products 1: off";
  GemmJob named = job;
  named.request.options.kernel = KernelKind::kOpenblas;
  EXPECT_FALSE(on.eligible(named, 16)) << "a kernel named";
  GemmJob split = job;
  split.request.options.split = SplitMode::kRows;
  EXPECT_FALSE(on.eligible(split, 16)) << "a split named";
  GemmJob strided = job;
  strided.lda = 32;
  EXPECT_FALSE(on.eligible(strided, 16)) << "a submatrix";
  struct Feed final : InputFeed {
    Status wait_for(MatrixId, int64_t) override { return Status::Ok(); }
  } feed;
  GemmJob fed = job;
  fed.feed = &feed;
  EXPECT_FALSE(on.eligible(fed, 16)) << "computing while A arrives";
}

TEST(RequestCoalescer, BadOptionsAreRefusedNamingTheFlag) {
  EXPECT_TRUE(check_coalesce_options(options(1)).ok());
  EXPECT_TRUE(check_coalesce_options(options(64, CoalesceOptions::kMaxWindow)).ok());
  const Status zero = check_coalesce_options(options(0));
  EXPECT_EQ(zero.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(zero.message().find("--coalesce-max-products"), std::string::npos) << zero.message();
  const Status window = check_coalesce_options(options(8, std::chrono::microseconds(-1)));
  EXPECT_NE(window.message().find("--coalesce-window-us"), std::string::npos) << window.message();
  const Status long_window =
      check_coalesce_options(options(8, CoalesceOptions::kMaxWindow + std::chrono::microseconds(1)));
  EXPECT_NE(long_window.message().find("--coalesce-window-us"), std::string::npos) << long_window.message();
  CoalesceOptions bytes = options(8);
  bytes.max_bytes = 0;
  EXPECT_NE(check_coalesce_options(bytes).message().find("--coalesce-max-bytes"), std::string::npos);
}

}  // namespace
}  // namespace sgemm
