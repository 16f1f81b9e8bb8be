// Row split: every device computes a block of rows of C. B comes in once, a
// slice over each device's host link, and NCCL broadcasts the slices over
// NVLink; A and C stream in by row blocks. Blocks are proportional to the
// devices' rates, aligned to PlannerOptions::row_align.
#include <limits>

#include "server/planner/cost_model.h"
#include "server/planner/strategy.h"

namespace sgemm {

double estimate_rows_ms(const GemmShape& s, bool has_c, const std::vector<DeviceCaps>& d,
                        const std::vector<Shard>& shards, const PlannerOptions& o) {
  const size_t p = d.size();
  if (p == 0 || shards.size() != p) return std::numeric_limits<double>::infinity();
  // B already on every device (a resident matrix replicated) costs no copy.
  double b_in = 0, peer = std::numeric_limits<double>::infinity(), resident = 1.0;
  for (const auto& dev : d) resident = std::min(resident, dev.b_resident_fraction);
  const double b_bytes = cost::kBytesPerElement * s.k * s.n * (1.0 - resident);
  for (const auto& dev : d) {
    b_in = std::max(b_in, cost::transfer_ms(b_bytes / double(p), cost::link_gbps(dev, o)));
    peer = std::min(peer, dev.peer_gbps);
  }
  const double bcast =
      p > 1 && b_bytes > 0 ? cost::transfer_ms(b_bytes * double(p - 1) / double(p), peer) + o.nccl_latency_ms : 0.0;
  double worst = 0;
  for (size_t i = 0; i < p; ++i)
    worst = std::max(worst, cost::rows_shard_ms(s, has_c, shards[i].row_end - shards[i].row_begin, d[i], o));
  return (p > 1 ? o.split_overhead_ms : o.single_overhead_ms) + b_in + bcast + worst;
}

namespace {

bool applicable(const PlanRequest& req) { return req.devices.size() >= 2; }

std::vector<Shard> shards(const PlanRequest& req, const PlannerOptions& o) {
  const auto b = split_range(req.shape.m, cost::device_weights(req, o), o.row_align);
  std::vector<Shard> out;
  for (size_t i = 0; i < req.devices.size(); ++i)
    out.push_back(Shard{req.devices[i].device, b[i], b[i + 1], 0, req.shape.k});
  return out;
}

double estimate(const PlanRequest& req, const std::vector<Shard>& sh, const PlannerOptions& o) {
  return estimate_rows_ms(req.shape, req.has_c, req.devices, sh, o);
}

std::string describe(const PlanRequest& req, const std::vector<Shard>&) {
  return "rows: " + std::to_string(req.devices.size()) + " GPUs";
}

}  // namespace

const PlanStrategy kRowsStrategy{SplitMode::kRows, applicable, shards, estimate, describe};

}  // namespace sgemm
