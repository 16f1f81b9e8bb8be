// Jobs whose operands sit in a caller's device memory (CUDA IPC,
// docs/transport.md "Device buffers"), and the opening of that memory. Private
// to the CUDA engine, which forwards GemmJobs with `device` set here.
//
// A job computes on the GPU that holds its output (else A's) straight from the
// caller's buffers: one kernel launch over the caller's pointers and leading
// dimensions, no copy. A request that names a split runs over every GPU of
// the pool, sharded by the planner (server/planner/): each other GPU receives
// its shard of the operands GPU to GPU (peer copies over NVLink, or PCIe peer
// to peer), computes, and sends its rows of C back the same way (row split);
// under the K split each GPU computes a partial C over its K slice and the
// partials are summed on the output's GPU (cublasSgeam after a peer copy).
// C goes into the caller's output buffer, or to the job's host `c`.
//
// Threads: run() is called concurrently from the engine's callers; lanes are
// leased from the DevicePool in pool order (as split jobs lease them), so two
// jobs never wait on each other's lanes in a cycle. open_ipc() is
// thread-safe. The summing handle of each GPU is used under its mutex.
#pragma once

#include <cublas_v2.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "common/gemm_types.h"
#include "common/status.h"
#include "server/devices/device_pool.h"
#include "server/engine/device_memory.h"
#include "server/engine/engine.h"
#include "server/engine/kernel_site.h"
#include "server/planner/plan.h"

namespace sgemm {

struct DeviceBufferJobOptions {
  KernelSite kernels;        // what the kernel choice is asked with: the engine's own
  PlannerOptions planner;    // shard geometry for a named split
  double gpu_tflops = 47.0;  // the planner's rates (CudaEngineOptions)
  double peer_gbps = 310.0;
};

class DeviceBufferJobs final : public DeviceMemoryAccess {
 public:
  // `pool` outlives this object.
  DeviceBufferJobs(DevicePool* pool, const DeviceBufferJobOptions& options) : pool_(pool), options_(options) {}
  ~DeviceBufferJobs() override;
  DeviceBufferJobs(const DeviceBufferJobs&) = delete;
  DeviceBufferJobs& operator=(const DeviceBufferJobs&) = delete;

  StatusOr<std::shared_ptr<const OpenedDeviceMemory>> open_ipc(const std::string& gpu, const std::string& ipc_handle,
                                                               const std::string& field) override;

  // Runs a validated job with job.device set.
  StatusOr<GemmReport> run(const GemmJob& job);

  // The CUDA ordinal of the GPU named `gpu` (UUID "GPU-..." or PCI bus id)
  // among the pool's; INVALID_ARGUMENT naming `field` otherwise.
  StatusOr<int> resolve_gpu(const std::string& gpu, const std::string& field) const;

 private:
  int index_of(int ordinal) const;
  // The cuBLAS handle that sums partial Cs on `device`, made on first use;
  // its mutex is held by the caller while it issues work with it.
  StatusOr<cublasHandle_t> sum_handle(int device, std::unique_lock<std::mutex>* lock);

  DevicePool* const pool_;
  const DeviceBufferJobOptions options_;
  std::mutex sum_mu_;
  std::map<int, cublasHandle_t> sum_handles_;  // guarded by sum_mu_ (and used under it)
};

}  // namespace sgemm
