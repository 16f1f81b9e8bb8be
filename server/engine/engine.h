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

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/cancel_token.h"
#include "common/gemm_types.h"
#include "common/host_buffer.h"
#include "common/status.h"
#include "server/engine/batch.h"
#include "server/engine/device_memory.h"
#include "server/engine/resident_store.h"
#include "server/planner/plan.h"

namespace sgemm {

class KernelSpeeds;  // server/planner/kernel_speeds.h

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
  // BLAS's transa / transb (common/gemm_types.h): kT means the operand is
  // stored transposed (A k x m, B n x k) and the product uses its transpose.
  Op op_a = Op::kN;
  Op op_b = Op::kN;
  ExecOptions options;
  // Many products in one request (server/engine/batch.h); null: the one
  // product `shape`. With a batch, `shape` is the strided batch's shape, or a
  // group's first product's, and A, B and C are the concatenated operands.
  std::shared_ptr<const BatchSpec> batch;
  MatrixDims a_dims() const { return stored_a_dims(shape, op_a); }
  MatrixDims b_dims() const { return stored_b_dims(shape, op_b); }
};

// The shape and scalar rules every engine shares: m, n, k >= 1, alpha and
// beta finite. INVALID_ARGUMENT naming the field. Engines call it from
// validate(); nobody else needs to.
Status check_gemm_request(const GemmRequest& request);

// A validated request with its host matrices, run by Engine::run().
struct GemmJob {
  GemmRequest request;
  // Host matrices, row-major, allocated by the engine's host_allocator() or
  // registered with register_host_memory() (shared-memory regions). `c` holds
  // the input C when has_c and receives the result (in place). A and B are
  // stored as request.a_dims() / b_dims() say (transposed under kT).
  const float* a = nullptr;
  const float* b = nullptr;
  float* c = nullptr;
  // Leading dimensions in elements of the stored matrices; 0 = dense (the
  // stored width: k or m for A, n or k for B, n for C). Otherwise at least
  // the width (the service checks).
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t a_ld() const { return lda > 0 ? lda : request.a_dims().cols; }
  int64_t b_ld() const { return ldb > 0 ? ldb : request.b_dims().cols; }
  int64_t c_ld() const { return ldc > 0 ? ldc : request.shape.n; }
  // Operands the engine keeps (resident matrices, docs/resident.md), pinned
  // by the caller until run() returns: used instead of `a`, `b` and the input
  // C (then `c` is only where the result goes, dense). Dense, row-major.
  const ResidentMatrix* a_resident = nullptr;
  const ResidentMatrix* b_resident = nullptr;
  const ResidentMatrix* c_resident = nullptr;
  // Where each resident operand starts inside its resident matrix (a
  // submatrix, as a BLAS caller passes &X[row][col] with X's own leading
  // dimension): the operand is the a_dims() / b_dims() / m x n block at that
  // element. The service checks that the block lies inside the matrix.
  MatrixOffset a_at, b_at, c_at;
  // Operands in a caller's device memory (device_memory.h), held by the
  // caller until run() returns: used instead of `a`, `b` and the input C;
  // C goes to device->out when set, else to `c` (dense host memory).
  const DeviceOperands* device = nullptr;
  InputFeed* feed = nullptr;            // null: all inputs are present
  OutputSink* sink = nullptr;           // null: nobody listens for early rows
  const CancelToken* cancel = nullptr;  // null: the job is never cancelled
  // Time zero of the report's steps (Step::start_ms): the service passes the
  // moment the request arrived, so steps line up with its own phases; unset =
  // the start of run().
  std::optional<std::chrono::steady_clock::time_point> origin;
};

// One timed operation on one device, for traces. Times are milliseconds since
// GemmJob::origin, on the host's steady clock (GPU events are placed on it
// through one reference event per device, good to some tens of microseconds).
enum class StepKind {
  kCopyIn,      // host -> device copy (h2d stream)
  kKernel,      // a GEMM block (compute stream)
  kCollective,  // an NCCL collective (comm stream): broadcast of B, reduce of C
  kCopyOut,     // device -> host copy (d2h stream)
  kWaitInput,   // the engine's thread waiting for the client's data (host)
};
const char* step_kind_name(StepKind kind);  // "copy_in", "kernel", "collective", "copy_out", "wait_input"

struct Step {
  StepKind kind = StepKind::kKernel;
  double start_ms = 0, end_ms = 0;
  int64_t bytes = 0;  // moved by a copy or collective; 0 for kernels
  // The part of C (rows) and of K this step works on.
  int64_t row_begin = 0, row_end = 0, k_begin = 0, k_end = 0;
  // A collective: when the last device of the job reached it (peer_ready_ms);
  // before that this device's collective was waiting for a peer.
  double peer_ready_ms = 0;
  // A kernel: the row it launched, an index into GemmReport::kernel_rows; -1
  // where the engine did not say (then the report's kernel_row names it).
  int kernel_row = -1;
};

// Where one device's time went, phase by phase, each split into working and
// waiting (docs/observability.md defines every figure):
//   *_ms        working: the sum of the phase's operations as its stream ran
//               them (CUDA events around each copy, kernel, collective).
//   copy_in_wait_ms   waiting for input: host time the engine spent blocked
//               on the client's data (InputFeed) before this device's copies.
//   kernel_wait_ms    the compute stream idle between its first and last
//               kernel: waiting for copies in (or for B's broadcast).
//   reduce_wait_ms    inside the collectives, waiting for a peer GPU to reach
//               them (this device's start to the last device's start); the
//               rest of the collective is reduce_ms.
//   copy_out_wait_ms  the d2h stream idle between its first and last copy:
//               waiting for kernels (or the reduce) to finish rows.
//   order_wait_ms     the job waiting for the NCCL order (another split job
//               held it), host time; the same for every device of the job.
struct DeviceTiming {
  int device = -1;   // CUDA ordinal, -1 for the CPU
  std::string name;  // "NVIDIA H100 80GB HBM3", "cpu (OpenBLAS, 2 threads)"
  Shard shard;       // rows and K range this device computed
  double copy_in_ms = 0;
  double kernel_ms = 0;
  double reduce_ms = 0;
  double copy_out_ms = 0;
  double copy_in_wait_ms = 0;
  double kernel_wait_ms = 0;
  double reduce_wait_ms = 0;
  double copy_out_wait_ms = 0;
  double order_wait_ms = 0;
  std::vector<Step> steps{};  // in issue order per stream; for traces
  std::string host{};         // the server process owning the GPU in a cluster (docs/cluster.md); "" = this one
};

// One concrete kernel (a registry row, GemmBackend::kernel_name, or "openblas")
// and how many launches of a job ran it.
struct KernelRowUse {
  std::string name;
  int64_t launches = 0;
};

// Adds `launches` launches of row `name` to `rows`, which lists each row once,
// in the order of its first launch; returns the row's index in `rows`.
int count_kernel_launches(std::vector<KernelRowUse>* rows, std::string_view name, int64_t launches = 1);
// The row of `rows` that ran the most launches (the first listed of those
// tied); "" when `rows` is empty.
std::string most_launched_row(const std::vector<KernelRowUse>& rows);

struct GemmReport {
  std::string backend;                        // "cuda" or "cpu"
  KernelKind kernel = KernelKind::kPingpong;  // the kernel family that ran (cuBLAS when it took blocks ours refused)
  // The concrete kernel that ran the most launches of the job (most_launched_row
  // of kernel_rows; GemmBackend::kernel_name, e.g.
  // "fp32x3_wgmma_coop_128x128_s4_promote1_splitA_group16"); "" where the engine
  // has no such name: report_kernel_name falls back to `kernel`.
  std::string kernel_row;
  // Every concrete kernel the job launched, in the order of first use, with its
  // launches: a job's row blocks, K blocks and halves of B are launches, and the
  // last, smaller block may run another row (or cuBLAS, where ours refused it).
  // Empty where the engine did not count them (then kernel_row names the row
  // chosen for the plan's largest block).
  std::vector<KernelRowUse> kernel_rows;
  Precision precision = Precision::kFp32;  // the arithmetic that ran (the CPU engine: fp32 for every request)
  SplitMode split = SplitMode::kSingle;
  std::string plan_reason;  // why the planner chose this split
  std::vector<DeviceTiming> devices;
  // The engine's own host time by step, in order, in ms (docs/observability.md,
  // "engine_host_ms"): where a small request's compute phase goes besides the GPU.
  std::vector<std::pair<std::string, double>> host_ms;
  // A batch (GemmRequest::batch): each product's outcome, in product order.
  std::vector<Status> product_status;
};

// One precision this backend offers and the kernel families that may serve it
// (server/planner/kernel_choice.h, kernels_serving); precision_contract says what it promises.
struct PrecisionContractInfo {
  Precision precision = Precision::kFp32;
  std::vector<KernelKind> kernels;
};

// The name summaries, timings.jsonl and traces give the kernel of `report`:
// its concrete kernel where known, else its family.
inline std::string report_kernel_name(const GemmReport& report) {
  return report.kernel_row.empty() ? std::string(kernel_kind_name(report.kernel)) : report.kernel_row;
}

struct EngineInfo {
  std::string backend;  // "cuda" or "cpu"
  std::vector<DeviceInfo> devices;
  std::vector<KernelKind> kernels;                    // available kernels, the configured default first
  KernelKind default_kernel = KernelKind::kPingpong;  // used where the measured kernel speeds have no rate
  // The measured kernel speeds the kernel choice reads (server/planner/kernel_speeds.h);
  // null: the built-in ones. A wrapper (the cluster engine) chooses with the same.
  std::shared_ptr<const KernelSpeeds> kernel_speeds;
  std::vector<Precision> precisions;             // the arithmetic this backend offers, fp32 first
  std::vector<PrecisionContractInfo> contracts;  // per precision offered: the kernels that serve it
  double startup_ms = 0;                         // the engine's start-up, warm-up included (0: not measured)
  int64_t pinned_pool_bytes = 0;                 // page-locked host memory set aside at start-up for request buffers
  // Per device (same order): "" while healthy, else why it was taken out of
  // service (a sticky CUDA error, a failed collective). Empty = all healthy.
  std::vector<std::string> unhealthy;
  bool serving() const {  // some device can still run requests
    for (std::size_t i = 0; i < devices.size(); ++i)
      if (i >= unhealthy.size() || unhealthy[i].empty()) return true;
    return devices.empty();
  }
};

// Every ability is pure virtual, the optional ones included (host-memory
// locking, resident matrices, the cost estimate): an engine, and above all a
// wrapper such as the cluster's, answers each one explicitly, so none can be
// dropped by falling through to a default.
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
  // The largest leading dimension (elements) a job may carry: the service
  // refuses a larger one (INVALID_ARGUMENT naming the field) before any data
  // moves. The integer the backend's libraries index with (OpenBLAS's
  // blasint, cuBLAS's int).
  virtual int64_t max_leading_dimension() const = 0;
  // The engine's estimate of run(job) in ms, inputs in host memory; negative:
  // no estimate, or run() would now wait for another job (then the service
  // never computes the job on its own thread).
  virtual double estimate_ms(const GemmJob& job) const = 0;

  // Host memory the caller owns (a mapped shared-memory region) that jobs will
  // read and write: the engine page-locks it for its devices so copies go
  // straight from and into it (CUDA: cudaHostRegister, portable to every
  // device; the CPU engine has nothing to do). `data` page-aligned. Paired
  // with unregister_host_memory(data) once no job uses it. Thread-safe.
  // RESOURCE_EXHAUSTED when the memory cannot be locked.
  virtual Status register_host_memory(void* data, std::size_t bytes) = 0;
  virtual Status unregister_host_memory(void* data) = 0;

  // ---- Resident matrices (docs/resident.md) -------------------------------
  // The engine's store of resident matrices (names, pins, LRU, budgets);
  // null when the engine keeps none: the service then answers
  // FAILED_PRECONDITION.
  virtual ResidentStore* resident_store() = 0;
  // Room for a new resident matrix of `bytes`, on the location the engine
  // chooses for it (a GPU with the most room; host memory on the CPU engine),
  // evicting as the store's rules allow. RESOURCE_EXHAUSTED naming
  // --resident-bytes. `what` names the request in that message.
  StatusOr<ResidentBytes> reserve_resident(int64_t bytes, std::string_view what) {
    ResidentStore* store = resident_store();
    if (!store) return FailedPrecondition("this backend keeps no resident matrices");
    return store->reserve(store->roomiest_location(), bytes, what);
  }
  // The data of a new resident matrix: `rows` x `cols` dense fp32 in `host`
  // (from host_allocator()), charged to `bytes` (from reserve_resident()).
  // The CPU engine keeps the buffer; the CUDA engine copies it to the GPU the
  // bytes were reserved on and lets the buffer go. Thread-safe.
  virtual StatusOr<std::shared_ptr<ResidentData>> make_resident(std::shared_ptr<HostBuffer> host, int64_t rows,
                                                                int64_t cols, ResidentBytes bytes) = 0;

  // ---- Device buffers (device_memory.h) -----------------------------------
  // Access to other processes' device memory on this host (CUDA IPC); null
  // when the engine has no GPUs: the service then answers FAILED_PRECONDITION.
  virtual DeviceMemoryAccess* device_memory() = 0;
};

}  // namespace sgemm
