// The CUDA engine's batched and grouped products (server/engine/batch.h): one
// batched cuBLAS launch per GPU (kernels/cublas_batched_sgemm.h), the row of
// select_batch_kernel (server/planner/kernel_choice.h), the products split
// across the healthy GPUs in contiguous ranges balanced by flops
// (server/planner/batch_plan.h). Per GPU, in up to max_pieces pieces of its
// range (one launch each): a piece's slice of A, B (and C) in on the lane's
// h2d stream, its launch on compute, its C out on d2h, so the pieces' copies
// and launches overlap; every GPU is issued before any is waited for, so they
// run together. Products whose inputs fail check_finite are left out of the
// launches. A resident A or B shared by every product of a strided batch
// (BatchSpec::shared_a / shared_b) is not copied: each GPU of the batch gets
// a whole copy of it (ensure_layout, added beside the copies it has) and its
// launches read that copy with a stride of 0 and the copy's padded leading
// dimension.
//
// Ownership and threads: owned by the CudaEngine, destroyed before its
// DevicePool. run() and validate() may be called concurrently; each lane's
// cuBLAS handle (made the first time the lane runs a batch) is used only by
// the holder of that lane's lease. handles_ is guarded by mu_.
#pragma once

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "common/status.h"
#include "common/thread_annotations.h"
#include "kernels/cublas_batched_sgemm.h"
#include "server/devices/device_pool.h"
#include "server/engine/engine.h"
#include "server/engine/resident_store.h"
#include "server/planner/kernel_choice.h"

namespace sgemm {

class BatchExecutor {
 public:
  // `max_pieces` (>= 1): pieces of products per GPU (CudaEngineOptions::batch_max_pieces);
  // `store`: the engine's resident matrices (a shared operand's copies are charged to it).
  BatchExecutor(DevicePool* pool, ResidentStore* store, int max_pieces)
      : pool_(pool), store_(store), max_pieces_(std::max(1, max_pieces)) {}

  // check_batch_request(), the kernel row (select_batch_kernel), and cuBLAS's
  // int limits on each product and on a shared operand's padded leading
  // dimension (INVALID_ARGUMENT naming the product's field).
  Status validate(const GemmRequest& request) const;

  // Runs job.request.batch on the pool devices `healthy` (pool indices), or
  // on the least busy of them when the request asks for split single.
  StatusOr<GemmReport> run(const GemmJob& job, const std::vector<int>& healthy);

 private:
  StatusOr<BatchKernelSelection> select(const GemmRequest& request) const;
  // The lane's handle, made on first use (the lane's device current).
  StatusOr<CublasBatchedGemm*> handle_for(const Lane& lane);

  DevicePool* const pool_;
  ResidentStore* const store_;
  const int max_pieces_;
  Mutex mu_;
  std::map<const Lane*, std::unique_ptr<CublasBatchedGemm>> handles_ SGEMM_GUARDED_BY(mu_);
};

}  // namespace sgemm
