// The normal caller beside an attack (docs/security.md): one product of an
// odd shape (33 x 17 x 65, alpha 0.5) on fresh random inputs, checked against
// the fp64 reference, and a thread that sends such products one after another
// for as long as an attack runs, keeping every latency. No GoogleTest here:
// the e2e tests (attack_checks.h) and sgemm-attack-bench share it.
//
// Threads: NormalTrafficThread runs its requests on a thread of its own; its
// figures are read after stop() joins it.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "client/sgemm_client.h"
#include "common/reference_gemm.h"

namespace sgemm::testing {

// What one normal request saw.
struct NormalOutcome {
  double ms = 0;  // as its client saw it
  Status status = Status::Ok();
  bool correct = false;  // OK and every verified row within kSgemmTolerance of the fp64 reference
};

// One normal request on `client` (inputs from `seed`), verified.
inline NormalOutcome normal_request(Client& client, uint64_t seed,
                                    std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) {
  const GemmShape s{33, 17, 65};
  std::vector<float> a(std::size_t(s.m * s.k)), b(std::size_t(s.k * s.n));
  fill_random(a, seed);
  fill_random(b, seed + 1);
  MultiplyOptions opt;
  opt.alpha = 0.5f;
  opt.timeout = timeout;
  const auto t0 = std::chrono::steady_clock::now();
  auto res = client.multiply(s, a.data(), b.data(), nullptr, opt);
  NormalOutcome out;
  out.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!res.ok()) {
    out.status = res.status();
    return out;
  }
  out.correct =
      int64_t(res->c.size()) == s.m * s.n && verify_gemm(s.m, s.n, s.k, opt.alpha, a.data(), b.data(), 0.0f, nullptr,
                                                         res->c.data(), rows_to_verify(s.m, s.n, s.k, seed))
                                                 .passed(kSgemmTolerance);
  return out;
}

inline uint64_t fresh_seed() { return (uint64_t(std::random_device{}()) << 32) | std::random_device{}(); }

// The normal requests of a span of time: their latencies, failures and wrong results.
struct NormalTraffic {
  std::vector<double> ms;
  int64_t failed = 0, wrong = 0;
  std::string first_error;

  void add(const NormalOutcome& o) {
    ms.push_back(o.ms);
    if (!o.status.ok()) {
      if (failed++ == 0) first_error = o.status.to_string();
    } else if (!o.correct) {
      ++wrong;
    }
  }
  std::size_t count() const { return ms.size(); }
  double pct(double p) const {
    if (ms.empty()) return 0;
    std::vector<double> s = ms;
    std::sort(s.begin(), s.end());
    return s[std::min(s.size() - 1, std::size_t(p * double(s.size() - 1) + 0.5))];
  }
  double max() const { return ms.empty() ? 0 : *std::max_element(ms.begin(), ms.end()); }
};

// Normal requests one at a time on `client` until `stop` (at least `at_least`
// of them); `after_each`, when set, runs after each (to sample the server).
inline void run_normal_traffic(Client& client, const std::atomic<bool>& stop, NormalTraffic* out,
                               const std::function<void()>& after_each = {}, int at_least = 1) {
  std::mt19937_64 seeds(fresh_seed());
  for (int n = 0; !stop || n < at_least; ++n) {
    out->add(normal_request(client, seeds()));
    if (after_each) after_each();
  }
}

// Normal requests on a thread of their own from construction to stop()
// (at least one, so an attack that ends at once still has one beside it).
class NormalTrafficThread {
 public:
  explicit NormalTrafficThread(Client& client, std::function<void()> after_each = {})
      : thread_([this, &client, after_each = std::move(after_each)] {
          run_normal_traffic(client, stop_, &traffic_, [this, &after_each] {
            if (after_each) after_each();
            ++completed_;
          });
        }) {}
  ~NormalTrafficThread() { (void)stop(); }
  NormalTrafficThread(const NormalTrafficThread&) = delete;
  NormalTrafficThread& operator=(const NormalTrafficThread&) = delete;

  // How many normal requests have completed so far (readable while it runs).
  std::size_t completed() const { return completed_; }

  // Ends the traffic (after the request under way) and returns its figures.
  const NormalTraffic& stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    return traffic_;
  }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<std::size_t> completed_{0};
  NormalTraffic traffic_;  // written by the thread until stop() joins it
  std::thread thread_;     // last: starts once the members above exist
};

}  // namespace sgemm::testing
