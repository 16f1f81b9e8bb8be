#include "server/service/compute_slot_policy.h"

#include <algorithm>

namespace sgemm {

bool ComputeSlotPolicy::start_early(const UploadFacts& f) const {
  if (budget_.count() <= 0 || !f.uploads_a || f.has_c || f.yields > 0 || f.a_received == 0) return false;
  if (f.b_received < f.b_elements) return false;
  // The engine may wait for A while it holds a slot: only when the rest of A
  // is due well within the budget at the rate seen so far.
  const double rate = double(f.bytes_in) / std::max(f.seconds_since_first_data, 1e-6);  // bytes/s
  const double left_bytes = double(f.a_elements - f.a_received) * sizeof(float);
  return left_bytes / rate <= 0.5 * std::chrono::duration<double>(budget_).count();
}

ComputeSlotPolicy::Way ComputeSlotPolicy::complete(Receiver receiver, bool striped,
                                                   const std::function<double()>& estimate_ms) const {
  if (striped || receiver == Receiver::kOther) return Way::kQueued;
  if (receiver == Receiver::kRing) return Way::kHere;
  if (inline_ms_ <= 0) return Way::kQueued;
  const double est = estimate_ms();
  return est >= 0 && est <= inline_ms_ ? Way::kHere : Way::kQueued;
}

void SentRows::on_yield() {
  skip_ = reported_;
  std::sort(skip_.begin(), skip_.end());
  std::vector<std::pair<int64_t, int64_t>> merged;
  for (const auto& r : skip_) {
    if (!merged.empty() && r.first <= merged.back().second)
      merged.back().second = std::max(merged.back().second, r.second);
    else
      merged.push_back(r);
  }
  skip_ = std::move(merged);
}

}  // namespace sgemm
