// sgemm-load --resident (bench/resident_load.h). For each B size and each
// stream of A: put B once, check one product against the fp64 reference
// (sampled rows), warm up, then time `requests` products per client naming B
// by handle, and `sent_requests` sending B every time; latencies are client
// wall times (connect excluded), throughput is products (and GFLOP) per
// second over the timed window. The kept-result comparison times, in the same
// run, PutMatrix of a keep_dim^2 A (the upload alone) and the product of that
// A (sent) with a resident B whose C stays resident.
#include "resident_load.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "client/sgemm_client.h"
#include "common/reference_gemm.h"

namespace sgemm::bench {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<int64_t> parse_list(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(std::stoll(item));
  return out;
}

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

struct Figures {
  int64_t ok = 0, failed = 0;
  double p50 = 0, p99 = 0, mean = 0, window_s = 0;
  std::string first_error;
};

Figures summarize(std::vector<double> lat, int64_t failed, double window_s, std::string err) {
  Figures f;
  f.failed = failed;
  f.first_error = std::move(err);
  f.window_s = window_s;
  f.ok = int64_t(lat.size());
  if (lat.empty()) return f;
  std::sort(lat.begin(), lat.end());
  auto pct = [&](double q) { return lat[std::min(lat.size() - 1, std::size_t(q * double(lat.size() - 1) + 0.5))]; };
  f.p50 = pct(0.50);
  f.p99 = pct(0.99);
  double sum = 0;
  for (double x : lat) sum += x;
  f.mean = sum / double(lat.size());
  return f;
}

// `clients` threads, each its own Client, `warmup` then `count` calls of `one`.
template <typename One>
Figures timed_run(const ResidentLoadOptions& o, int count, One&& one) {
  std::mutex mu;
  std::vector<double> lat;
  std::atomic<int64_t> failed{0};
  std::string err;
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  Clock::time_point t0;
  std::vector<std::thread> threads;
  for (int c = 0; c < o.clients; ++c)
    threads.emplace_back([&, c] {
      ClientOptions co;
      co.chunk_bytes = o.chunk_bytes;
      co.caller_thread_calls = !o.reactor_calls;
      co.rpc = o.rpc;
      co.retry.max_attempts = 1;
      co.channel_args.push_back({"sgemm.bench.client", c});  // a connection per client
      auto client = Client::connect(o.server, co);
      for (int i = 0; i < o.warmup; ++i) (void)one(*client);
      ++ready;
      while (!go.load()) std::this_thread::yield();
      std::vector<double> mine;
      for (int i = 0; i < count; ++i) {
        const auto t = Clock::now();
        Status st = one(*client);
        if (st.ok()) {
          mine.push_back(ms_since(t));
        } else {
          ++failed;
          std::lock_guard lock(mu);
          if (err.empty()) err = st.to_string();
        }
      }
      std::lock_guard lock(mu);
      lat.insert(lat.end(), mine.begin(), mine.end());
    });
  while (ready.load() < o.clients) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  t0 = Clock::now();
  go = true;
  for (auto& t : threads) t.join();
  return summarize(std::move(lat), failed.load(), ms_since(t0) / 1000.0, err);
}

nlohmann::json to_json(const Figures& f, const GemmShape& s) {
  nlohmann::json j = {{"ok", f.ok},
                      {"failed", f.failed},
                      {"p50_ms", f.p50},
                      {"p99_ms", f.p99},
                      {"mean_ms", f.mean},
                      {"window_s", f.window_s},
                      {"requests_per_s", f.window_s > 0 ? double(f.ok) / f.window_s : 0.0}};
  j["gflops"] = f.window_s > 0 ? double(f.ok) * s.flops() / f.window_s / 1e9 : 0.0;
  if (!f.first_error.empty()) j["first_error"] = f.first_error;
  return j;
}

}  // namespace

int run_resident_load(const ResidentLoadOptions& o) {
  int exit_code = 0;
  auto admin = Client::connect(o.server, [&] {
    ClientOptions co;
    co.chunk_bytes = o.chunk_bytes;
    return co;
  }());
  auto info = admin->info();
  if (!info.ok()) {
    std::fprintf(stderr, "sgemm-load: %s\n", info.status().to_string().c_str());
    return 2;
  }
  nlohmann::json out = {{"server", o.server},
                        {"backend", info->backend},
                        {"clients", o.clients},
                        {"requests_per_client", o.requests},
                        {"sent_requests_per_client", o.sent_requests},
                        {"calls_driven_by", o.reactor_calls ? "grpc-threads" : "caller-thread"},
                        {"rpc", multiply_rpc_name(o.rpc)}};
  if (!info->devices.empty()) out["device"] = info->devices[0].name;
  auto& rows = out["streams"] = nlohmann::json::array();
  std::mt19937_64 rng{std::random_device{}()};
  for (const int64_t n : parse_list(o.b_sizes)) {
    std::vector<float> b(std::size_t(n * n));
    const uint64_t bseed = rng();
    fill_random(b, bseed);
    PutOptions po;
    po.label = "sgemm-load B " + std::to_string(n);
    auto put = admin->put(n, n, b.data(), po);
    if (!put.ok()) {
      std::fprintf(stderr, "sgemm-load: put of B %ldx%ld: %s\n", long(n), long(n), put.status().to_string().c_str());
      return 2;
    }
    for (const int64_t m : parse_list(o.a_rows)) {
      const GemmShape s{m, n, n};
      std::vector<float> a(std::size_t(m * n));
      const uint64_t aseed = rng();
      fill_random(a, aseed);
      // Check first: one product against the fp64 reference, sampled rows.
      MultiplyOptions mo;
      mo.b_handle = put->handle;
      auto check = admin->multiply(s, a.data(), nullptr, nullptr, mo);
      nlohmann::json row = {{"m", m}, {"n", n}, {"k", n}, {"b_put_ms", put->wall_ms}, {"b_where", put->placement}};
      if (!check.ok()) {
        std::fprintf(stderr, "sgemm-load: %ldx%ldx%ld: %s\n", long(m), long(n), long(n),
                     check.status().to_string().c_str());
        exit_code = 2;
        continue;
      }
      const auto vrows = rows_to_verify(m, n, n, aseed, 16);
      const auto v = verify_gemm(m, n, n, 1.0f, a.data(), b.data(), 0.0f, nullptr, check->c.data(), vrows);
      row["verify"] = {
          {"max_rel_error", v.max_rel_error}, {"rows", vrows.size()}, {"passed", v.passed(kSgemmTolerance)}};
      if (!v.passed(kSgemmTolerance)) exit_code = 1;
      row["plan"] = check->summary.plan_reason;
      const Figures res =
          timed_run(o, o.requests, [&](Client& c) { return c.multiply(s, a.data(), nullptr, nullptr, mo).status(); });
      row["resident"] = to_json(res, s);
      if (res.failed) exit_code = 2;
      if (o.sent_requests > 0) {
        MultiplyOptions plain;
        ResidentLoadOptions os = o;
        os.warmup = std::min(o.warmup, 1);
        const Figures sent = timed_run(
            os, o.sent_requests, [&](Client& c) { return c.multiply(s, a.data(), b.data(), nullptr, plain).status(); });
        row["sent_b"] = to_json(sent, s);
        if (sent.failed) exit_code = 2;
        if (res.p50 > 0) row["speedup_p50"] = sent.p50 / res.p50;
      }
      if (!o.json)
        std::printf("%5ldx%-5ld x B %5ld^2 resident: p50 %8.3f ms p99 %8.3f ms %9.1f req/s | sent B: p50 %9.3f ms\n",
                    long(m), long(n), long(n), res.p50, res.p99, res.window_s > 0 ? res.ok / res.window_s : 0.0,
                    row.contains("sent_b") ? row["sent_b"]["p50_ms"].get<double>() : 0.0);
      rows.push_back(row);
    }
    (void)admin->remove(put->handle);
  }

  if (o.keep_requests > 0) {
    // Kept result vs the upload of A alone, in the same run.
    const int64_t d = o.keep_dim;
    const GemmShape s{d, d, d};
    std::vector<float> a(std::size_t(d * d)), b(std::size_t(d * d));
    const uint64_t seed = rng();
    fill_random(a, seed);
    fill_random(b, seed + 1);
    auto hb = admin->put(d, d, b.data());
    nlohmann::json keep = {{"dim", d}};
    if (!hb.ok()) {
      std::fprintf(stderr, "sgemm-load: put of B: %s\n", hb.status().to_string().c_str());
      return 2;
    }
    // Check: the kept C, also sent once, against the reference.
    MultiplyOptions mo;
    mo.b_handle = hb->handle;
    mo.keep_result = true;
    mo.send_c = true;
    auto check = admin->multiply(s, a.data(), nullptr, nullptr, mo);
    if (!check.ok()) {
      std::fprintf(stderr, "sgemm-load: kept product: %s\n", check.status().to_string().c_str());
      return 2;
    }
    const auto vrows = rows_to_verify(d, d, d, seed, 16);
    const auto v = verify_gemm(d, d, d, 1.0f, a.data(), b.data(), 0.0f, nullptr, check->c.data(), vrows);
    keep["verify"] = {{"max_rel_error", v.max_rel_error}, {"passed", v.passed(kSgemmTolerance)}};
    if (!v.passed(kSgemmTolerance)) exit_code = 1;
    (void)admin->remove(check->summary.result_handle);
    mo.send_c = false;
    std::vector<double> upload, kept;
    for (int i = 0; i < o.keep_requests + 1; ++i) {  // the first of each is a warm-up
      auto t = Clock::now();
      auto pa = admin->put(d, d, a.data());
      const double up = ms_since(t);
      if (!pa.ok()) {
        std::fprintf(stderr, "sgemm-load: put of A: %s\n", pa.status().to_string().c_str());
        return 2;
      }
      (void)admin->remove(pa->handle);
      t = Clock::now();
      auto r = admin->multiply(s, a.data(), nullptr, nullptr, mo);
      const double km = ms_since(t);
      if (!r.ok()) {
        std::fprintf(stderr, "sgemm-load: kept product: %s\n", r.status().to_string().c_str());
        return 2;
      }
      (void)admin->remove(r->summary.result_handle);
      if (i > 0) {
        upload.push_back(up);
        kept.push_back(km);
      }
    }
    const Figures fu = summarize(upload, 0, 0, ""), fk = summarize(kept, 0, 0, "");
    keep["upload_a_p50_ms"] = fu.p50;
    keep["kept_product_p50_ms"] = fk.p50;
    keep["ratio_p50"] = fu.p50 > 0 ? fk.p50 / fu.p50 : 0.0;
    keep["upload_a_ms"] = upload;
    keep["kept_product_ms"] = kept;
    out["kept_result"] = keep;
    if (!o.json)
      std::printf("kept result %ld^3: product %.3f ms vs upload of A alone %.3f ms (p50): %.2fx\n", long(d), fk.p50,
                  fu.p50, fu.p50 > 0 ? fk.p50 / fu.p50 : 0.0);
    (void)admin->remove(hb->handle);
  }
  if (o.json) std::printf("%s\n", out.dump(1).c_str());
  return exit_code;
}

}  // namespace sgemm::bench
