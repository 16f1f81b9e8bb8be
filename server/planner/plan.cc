#include "server/planner/plan.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "server/planner/cost_model.h"
#include "server/planner/strategy.h"

namespace sgemm {

std::string_view k_reduce_name(KReduce r) { return r == KReduce::kReduceScatter ? "reduce-scatter" : "reduce-to-root"; }

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

Plan make_plan(const PlanRequest& req, const PlannerOptions& o) {
  Plan plan;
  if (req.devices.empty()) {
    plan.reason = "no devices";
    return plan;
  }
  struct Candidate {
    const PlanStrategy* strategy;
    std::vector<Shard> shards;
    double est_ms;
  };
  auto evaluate = [&](const PlanStrategy* st) {
    Candidate c{st, st->shards(req, o), 0.0};
    c.est_ms = st->estimate_ms(req, c.shards, o);
    return c;
  };
  auto adopt = [&](const Candidate& c, std::string reason) {
    plan.mode = c.strategy->mode;
    plan.shards = c.shards;
    plan.est_ms = c.est_ms;
    plan.reason = std::move(reason);
  };
  const Candidate single = evaluate(&kSingleStrategy);
  plan.single_est_ms = single.est_ms;
  const std::string single_text = kSingleStrategy.describe(req, single.shards);

  if (req.forced != SplitMode::kAuto) {
    const PlanStrategy* forced = find_plan_strategy(req.forced);
    if (forced == &kSingleStrategy) {
      adopt(single, "single (requested) on " + single_text.substr(std::string("single on ").size()) + ", est " +
                        cost::fmt_ms(single.est_ms));
    } else if (forced == nullptr || !forced->applicable(req)) {
      adopt(single, std::string(split_mode_name(req.forced)) + " requested but " + std::to_string(req.devices.size()) +
                        " GPU: " + single_text + ", est " + cost::fmt_ms(single.est_ms));
    } else {
      const Candidate c = evaluate(forced);
      adopt(c, "requested " + forced->describe(req, c.shards) + ", est " + cost::fmt_ms(c.est_ms) + " vs single " +
                   cost::fmt_ms(single.est_ms));
    }
    return plan;
  }

  // Every applicable strategy is costed; the cheapest wins, ties to the earlier row.
  std::vector<Candidate> all;
  for (const PlanStrategy* st : plan_strategies())
    if (st->applicable(req)) all.push_back(st == &kSingleStrategy ? single : evaluate(st));
  size_t best = 0;
  for (size_t i = 1; i < all.size(); ++i)
    if (all[i].est_ms < all[best].est_ms) best = i;
  std::string reason = all[best].strategy->describe(req, all[best].shards) + ", est " + cost::fmt_ms(all[best].est_ms);
  std::string others;
  for (size_t i = 0; i < all.size(); ++i)
    if (i != best)
      others += (others.empty() ? " vs " : ", ") + std::string(split_mode_name(all[i].strategy->mode)) + " " +
                cost::fmt_ms(all[i].est_ms);
  adopt(all[best], reason + others);
  return plan;
}

int64_t pipeline_row_block(int64_t rows, int64_t chunk_rows, int pipeline_chunks) {
  if (chunk_rows > 0) return chunk_rows;
  const int64_t per_chunk = (rows + std::max(1, pipeline_chunks) - 1) / std::max(1, pipeline_chunks);
  return std::max<int64_t>(512, (per_chunk + 127) / 128 * 128);
}

std::vector<int64_t> pipeline_row_bounds(int64_t begin, int64_t end, int64_t step, int64_t n) {
  std::vector<int64_t> bounds{begin};
  if (end <= begin) return bounds;
  step = std::max<int64_t>(1, step);
  for (int64_t r = begin + step; r < end; r += step) bounds.push_back(r);
  const int64_t last = end - bounds.back();
  const int64_t tail = (last / 4 + 127) / 128 * 128;
  constexpr int64_t kMinTailElements = int64_t{2} << 20;
  if (2 * tail <= last && tail * n >= kMinTailElements) bounds.push_back(end - tail);
  bounds.push_back(end);
  return bounds;
}

int64_t pipeline_k_block(const GemmShape& s, int64_t kc, int64_t chunk_k, int pipeline_chunks) {
  if (chunk_k > 0) return chunk_k;
  const int64_t min_step = s.m * s.n <= (int64_t{4} << 20) ? 16384 : 2048;
  const int64_t per_chunk = (kc + std::max(1, pipeline_chunks) - 1) / std::max(1, pipeline_chunks);
  return std::max<int64_t>(min_step, (per_chunk + 15) / 16 * 16);
}

GemmShape kernel_block_shape(const Plan& plan, const GemmShape& s, int64_t chunk_rows, int64_t chunk_k,
                             int pipeline_chunks) {
  GemmShape block{0, s.n, 0};
  for (const Shard& sh : plan.shards) {
    if (plan.mode == SplitMode::kK) {
      const int64_t kc = sh.k_end - sh.k_begin;
      block.m = s.m;
      block.k = std::max(block.k, std::min(kc, pipeline_k_block(s, kc, chunk_k, pipeline_chunks)));
    } else {
      const int64_t rows = sh.row_end - sh.row_begin;
      block.m = std::max(block.m, std::min(rows, pipeline_row_block(rows, chunk_rows, pipeline_chunks)));
      block.k = s.k;
    }
  }
  return block;
}

StoredBlock stored_block(Op op, int64_t row_begin, int64_t row_end, int64_t col_begin, int64_t col_end) {
  if (op == Op::kN) return StoredBlock{row_begin, row_end, col_begin, col_end};
  return StoredBlock{col_begin, col_end, row_begin, row_end};
}

StoredBlock shard_a_block(const Shard& shard, Op op_a) {
  return stored_block(op_a, shard.row_begin, shard.row_end, shard.k_begin, shard.k_end);
}

StoredBlock shard_b_block(const Shard& shard, int64_t n, Op op_b) {
  return stored_block(op_b, shard.k_begin, shard.k_end, 0, n);
}

}  // namespace sgemm
