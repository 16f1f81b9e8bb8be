// The engine runs one GEMM request on this host's compute (GPUs or CPU).
// It knows nothing of protobuf or gRPC: the service (server/service/) converts
// wire messages into a GemmJob and the GemmReport back.
//
// Streaming: a job may start before all of its input has arrived. The engine
// calls `feed->wait_for(matrix, elements)` before it reads a prefix of a
// matrix (row-major, so a prefix is a set of whole or partial rows), and calls
// `sink->rows_ready(begin, end)` once rows [begin, end) of C are final in
// host memory, so the service can send them while later rows are computed.
//
// Threads: run() is called from a service thread, one per request, and may be
// called concurrently; each implementation says how it shares devices.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "kernels/gemm_args.h"
#include "server/engine/host_buffer.h"
#include "server/planner/plan.h"

namespace sgemm {

enum class MatrixId { kA = 0, kB = 1, kC = 2 };

class InputFeed {
 public:
  virtual ~InputFeed() = default;
  // Blocks until the first `elements` elements of `matrix` are in host memory.
  // Returns the upload's error (cancelled, malformed, deadline) if it failed.
  virtual Status wait_for(MatrixId matrix, int64_t elements) = 0;
};

class OutputSink {
 public:
  virtual ~OutputSink() = default;
  // Rows [row_begin, row_end) of C are final. Called in any order, possibly
  // from engine threads; each row is reported once.
  virtual void rows_ready(int64_t row_begin, int64_t row_end) = 0;
};

// Set by the service when a request's deadline passes or its client goes away;
// engines read it at every block boundary (and while they wait for their
// GPUs) and stop with status(). Thread-safe; the first cancel() wins.
class CancelToken {
 public:
  void cancel(Status why) {
    std::lock_guard lock(mu_);
    if (cancelled_.load(std::memory_order_relaxed)) return;
    why_ = std::move(why);
    cancelled_.store(true, std::memory_order_release);
  }
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }
  // OK while not cancelled, else the reason given to cancel().
  Status status() const {
    if (!cancelled()) return Status::Ok();
    std::lock_guard lock(mu_);
    return why_;
  }

 private:
  mutable std::mutex mu_;
  std::atomic<bool> cancelled_{false};
  Status why_;  // guarded by mu_
};

// Which implementation runs the product on a GPU (ignored by the CPU engine).
struct ExecOptions {
  std::string kernel;                    // "" = the engine's default, else a KernelKind name
  SplitMode split = SplitMode::kAuto;   // kAuto = the planner decides
};

struct GemmJob {
  GemmShape shape;
  float alpha = 1.0f;
  float beta = 0.0f;
  bool has_c = false;  // false: C starts as zeros (beta is then irrelevant)
  ExecOptions options;
  // Host matrices, row-major and dense (lda = k, ldb = n, ldc = n), allocated by
  // the engine's host_allocator(). `c` holds the input C when has_c and
  // receives the result.
  const float* a = nullptr;
  const float* b = nullptr;
  float* c = nullptr;
  InputFeed* feed = nullptr;  // null: all inputs are present
  OutputSink* sink = nullptr; // null: nobody listens for early rows
  const CancelToken* cancel = nullptr;  // null: the job is never cancelled
};

struct DeviceTiming {
  int device = -1;           // CUDA ordinal, -1 for the CPU
  std::string name;          // "NVIDIA H100 80GB HBM3", "cpu (OpenBLAS, 2 threads)"
  Shard shard;               // rows and K range this device computed
  double copy_in_ms = 0;
  double kernel_ms = 0;
  double reduce_ms = 0;
  double copy_out_ms = 0;
};

struct GemmReport {
  std::string backend;       // "cuda" or "cpu"
  std::string kernel;        // "pingpong", "cublas", "openblas"
  SplitMode split = SplitMode::kSingle;
  std::string plan_reason;   // why the planner chose this split
  std::vector<DeviceTiming> devices;
};

struct DeviceInfo {
  int index = -1;
  std::string name;
  int64_t memory_bytes = 0;
  int sm_count = 0;
  int compute_major = 0;
  int compute_minor = 0;
};

struct EngineInfo {
  std::string backend;                 // "cuda" or "cpu"
  std::vector<DeviceInfo> devices;
  std::vector<std::string> kernels;    // available kernels, default first
  std::string default_kernel;
};

class Engine {
 public:
  virtual ~Engine() = default;
  virtual EngineInfo info() const = 0;
  virtual HostAllocator& host_allocator() = 0;
  // Cheap checks before any data arrives (unknown kernel, split not possible).
  virtual Status validate(const GemmShape& shape, const ExecOptions& options) const = 0;
  virtual StatusOr<GemmReport> run(const GemmJob& job) = 0;
};

}  // namespace sgemm
