// Helpers for the CUDA engine suites: matrices in the engine's pinned host
// memory, a feed that releases input progressively, a sink that checks every
// row is reported exactly once, and result comparisons.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "common/reference_gemm.h"
#include "server/engine/cuda/cuda_engine.h"

namespace sgemm::testing {

struct Problem {
  GemmShape shape;
  float alpha = 1.0f, beta = 0.0f;
  bool has_c = false;
  HostBuffer a, b, c, c0;  // c receives the result; c0 keeps the input C
};

inline void reset_c(Problem& p) {
  std::memcpy(p.c.floats(), p.c0.floats(), std::size_t(p.shape.m * p.shape.n) * sizeof(float));
}

inline Problem make_problem(Engine& engine, GemmShape s, uint64_t seed, bool has_c = false, float alpha = 1.0f,
                            float beta = 0.0f) {
  Problem p;
  p.shape = s;
  p.alpha = alpha;
  p.beta = beta;
  p.has_c = has_c;
  auto alloc = [&](int64_t count) {
    auto b = engine.host_allocator().allocate(std::size_t(std::max<int64_t>(count, 1)) * sizeof(float));
    EXPECT_TRUE(b.ok()) << b.status().to_string();
    return std::move(b).value();
  };
  p.a = alloc(s.m * s.k);
  p.b = alloc(s.k * s.n);
  p.c = alloc(s.m * s.n);
  p.c0 = alloc(s.m * s.n);
  fill_random(p.a.floats(), s.m * s.k, seed);
  fill_random(p.b.floats(), s.k * s.n, seed + 1);
  if (has_c) {
    fill_random(p.c0.floats(), s.m * s.n, seed + 2);
  } else {
    std::fill_n(p.c0.floats(), s.m * s.n, std::nanf(""));  // must never be read
  }
  reset_c(p);
  return p;
}

inline GemmRequest request_of(GemmShape s) {
  GemmRequest r;
  r.shape = s;
  return r;
}

inline GemmJob job_of(Problem& p, SplitMode split = SplitMode::kAuto, std::optional<KernelKind> kernel = std::nullopt) {
  GemmJob j;
  j.request.shape = p.shape;
  j.request.alpha = p.alpha;
  j.request.beta = p.beta;
  j.request.has_c = p.has_c;
  j.request.options.kernel = kernel;
  j.request.options.split = split;
  j.a = p.a.floats();
  j.b = p.b.floats();
  j.c = p.c.floats();
  return j;
}

inline VerifyResult verify(const Problem& p, bool sample) {
  const auto& s = p.shape;
  const std::vector<int64_t> rows = sample ? rows_to_verify(s.m, s.n, s.k, 7, 24) : std::vector<int64_t>{};
  return verify_gemm(s.m, s.n, s.k, p.alpha, p.a.floats(), p.b.floats(), p.beta, p.has_c ? p.c0.floats() : nullptr,
                     p.c.floats(), rows);
}

// Largest |x - y| / (|alpha| * sum_k |a_ik b_kj| + |beta c0_ij|) over `rows`:
// two fp32 results of the same product agree to about sqrt(k) * 2^-24 here.
inline double max_normalised_diff(const Problem& p, const float* x, const float* y, const std::vector<int64_t>& rows) {
  const auto& s = p.shape;
  double worst = 0;
  std::vector<double> mag(std::size_t(s.n));
  for (int64_t r : rows) {
    std::fill(mag.begin(), mag.end(), 0.0);
    for (int64_t kk = 0; kk < s.k; ++kk) {
      const double av = std::fabs(double(p.a.floats()[r * s.k + kk]));
      const float* brow = p.b.floats() + kk * s.n;
      for (int64_t j = 0; j < s.n; ++j) mag[std::size_t(j)] += av * std::fabs(double(brow[j]));
    }
    for (int64_t j = 0; j < s.n; ++j) {
      double denom = std::fabs(double(p.alpha)) * mag[std::size_t(j)];
      if (p.has_c) denom += std::fabs(double(p.beta) * p.c0.floats()[r * s.n + j]);
      const double d = std::fabs(double(x[r * s.n + j]) - double(y[r * s.n + j]));
      worst = std::max(worst, denom > 0 ? d / denom : d);
    }
  }
  return worst;
}

// Releases each matrix in `steps` increments, one every `period`, from its
// own thread, as the service does while a request's chunks arrive.
class ProgressiveFeed final : public InputFeed {
 public:
  ProgressiveFeed(const GemmShape& s, bool has_c, int steps, std::chrono::microseconds period)
      : total_{s.m * s.k, s.k * s.n, has_c ? s.m * s.n : 0} {
    releaser_ = std::thread([this, steps, period] {
      for (int i = 1; i <= steps; ++i) {
        std::this_thread::sleep_for(period);
        std::lock_guard<std::mutex> lock(mu_);
        for (int m = 0; m < 3; ++m) released_[m] = total_[m] * i / steps;
        cv_.notify_all();
      }
    });
  }
  ~ProgressiveFeed() override { releaser_.join(); }
  Status wait_for(MatrixId matrix, int64_t elements) override {
    const int m = int(matrix);
    if (elements > total_[m]) return InvalidArgument("wait_for beyond the matrix");
    std::unique_lock<std::mutex> lock(mu_);
    waits_++;
    cv_.wait(lock, [&] { return released_[m] >= elements; });
    return Status::Ok();
  }
  int waits() {
    std::lock_guard<std::mutex> lock(mu_);
    return waits_;
  }

 private:
  const int64_t total_[3];
  int64_t released_[3] = {0, 0, 0};
  int waits_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread releaser_;
};

// Counts reports per row; every row must be reported exactly once.
class CountingSink final : public OutputSink {
 public:
  explicit CountingSink(int64_t m) : counts_(std::size_t(m), 0) {}
  void rows_ready(int64_t begin, int64_t end) override {
    std::lock_guard<std::mutex> lock(mu_);
    calls_++;
    for (int64_t r = begin; r < end; ++r) {
      if (r < 0 || r >= int64_t(counts_.size())) {
        out_of_range_++;
      } else {
        counts_[std::size_t(r)]++;
      }
    }
  }
  void expect_each_row_once() {
    std::lock_guard<std::mutex> lock(mu_);
    EXPECT_EQ(out_of_range_, 0);
    for (std::size_t r = 0; r < counts_.size(); ++r) ASSERT_EQ(counts_[r], 1) << "row " << r;
  }
  int calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }

 private:
  std::mutex mu_;
  std::vector<int> counts_;
  int calls_ = 0;
  int out_of_range_ = 0;
};

inline std::unique_ptr<Engine> make_engine(std::vector<int> devices, KReduce reduce = KReduce::kReduceScatter,
                                           int lanes = 2) {
  CudaEngineOptions o;
  o.devices = std::move(devices);
  o.k_reduce = reduce;
  o.lanes_per_device = lanes;
  auto e = make_cuda_engine(o);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return e.ok() ? std::move(e).value() : nullptr;
}

// Honest timings: waits are never negative, every step ends after it starts,
// a collective's peer-ready time lies inside it, and the working time of each
// phase is the sum of its steps.
inline void expect_steps(const DeviceTiming& d) {
  for (double w : {d.copy_in_wait_ms, d.kernel_wait_ms, d.reduce_wait_ms, d.copy_out_wait_ms, d.order_wait_ms})
    EXPECT_GE(w, 0.0);
  EXPECT_FALSE(d.steps.empty());
  double sums[5] = {};
  for (const Step& s : d.steps) {
    EXPECT_GE(s.end_ms, s.start_ms) << step_kind_name(s.kind);
    EXPECT_GE(s.start_ms, 0.0) << step_kind_name(s.kind);
    EXPECT_GE(s.bytes, 0);
    if (s.kind == StepKind::kCollective) {
      EXPECT_GE(s.peer_ready_ms, s.start_ms);
      EXPECT_LE(s.peer_ready_ms, s.end_ms);
    }
    sums[int(s.kind)] += s.end_ms - s.start_ms;
  }
  EXPECT_NEAR(sums[int(StepKind::kCopyIn)], d.copy_in_ms, 1e-6);
  EXPECT_NEAR(sums[int(StepKind::kKernel)], d.kernel_ms, 1e-6);
  EXPECT_NEAR(sums[int(StepKind::kCollective)], d.reduce_ms + d.reduce_wait_ms, 1e-6);
  EXPECT_NEAR(sums[int(StepKind::kCopyOut)], d.copy_out_ms, 1e-6);
  EXPECT_NEAR(sums[int(StepKind::kWaitInput)], d.copy_in_wait_ms, 1e-6);
}

// The report's kernel_rows account for every launch once: each kernel step the
// engine labelled names a listed row, the launches add up to the labelled steps,
// and kernel_row is the most launched.
inline void expect_kernel_rows_cover_launches(const GemmReport& r) {
  ASSERT_FALSE(r.kernel_rows.empty()) << r.plan_reason;
  int64_t launches = 0, labelled = 0;
  for (const KernelRowUse& k : r.kernel_rows) {
    EXPECT_GT(k.launches, 0) << k.name;
    launches += k.launches;
  }
  for (const DeviceTiming& d : r.devices)
    for (const Step& st : d.steps)
      if (st.kind == StepKind::kKernel && st.kernel_row >= 0) {
        ++labelled;
        EXPECT_LT(std::size_t(st.kernel_row), r.kernel_rows.size());
        EXPECT_GT(st.row_end, st.row_begin);  // a product, not B prepared for the blocks
      }
  EXPECT_EQ(labelled, launches);
  EXPECT_EQ(r.kernel_row, most_launched_row(r.kernel_rows));
}

inline void expect_report(const GemmReport& r, SplitMode mode, std::size_t devices) {
  EXPECT_EQ(r.backend, "cuda");
  EXPECT_NE(r.kernel, KernelKind::kOpenblas);
  EXPECT_FALSE(r.plan_reason.empty());
  EXPECT_EQ(r.split, mode) << r.plan_reason;
  ASSERT_EQ(r.devices.size(), devices) << r.plan_reason;
  for (const auto& d : r.devices) {
    EXPECT_GE(d.device, 0);
    EXPECT_FALSE(d.name.empty());
    EXPECT_GT(d.kernel_ms + d.reduce_ms, 0.0);  // a device with an empty shard may only reduce
    EXPECT_GE(d.copy_in_ms, 0.0);
    EXPECT_GE(d.copy_out_ms, 0.0);
    expect_steps(d);
  }
  expect_kernel_rows_cover_launches(r);
}

}  // namespace sgemm::testing
