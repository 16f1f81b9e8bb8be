// Single GPU: the row pipeline on one lane (no broadcast: B comes in whole).
#include "server/engine/cuda/job_run.h"
#include "server/engine/cuda/split_executor.h"

namespace sgemm {
namespace {

Status issue(JobRun& run) {
  if (run.works().size() != 1)
    return Internal("single-GPU executor given " + std::to_string(run.works().size()) + " shards");
  return issue_row_pipeline(run);
}

}  // namespace

const SplitExecutor kSingleExecutor{SplitMode::kSingle, /*spans_pool=*/false, issue};

}  // namespace sgemm
