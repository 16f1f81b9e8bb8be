#include "server/engine/cuda/split_executor.h"

namespace sgemm {

std::span<const SplitExecutor* const> split_executors() {
  static const SplitExecutor* const kTable[] = {&kSingleExecutor, &kRowsExecutor, &kKExecutor, &kClusterRowsExecutor,
                                                &kClusterKExecutor};
  return kTable;
}

const SplitExecutor* find_split_executor(SplitMode mode, bool spans_processes) {
  for (const SplitExecutor* e : split_executors())
    if (e->mode == mode && e->spans_processes == spans_processes) return e;
  return nullptr;
}

}  // namespace sgemm
