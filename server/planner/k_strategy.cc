// K split: every device computes a slice of K into a partial C, summed by NCCL
// (reduce-scatter, or reduce to one device: PlanRequest::k_reduce). The first
// device owns beta*C. Slices are proportional to the devices' rates, aligned
// to PlannerOptions::k_align.
#include <algorithm>
#include <limits>

#include "server/planner/cost_model.h"
#include "server/planner/strategy.h"

namespace sgemm {

double estimate_k_ms(const GemmShape& s, bool has_c, const std::vector<DeviceCaps>& d, const std::vector<Shard>& shards,
                     KReduce r, const PlannerOptions& o) {
  const size_t p = d.size();
  if (p == 0 || shards.size() != p) return std::numeric_limits<double>::infinity();
  double compute = 0, peer = std::numeric_limits<double>::infinity(), out = 0;
  for (size_t i = 0; i < p; ++i) {
    const int64_t kc = shards[i].k_end - shards[i].k_begin;
    peer = std::min(peer, d[i].peer_gbps);
    const double link = cost::link_gbps(d[i], o);
    // Shard 0 owns beta*C: it alone copies C in, before its first kernel.
    const double c_in = (i == 0 && has_c) ? cost::transfer_ms(cost::kBytesPerElement * s.m * s.n, link) : 0.0;
    if (kc <= 0) {
      compute = std::max(compute, c_in);
      continue;
    }
    // A device already holding as many rows of B as its slice (a resident B
    // laid out for this split, docs/resident.md) copies in only A.
    const double b_cols = d[i].b_resident_fraction * double(s.k) >= double(kc) ? 0.0 : double(s.n);
    const double in = cost::transfer_ms(cost::kBytesPerElement * kc * (double(s.m) + b_cols), link);
    const double kern = 2.0 * s.m * s.n * kc / cost::rate_flops(d[i], s.m, s.n, kc, o) * 1e3;
    const int chunks = int(std::clamp<int64_t>(kc / 1024, 1, std::max(1, o.pipeline_chunks)));
    compute = std::max(compute, c_in + cost::pipelined_ms(in, kern, 0.0, chunks));
    const double rows_out = r == KReduce::kReduceScatter ? double(s.m) / double(p) : (i == 0 ? double(s.m) : 0.0);
    out = std::max(out, cost::transfer_ms(cost::kBytesPerElement * rows_out * s.n, link));
  }
  // nccl-tests algBw: bytes of one rank's input over the time. The reduce is
  // costed at the pool's peer rate scaled by the measured 64 MiB figure.
  const double reduce =
      p > 1 ? cost::transfer_ms(cost::kBytesPerElement * s.m * s.n, peer * o.reduce_vs_peer) + o.nccl_latency_ms : 0.0;
  return (p > 1 ? o.split_overhead_ms : o.single_overhead_ms) + compute + reduce + out;
}

namespace {

bool applicable(const PlanRequest& req) { return req.devices.size() >= 2; }

std::vector<Shard> shards(const PlanRequest& req, const PlannerOptions& o) {
  const auto b = split_range(req.shape.k, cost::device_weights(req, o), o.k_align);
  std::vector<Shard> out;
  for (size_t i = 0; i < req.devices.size(); ++i)
    out.push_back(Shard{req.devices[i].device, 0, req.shape.m, b[i], b[i + 1]});
  return out;
}

double estimate(const PlanRequest& req, const std::vector<Shard>& sh, const PlannerOptions& o) {
  return estimate_k_ms(req.shape, req.has_c, req.devices, sh, req.k_reduce, o);
}

std::string describe(const PlanRequest& req, const std::vector<Shard>&) {
  return "k: " + std::to_string(req.devices.size()) + " GPUs (" + std::string(k_reduce_name(req.k_reduce)) + ")";
}

}  // namespace

const PlanStrategy kKStrategy{SplitMode::kK, applicable, shards, estimate, describe};

}  // namespace sgemm
