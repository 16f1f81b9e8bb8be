// The whole product on one device: the one with the lowest estimate (busy
// devices run slower), ties to the least busy, then the lowest index.
#include <cmath>
#include <limits>

#include "server/planner/cost_model.h"
#include "server/planner/strategy.h"

namespace sgemm {

double estimate_single_ms(const GemmShape& s, bool has_c, const DeviceCaps& d, const PlannerOptions& o) {
  const double b_in =
      cost::transfer_ms(cost::kBytesPerElement * s.k * s.n * (1.0 - d.b_resident_fraction), cost::link_gbps(d, o));
  return o.single_overhead_ms + b_in + cost::rows_shard_ms(s, has_c, s.m, d, o);
}

namespace {

bool applicable(const PlanRequest& req) { return !req.devices.empty(); }

std::vector<Shard> shards(const PlanRequest& req, const PlannerOptions& o) {
  const auto& devs = req.devices;
  size_t best = 0;
  double best_ms = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < devs.size(); ++i) {
    const double t = estimate_single_ms(req.shape, req.has_c, devs[i], o);
    if (t < best_ms - 1e-12 || (std::abs(t - best_ms) <= 1e-12 && devs[i].busy_lanes < devs[best].busy_lanes)) {
      best = i;
      best_ms = t;
    }
  }
  return {Shard{devs[best].device, 0, req.shape.m, 0, req.shape.k}};
}

const DeviceCaps* caps_of(const PlanRequest& req, int device) {
  for (const auto& d : req.devices)
    if (d.device == device) return &d;
  return nullptr;
}

double estimate(const PlanRequest& req, const std::vector<Shard>& sh, const PlannerOptions& o) {
  const DeviceCaps* d = sh.size() == 1 ? caps_of(req, sh[0].device) : nullptr;
  return d ? estimate_single_ms(req.shape, req.has_c, *d, o) : std::numeric_limits<double>::infinity();
}

std::string describe(const PlanRequest& req, const std::vector<Shard>& sh) {
  return "single on GPU " + std::to_string(sh.empty() ? -1 : sh[0].device) +
         (req.devices.size() > 1 ? " (least loaded)" : "");
}

}  // namespace

const PlanStrategy kSingleStrategy{SplitMode::kSingle, applicable, shards, estimate, describe};

}  // namespace sgemm
