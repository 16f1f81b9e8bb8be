#include "server/planner/batch_plan.h"

#include <algorithm>

namespace sgemm {

std::vector<ProductRange> split_products(const std::vector<double>& work, int devices) {
  std::vector<ProductRange> out;
  const int64_t count = int64_t(work.size());
  if (count == 0 || devices < 1) return out;
  double remaining = 0;
  for (double w : work) remaining += std::max(w, 0.0);
  int64_t begin = 0;
  for (int d = 0; d < devices && begin < count; ++d) {
    const int left = devices - d;
    const int64_t products_left = count - begin;
    if (left == 1 || products_left <= 1) {
      out.push_back({begin, count});
      return out;
    }
    const double share = remaining / left;
    double taken = 0;
    int64_t end = begin;
    // Take products until the share is reached, keeping at least one product
    // for each device after this one while there are enough.
    const int64_t last_allowed = count - std::min<int64_t>(left - 1, products_left - 1);
    while (end < last_allowed) {
      const double w = std::max(work[std::size_t(end)], 0.0);
      // Stop before a product that overshoots the share by more than it fills, once this range has one.
      if (end > begin && taken + w > share && (taken + w - share) > (share - taken)) break;
      taken += w;
      ++end;
      if (taken >= share) break;
    }
    out.push_back({begin, end});
    remaining -= taken;
    begin = end;
  }
  if (begin < count) out.back().end = count;  // not reached: every device took its share
  return out;
}

}  // namespace sgemm
