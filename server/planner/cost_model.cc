#include "server/planner/cost_model.h"

#include <algorithm>
#include <cstdio>

namespace sgemm::cost {

double transfer_ms(double bytes, double gbps) { return gbps > 0 ? bytes / (gbps * 1e9) * 1e3 : 0.0; }

double rate_flops(const DeviceCaps& d, int64_t m, int64_t n, int64_t k, const PlannerOptions& o) {
  const double full = double(std::max<int64_t>(1, o.full_rate_extent));
  const double thin = std::clamp(double(std::min({m, n, k})) / full, 1.0 / 64.0, 1.0);
  const double share = 1.0 + std::max(0, d.busy_lanes) * o.busy_share;
  return d.fp32_tflops * 1e12 * thin / share;
}

double link_gbps(const DeviceCaps& d, const PlannerOptions& o) {
  return d.host_link_gbps / (1.0 + std::max(0, d.busy_lanes) * o.busy_share);
}

double pipelined_ms(double in_ms, double k_ms, double out_ms, int chunks) {
  const double c = std::max(1, chunks);
  return in_ms / c + std::max({k_ms, in_ms * (c - 1) / c, out_ms * (c - 1) / c}) + out_ms / c;
}

namespace {
int row_chunks(int64_t rows, const PlannerOptions& o) {
  const int64_t by_size = std::max<int64_t>(1, rows / std::max<int64_t>(1, o.row_align));
  return int(std::clamp<int64_t>(by_size, 1, std::max(1, o.pipeline_chunks)));
}
}  // namespace

double rows_shard_ms(const GemmShape& s, bool has_c, int64_t rows, const DeviceCaps& d, const PlannerOptions& o) {
  if (rows <= 0) return 0;
  const double link = link_gbps(d, o);
  const double in = transfer_ms(kBytesPerElement * rows * (s.k + (has_c ? s.n : 0)), link);
  const double kern = 2.0 * rows * s.n * s.k / rate_flops(d, rows, s.n, s.k, o) * 1e3;
  const double out = transfer_ms(kBytesPerElement * rows * s.n, link);
  return pipelined_ms(in, kern, out, row_chunks(rows, o));
}

std::vector<double> device_weights(const PlanRequest& r, const PlannerOptions& o) {
  std::vector<double> w;
  for (const auto& d : r.devices) w.push_back(rate_flops(d, r.shape.m, r.shape.n, r.shape.k, o));
  return w;
}

std::string fmt_ms(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f ms", ms < 1 ? 3 : 1, ms);
  return buf;
}

}  // namespace sgemm::cost
