#include "server/planner/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace sgemm {

std::string_view split_mode_name(SplitMode mode) {
  switch (mode) {
    case SplitMode::kAuto: return "auto";
    case SplitMode::kSingle: return "single";
    case SplitMode::kRows: return "rows";
    case SplitMode::kK: return "k";
  }
  return "unknown";
}

bool parse_split_mode(std::string_view text, SplitMode* out) {
  for (SplitMode m : {SplitMode::kAuto, SplitMode::kSingle, SplitMode::kRows, SplitMode::kK}) {
    if (text == split_mode_name(m)) {
      *out = m;
      return true;
    }
  }
  return false;
}

std::string_view k_reduce_name(KReduce r) {
  return r == KReduce::kReduceScatter ? "reduce-scatter" : "reduce-to-root";
}

namespace {

constexpr double kBytesPerElement = 4.0;

// Milliseconds to move `bytes` at `gbps` (1e9 bytes/s).
double transfer_ms(double bytes, double gbps) { return gbps > 0 ? bytes / (gbps * 1e9) * 1e3 : 0.0; }

// Effective fp32 rate (flop/s) of a device for a problem of this extent.
double rate_flops(const DeviceCaps& d, int64_t m, int64_t n, int64_t k, const PlannerOptions& o) {
  const double full = double(std::max<int64_t>(1, o.full_rate_extent));
  const double thin = std::clamp(double(std::min({m, n, k})) / full, 1.0 / 64.0, 1.0);
  const double share = 1.0 + std::max(0, d.busy_lanes) * o.busy_share;
  return d.fp32_tflops * 1e12 * thin / share;
}

double link_gbps(const DeviceCaps& d, const PlannerOptions& o) {
  return d.host_link_gbps / (1.0 + std::max(0, d.busy_lanes) * o.busy_share);
}

// A pipelined shard: `in_ms` of copies split over `chunks`, kernel `k_ms`,
// copy-out `out_ms`. The first chunk's copy and the last chunk's copy-out are
// exposed; in between the slowest stream sets the pace.
double pipelined_ms(double in_ms, double k_ms, double out_ms, int chunks) {
  const double c = std::max(1, chunks);
  return in_ms / c + std::max({k_ms, in_ms * (c - 1) / c, out_ms * (c - 1) / c}) + out_ms / c;
}

int row_chunks(int64_t rows, const PlannerOptions& o) {
  const int64_t by_size = std::max<int64_t>(1, rows / std::max<int64_t>(1, o.row_align));
  return int(std::clamp<int64_t>(by_size, 1, std::max(1, o.pipeline_chunks)));
}

// Rows of one device: A rows (and C rows) in, kernel, C rows out. B excluded.
double rows_shard_ms(const GemmShape& s, bool has_c, int64_t rows, const DeviceCaps& d,
                     const PlannerOptions& o) {
  if (rows <= 0) return 0;
  const double link = link_gbps(d, o);
  const double in = transfer_ms(kBytesPerElement * rows * (s.k + (has_c ? s.n : 0)), link);
  const double kern = 2.0 * rows * s.n * s.k / rate_flops(d, rows, s.n, s.k, o) * 1e3;
  const double out = transfer_ms(kBytesPerElement * rows * s.n, link);
  return pipelined_ms(in, kern, out, row_chunks(rows, o));
}

std::string fmt_ms(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f ms", ms < 1 ? 3 : 1, ms);
  return buf;
}

std::vector<double> weights_of(const std::vector<DeviceCaps>& devs, const PlanRequest& r,
                               const PlannerOptions& o) {
  std::vector<double> w;
  for (const auto& d : devs) w.push_back(rate_flops(d, r.shape.m, r.shape.n, r.shape.k, o));
  return w;
}

}  // namespace

std::vector<int64_t> split_range(int64_t total, const std::vector<double>& weights, int64_t align) {
  const int64_t n = int64_t(weights.size());
  std::vector<int64_t> b(size_t(n + 1), 0);
  if (n == 0) return b;
  total = std::max<int64_t>(0, total);
  b[size_t(n)] = total;
  if (total < n) {  // some parts must be empty: one element each to the first ones
    for (int64_t i = 1; i < n; ++i) b[size_t(i)] = std::min(i, total);
    return b;
  }
  int64_t a = std::max<int64_t>(1, align);
  while (a > 1 && total < n * a) a = std::max<int64_t>(1, a / 2);
  double wsum = 0;
  bool usable = true;
  for (double w : weights) {
    if (!(w > 0) || !std::isfinite(w)) usable = false;
    wsum += w;
  }
  double cum = 0;
  for (int64_t i = 1; i < n; ++i) {
    cum += usable ? weights[size_t(i - 1)] : 1.0;
    const double share = cum / (usable ? wsum : double(n));
    int64_t bi = int64_t(std::llround(double(total) * share / double(a))) * a;
    const int64_t lo = b[size_t(i - 1)] + a;
    const int64_t hi = (total - (n - i) * a) / a * a;
    b[size_t(i)] = std::clamp(bi, lo, hi);
  }
  return b;
}

double estimate_single_ms(const GemmShape& s, bool has_c, const DeviceCaps& d, const PlannerOptions& o) {
  const double b_in = transfer_ms(kBytesPerElement * s.k * s.n, link_gbps(d, o));
  return o.single_overhead_ms + b_in + rows_shard_ms(s, has_c, s.m, d, o);
}

double estimate_rows_ms(const GemmShape& s, bool has_c, const std::vector<DeviceCaps>& d,
                        const std::vector<Shard>& shards, const PlannerOptions& o) {
  const size_t p = d.size();
  if (p == 0 || shards.size() != p) return std::numeric_limits<double>::infinity();
  // B comes in once, a 1/p slice over each device's host link, then every
  // device broadcasts its slice to the others over NVLink.
  double b_in = 0, peer = std::numeric_limits<double>::infinity();
  for (const auto& dev : d) {
    b_in = std::max(b_in, transfer_ms(kBytesPerElement * s.k * s.n / double(p), link_gbps(dev, o)));
    peer = std::min(peer, dev.peer_gbps);
  }
  const double bcast =
      p > 1 ? transfer_ms(kBytesPerElement * s.k * s.n * double(p - 1) / double(p), peer) + o.nccl_latency_ms
            : 0.0;
  double worst = 0;
  for (size_t i = 0; i < p; ++i)
    worst = std::max(worst, rows_shard_ms(s, has_c, shards[i].row_end - shards[i].row_begin, d[i], o));
  return (p > 1 ? o.split_overhead_ms : o.single_overhead_ms) + b_in + bcast + worst;
}

double estimate_k_ms(const GemmShape& s, bool has_c, const std::vector<DeviceCaps>& d,
                     const std::vector<Shard>& shards, KReduce r, const PlannerOptions& o) {
  const size_t p = d.size();
  if (p == 0 || shards.size() != p) return std::numeric_limits<double>::infinity();
  double compute = 0, peer = std::numeric_limits<double>::infinity(), out = 0;
  for (size_t i = 0; i < p; ++i) {
    const int64_t kc = shards[i].k_end - shards[i].k_begin;
    peer = std::min(peer, d[i].peer_gbps);
    const double link = link_gbps(d[i], o);
    // Shard 0 owns beta*C: it alone copies C in, before its first kernel.
    const double c_in = (i == 0 && has_c) ? transfer_ms(kBytesPerElement * s.m * s.n, link) : 0.0;
    if (kc <= 0) {
      compute = std::max(compute, c_in);
      continue;
    }
    const double in = transfer_ms(kBytesPerElement * kc * (s.m + s.n), link);
    const double kern = 2.0 * s.m * s.n * kc / rate_flops(d[i], s.m, s.n, kc, o) * 1e3;
    const int chunks = int(std::clamp<int64_t>(kc / 1024, 1, std::max(1, o.pipeline_chunks)));
    compute = std::max(compute, c_in + pipelined_ms(in, kern, 0.0, chunks));
    const double rows_out = r == KReduce::kReduceScatter ? double(s.m) / double(p) : (i == 0 ? double(s.m) : 0.0);
    out = std::max(out, transfer_ms(kBytesPerElement * rows_out * s.n, link));
  }
  // nccl-tests algBw: bytes of one rank's input over the time. The reduce is
  // costed at the pool's peer rate scaled by the measured 64 MiB figure.
  const double reduce = p > 1 ? transfer_ms(kBytesPerElement * s.m * s.n, peer * o.reduce_vs_peer) +
                                    o.nccl_latency_ms
                              : 0.0;
  return (p > 1 ? o.split_overhead_ms : o.single_overhead_ms) + compute + reduce + out;
}

Plan make_plan(const PlanRequest& req, const PlannerOptions& o) {
  Plan plan;
  const GemmShape& s = req.shape;
  const auto& devs = req.devices;
  if (devs.empty()) {
    plan.reason = "no devices";
    return plan;
  }
  // Best single device: lowest estimate (busy devices are slower); ties go to
  // the least busy, then the lowest index.
  size_t best = 0;
  double best_ms = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < devs.size(); ++i) {
    const double t = estimate_single_ms(s, req.has_c, devs[i], o);
    if (t < best_ms - 1e-12 || (std::abs(t - best_ms) <= 1e-12 && devs[i].busy_lanes < devs[best].busy_lanes)) {
      best = i;
      best_ms = t;
    }
  }
  plan.single_est_ms = best_ms;
  const std::string single_where =
      "GPU " + std::to_string(devs[best].device) + (devs.size() > 1 ? " (least loaded)" : "");
  auto make_single = [&](std::string why) {
    plan.mode = SplitMode::kSingle;
    plan.shards = {Shard{devs[best].device, 0, s.m, 0, s.k}};
    plan.est_ms = best_ms;
    plan.reason = std::move(why);
  };

  const size_t p = devs.size();
  if (req.forced == SplitMode::kSingle) {
    make_single("single (requested) on " + single_where + ", est " + fmt_ms(best_ms));
    return plan;
  }
  if (p == 1) {
    const std::string asked = req.forced == SplitMode::kAuto
                                  ? std::string("single")
                                  : std::string(split_mode_name(req.forced)) + " requested but 1 GPU: single";
    make_single(asked + " on " + single_where + ", est " + fmt_ms(best_ms));
    return plan;
  }

  const auto w = weights_of(devs, req, o);
  std::vector<Shard> rows_shards, k_shards;
  {
    const auto b = split_range(s.m, w, o.row_align);
    for (size_t i = 0; i < p; ++i) rows_shards.push_back(Shard{devs[i].device, b[i], b[i + 1], 0, s.k});
    const auto kb = split_range(s.k, w, o.k_align);
    for (size_t i = 0; i < p; ++i) k_shards.push_back(Shard{devs[i].device, 0, s.m, kb[i], kb[i + 1]});
  }
  const double rows_ms = estimate_rows_ms(s, req.has_c, devs, rows_shards, o);
  const double k_ms = estimate_k_ms(s, req.has_c, devs, k_shards, req.k_reduce, o);
  const std::string n_gpus = std::to_string(p) + " GPUs";

  auto use = [&](SplitMode mode, std::string prefix) {
    plan.mode = mode;
    plan.shards = mode == SplitMode::kRows ? rows_shards : k_shards;
    plan.est_ms = mode == SplitMode::kRows ? rows_ms : k_ms;
    plan.reason = prefix + std::string(split_mode_name(mode)) + ": " + n_gpus +
                  (mode == SplitMode::kK ? std::string(" (") + std::string(k_reduce_name(req.k_reduce)) + ")"
                                         : std::string()) +
                  ", est " + fmt_ms(plan.est_ms) + " vs single " + fmt_ms(best_ms);
  };
  if (req.forced == SplitMode::kRows) {
    use(SplitMode::kRows, "requested ");
  } else if (req.forced == SplitMode::kK) {
    use(SplitMode::kK, "requested ");
  } else if (best_ms <= rows_ms && best_ms <= k_ms) {
    make_single("single on " + single_where + ", est " + fmt_ms(best_ms) + " vs rows " + fmt_ms(rows_ms) +
                ", k " + fmt_ms(k_ms));
  } else if (rows_ms <= k_ms) {
    use(SplitMode::kRows, "");
    plan.reason += ", k " + fmt_ms(k_ms);
  } else {
    use(SplitMode::kK, "");
    plan.reason += ", rows " + fmt_ms(rows_ms);
  }
  return plan;
}

}  // namespace sgemm
