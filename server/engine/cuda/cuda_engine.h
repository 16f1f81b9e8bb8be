// The multi-GPU CUDA engine: runs each GemmJob on one GPU or split across the
// pool (row split or K split, chosen by the planner), pipelined so copies of
// one block overlap the kernel of another. Design: docs/engine.md.
//
// Ownership and threads: the engine owns the device pool (streams, events,
// GemmBackends, memory pools; server/devices/), the pinned host pool it hands
// out through host_allocator(), and the NCCL communicator (server/comm/, only
// with more than one device). run() is thread-safe and is called from many
// service threads at once: a single-GPU job leases one lane of one device
// (waiting while all lanes there are busy); a split job first takes the
// communicator's order mutex, so NCCL collectives of different jobs never
// interleave, then one lane on every device. Every one of those waits, and
// the wait for the GPUs, polls GemmJob::cancel. rows_ready() is called on the
// thread that called run().
//
// Faults (docs/lifecycle.md#gpu-faults): a sticky CUDA error on a device, or
// an asynchronous NCCL error on its rank, marks that device unhealthy; the
// job fails with UNAVAILABLE naming it, and later jobs are planned over the
// healthy devices only (the communicator rebuilt over them). A split job past
// `collective_timeout` has its communicator aborted by a watchdog thread.
// SGEMM_FAULT_INJECT (server/devices/device_health.h) injects such faults.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/gemm_types.h"
#include "common/status.h"
#include "server/engine/engine.h"
#include "server/planner/kernel_speeds.h"
#include "server/planner/plan.h"

namespace sgemm {

struct CudaEngineOptions {
  std::vector<int> devices;  // CUDA ordinals to own; empty = every visible GPU
  // Kernel where the measured kernel speeds have no rate for a shape's class
  // (server/planner/kernel_choice.h); nullopt = pingpong.
  std::optional<KernelKind> default_kernel;
  int lanes_per_device = 2;  // concurrent streams (requests) per GPU

  // Released pinned host memory kept for reuse by host_allocator() (8 GiB).
  std::size_t pinned_cache_bytes = std::size_t(8) << 30;
  // Page-locked memory pinned at start-up, from which request buffers are
  // carved before any is allocated fresh (the first 16384^3 request's upload
  // otherwise pays for pinning its 3 GiB). 0 = none: every buffer is pinned
  // when first needed (the library default, so tests and benchmarks pin
  // nothing they do not use; sgemm-server's --pinned-pool-bytes is 4 GiB).
  std::size_t pinned_pool_bytes = 0;
  // Warm start: one small product per kernel on every lane before serving
  // (DevicePool::warm_up), so the first request does not load kernels or
  // initialise cuBLAS.
  bool warm_up = true;
  // Kernel choice by measurement (kernel_tuner.h, docs/engine.md): an fp32
  // request that names no kernel runs the measured speeds' pick for the shape
  // of its largest pipeline block, unless the other fp32 kernel, timed against
  // it on the GPU the first time that shape comes, was more than 2% faster.
  // Off: the measured speeds alone decide (sgemm-server --no-kernel-autotune).
  bool kernel_autotune = true;
  // The measured kernel speeds the fp32 choice reads (kernel_speeds.h); null =
  // the built-in ones.
  std::shared_ptr<const KernelSpeeds> kernel_speeds;
  // Device scratch one such timing may allocate (A, B and C of the block and
  // the kernels' workspace); larger shapes keep the measured speeds' pick.
  std::size_t autotune_max_bytes = std::size_t{768} << 20;
  // Rows per block of the row pipeline (copy in, kernel, copy out, rows_ready);
  // 0 = the shard's rows / planner.pipeline_chunks, rounded up to 128, >= 512.
  int64_t chunk_rows = 0;
  // K per block of the K-split pipeline (copy in, kernel accumulating into the
  // partial C); 0 = the slice / planner.pipeline_chunks, rounded up to 16, >= 2048
  // (>= 16384 when m*n <= 4 Mi elements).
  int64_t chunk_k = 0;
  // How K-split partial Cs are summed: reduce-scatter (every GPU copies out its
  // own rows; default) or reduce to the first GPU, which copies out all of C.
  KReduce k_reduce = KReduce::kReduceScatter;
  // Blocks (of rows, or of K) a device may have issued ahead of the one it is
  // running. 3 keeps copies and kernels overlapped; a cancelled request or one
  // past its deadline stops after at most this many more blocks per device.
  int blocks_ahead = 3;
  // A batch (server/engine/batch.h) runs on each GPU in at most this many
  // pieces of its products (about 4 MiB of operands each), so one piece's
  // copies overlap another's launch; 1: one batched launch per GPU, after
  // every copy in (server/engine/cuda/batch_executor.h).
  int batch_max_pieces = 4;

  // Cost-model capabilities given to the planner for every device, measured by
  // engine-bench on 2 x H200 and sgemm-bench on H100 (docs/engine.md, 2026-11-22):
  // ping-pong fp32 46-48 TFLOP/s, pinned host<->device 53-55 GB/s per GPU,
  // NCCL broadcast of B over NVLink 305-318 GB/s.
  double gpu_tflops = 47.0;
  // The planner's rate for the other precisions, one H100, sgemm-bench
  // 2026-11-22 (docs/kernels.md): cuBLAS TF32 389-412 TFLOP/s at 4096-8192,
  // fp32x3 115-117 TFLOP/s.
  double tf32_tflops = 390.0;
  double fp32x3_tflops = 115.0;
  double host_link_gbps = 54.0;
  double peer_gbps = 310.0;
  PlannerOptions planner;  // split geometry and cost constants

  // A job that spans the pool must finish within this once it holds the
  // communicator; past it the communicator is aborted (ncclCommAbort), the
  // job fails (UNAVAILABLE) and the communicator is rebuilt over the healthy
  // devices. Bounds the whole split job, so it must exceed the longest one.
  std::chrono::milliseconds collective_timeout{60000};

  // Device memory per GPU for resident matrices (docs/resident.md,
  // --resident-bytes): 8 GiB, a tenth of an H100's. Matrix bytes are counted
  // (rows x cols x 4; the padding of rows to 16 bytes is not).
  int64_t resident_bytes = int64_t{8} << 30;

  // Start-up and fallback messages; null = silent. Called from any thread.
  std::function<void(std::string_view)> log;
};

// UNAVAILABLE when no GPU (or no GEMM backend) is usable; INVALID_ARGUMENT for
// bad options (unknown default_kernel, an ordinal that is not visible).
StatusOr<std::unique_ptr<Engine>> make_cuda_engine(const CudaEngineOptions& options);

}  // namespace sgemm
