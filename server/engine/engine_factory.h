// Chooses and builds the engine sgemm-server runs: the multi-GPU CUDA engine
// or the CPU engine, with `auto` falling back to the CPU when no GPU is usable.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/gemm_types.h"
#include "server/engine/cluster_plane.h"
#include "server/engine/engine.h"
#include "server/planner/kernel_speeds.h"

namespace sgemm {

enum class BackendChoice { kAuto, kCuda, kCpu };

bool parse_backend_choice(std::string_view text, BackendChoice* out);

struct EngineOptions {
  BackendChoice backend = BackendChoice::kAuto;  // auto: cuda when a GPU is usable, else cpu
  std::vector<int> devices;                      // CUDA ordinals; empty = every visible GPU
  std::optional<KernelKind> kernel;              // default GPU kernel; nullopt = the engine's (pingpong)
  int cpu_threads = 0;                           // OpenBLAS threads; 0 = all cores
  std::optional<std::size_t> pinned_pool_bytes;  // cuda: pinned at start-up; nullopt = the engine's default (none)
  int lanes_per_gpu = 2;                         // cuda: requests one GPU runs at once (--lanes-per-gpu)
  bool warm_up = true;                           // cuda: a small product per kernel and lane before serving
  bool kernel_autotune = true;  // cuda: time both fp32 kernels on each new kernel shape (docs/engine.md)
  // cuda: the measured kernel speeds the fp32 kernel choice reads; null = the
  // built-in ones (load_kernel_speeds adds a file's rows to them).
  std::shared_ptr<const KernelSpeeds> kernel_speeds;
  // Resident matrices (docs/resident.md, --resident-bytes): device memory
  // per GPU (cuda), host memory (cpu); nullopt = the engine's default
  // (8 GiB per GPU, 1 GiB on cpu).
  std::optional<int64_t> resident_bytes;
  double collective_timeout_s = 60;           // a split job's collectives must finish within this, else the
                                              // NCCL communicator is aborted and rebuilt (--collective-timeout)
  std::function<void(std::string_view)> log;  // engine start-up and fallback messages; null = silent
};

struct BuiltEngine {
  std::unique_ptr<Engine> engine;
  std::string note;  // why this backend (e.g. "no usable GPU: ... ; falling back to the CPU")
  bool fell_back = false;
};

StatusOr<BuiltEngine> make_engine(const EngineOptions& options);

// The built-in kernel speeds and the rows of the file at `path` (sgemm-server
// --kernel-speeds); INVALID_ARGUMENT naming the file, and the line and field
// that are wrong.
StatusOr<std::shared_ptr<const KernelSpeeds>> load_kernel_speeds(const std::string& path);

// The data plane of cluster mode on options.devices (docs/cluster.md): this
// process's GPUs as NCCL ranks. UNAVAILABLE without a usable GPU.
StatusOr<std::unique_ptr<ClusterDataPlane>> make_cluster_plane(const EngineOptions& options);

// Backends compiled into this build ("cuda", "cpu").
std::vector<std::string> built_backends();

}  // namespace sgemm
