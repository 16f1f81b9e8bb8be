#include "server/planner/strategy.h"

namespace sgemm {

std::span<const PlanStrategy* const> plan_strategies() {
  static const PlanStrategy* const kTable[] = {&kSingleStrategy, &kRowsStrategy, &kKStrategy};
  return kTable;
}

const PlanStrategy* find_plan_strategy(SplitMode mode) {
  for (const PlanStrategy* s : plan_strategies())
    if (s->mode == mode) return s;
  return nullptr;
}

}  // namespace sgemm
