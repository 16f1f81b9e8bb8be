#include "client/stripe_plan.h"

#include <algorithm>

namespace sgemm {

int stripes_for(const GemmShape& s, bool has_c, int requested) {
  if (requested > 0) return requested;
  const int64_t bytes = (s.m * s.k + s.k * s.n + s.m * s.n * (has_c ? 2 : 1)) * int64_t(sizeof(float));
  return bytes < kStripeAutoThresholdBytes ? 1 : kStripeAutoConnections;
}

StripePlan plan_stripes(const GemmShape& s, bool has_c, int stripes, int64_t chunk_bytes, Op op_a, Op op_b) {
  StripePlan plan;
  // Stored shapes: A is k x m under op_a = kT, B is n x k under op_b = kT.
  const int64_t a_rows = op_a == Op::kT ? s.k : s.m, a_width = op_a == Op::kT ? s.m : s.k;
  const int64_t b_rows = op_b == Op::kT ? s.n : s.k, b_width = op_b == Op::kT ? s.k : s.n;
  const int64_t widest = std::max<int64_t>(1, std::max({a_width, b_width, s.n}));
  const int64_t rows = std::max<int64_t>(1, chunk_bytes / int64_t(sizeof(float)) / widest);
  const int64_t c_blocks = s.m / rows + (s.m % rows != 0);
  plan.stripes = int(std::max<int64_t>(1, std::min<int64_t>(stripes, c_blocks)));
  plan.per_stripe.resize(std::size_t(plan.stripes));
  if (plan.stripes == 1) {
    plan.per_stripe[0].push_back({StripeMatrix::kB, 0, s.k * s.n});
    if (has_c) plan.per_stripe[0].push_back({StripeMatrix::kC, 0, s.m * s.n});
    plan.per_stripe[0].push_back({StripeMatrix::kA, 0, s.m * s.k});
    return plan;
  }
  plan.stripe_rows = rows;
  auto add = [&](StripeMatrix m, int64_t height, int64_t width) {
    for (int64_t r = 0, j = 0; r < height; r += rows, ++j)
      plan.per_stripe[std::size_t(j % plan.stripes)].push_back({m, r * width, std::min(height, r + rows) * width});
  };
  add(StripeMatrix::kB, b_rows, b_width);
  if (has_c) add(StripeMatrix::kC, s.m, s.n);
  add(StripeMatrix::kA, a_rows, a_width);
  return plan;
}

}  // namespace sgemm
