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

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/cancel_token.h"
#include "common/gemm_types.h"
#include "common/host_buffer.h"
#include "common/status.h"
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

// Which implementation runs the product.
struct ExecOptions {
  Precision precision = Precision::kFp32;  // kTf32 / kFp32x3 pick their kernel
  std::optional<KernelKind> kernel;        // fp32 only; nullopt = the engine's choice for the shape
  SplitMode split = SplitMode::kAuto;      // kAuto = the planner decides
};

// What a caller asks for, before any data: the one struct Engine::validate()
// checks, once, before the service reads a byte of the matrices.
struct GemmRequest {
  GemmShape shape;     // m, n, k >= 1
  float alpha = 1.0f;  // finite
  float beta = 0.0f;   // finite
  bool has_c = false;  // false: C starts as zeros (beta is then irrelevant)
  ExecOptions options;
};

// The shape and scalar rules every engine shares: m, n, k >= 1, alpha and
// beta finite. INVALID_ARGUMENT naming the field. Engines call it from
// validate(); nobody else needs to.
Status check_gemm_request(const GemmRequest& request);

// A validated request with its host matrices, run by Engine::run().
struct GemmJob {
  GemmRequest request;
  // Host matrices, row-major and dense (lda = k, ldb = n, ldc = n), allocated by
  // the engine's host_allocator(). `c` holds the input C when has_c and
  // receives the result.
  const float* a = nullptr;
  const float* b = nullptr;
  float* c = nullptr;
  InputFeed* feed = nullptr;            // null: all inputs are present
  OutputSink* sink = nullptr;           // null: nobody listens for early rows
  const CancelToken* cancel = nullptr;  // null: the job is never cancelled
};

struct DeviceTiming {
  int device = -1;   // CUDA ordinal, -1 for the CPU
  std::string name;  // "NVIDIA H100 80GB HBM3", "cpu (OpenBLAS, 2 threads)"
  Shard shard;       // rows and K range this device computed
  double copy_in_ms = 0;
  double kernel_ms = 0;
  double reduce_ms = 0;
  double copy_out_ms = 0;
  std::string host{};  // the server process owning the GPU in a cluster (docs/cluster.md); "" = this one
};

struct GemmReport {
  std::string backend;                        // "cuda" or "cpu"
  KernelKind kernel = KernelKind::kPingpong;  // the kernel that ran (cuBLAS when it took blocks ours refused)
  Precision precision = Precision::kFp32;     // the arithmetic that ran (the CPU engine: fp32 for every request)
  SplitMode split = SplitMode::kSingle;
  std::string plan_reason;  // why the planner chose this split
  std::vector<DeviceTiming> devices;
};

struct EngineInfo {
  std::string backend;  // "cuda" or "cpu"
  std::vector<DeviceInfo> devices;
  std::vector<KernelKind> kernels;                    // available kernels, the configured default first
  KernelKind default_kernel = KernelKind::kPingpong;  // used where the kernel-choice table has no row
  std::vector<Precision> precisions;                  // the arithmetic this backend offers, fp32 first
};

class Engine {
 public:
  virtual ~Engine() = default;
  virtual EngineInfo info() const = 0;
  virtual HostAllocator& host_allocator() = 0;
  // Everything that can be known before data moves: check_gemm_request(),
  // a kernel or split this backend lacks (FAILED_PRECONDITION), and whether
  // the kernel that would run can implement the shape (INVALID_ARGUMENT).
  virtual Status validate(const GemmRequest& request) const = 0;
  // Runs a job whose request validate() accepted; a job it would refuse is
  // our bug (INTERNAL). Stops with job.cancel's status when that is set.
  virtual StatusOr<GemmReport> run(const GemmJob& job) = 0;
};

}  // namespace sgemm
