#include "server/engine/engine_factory.h"

#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <utility>

#include "server/engine/cpu_engine.h"
#include "server/engine/cuda/cuda_cluster_plane.h"
#include "server/engine/cuda/cuda_engine.h"

namespace sgemm {

bool parse_backend_choice(std::string_view text, BackendChoice* out) {
  if (text == "auto")
    *out = BackendChoice::kAuto;
  else if (text == "cuda")
    *out = BackendChoice::kCuda;
  else if (text == "cpu")
    *out = BackendChoice::kCpu;
  else
    return false;
  return true;
}

std::vector<std::string> built_backends() { return {"cuda", "cpu"}; }

StatusOr<BuiltEngine> make_engine(const EngineOptions& options) {
  BuiltEngine built;
  CpuEngineOptions cpu_options;
  cpu_options.threads = options.cpu_threads;
  if (options.resident_bytes) cpu_options.resident_bytes = *options.resident_bytes;
  if (options.backend == BackendChoice::kCpu) {
    built.engine = make_cpu_engine(cpu_options);
    built.note = "cpu backend requested (--backend cpu)";
    return built;
  }
  CudaEngineOptions cuda_options;
  cuda_options.devices = options.devices;
  cuda_options.default_kernel = options.kernel;
  cuda_options.log = options.log;
  if (options.pinned_pool_bytes) cuda_options.pinned_pool_bytes = *options.pinned_pool_bytes;
  if (options.resident_bytes) cuda_options.resident_bytes = *options.resident_bytes;
  cuda_options.lanes_per_device = options.lanes_per_gpu;
  cuda_options.warm_up = options.warm_up;
  cuda_options.kernel_autotune = options.kernel_autotune;
  cuda_options.kernel_speeds = options.kernel_speeds;
  cuda_options.collective_timeout = std::chrono::milliseconds(int64_t(options.collective_timeout_s * 1000));
  auto cuda = make_cuda_engine(cuda_options);
  if (cuda.ok()) {
    built.engine = std::move(cuda).value();
    built.note = "cuda backend on " + std::to_string(built.engine->info().devices.size()) + " GPU(s)";
    return built;
  }
  if (options.backend == BackendChoice::kCuda) return cuda.status().with_context("--backend cuda");
  built.note = "no usable GPU (" + cuda.status().message() + "); falling back to the CPU backend (OpenBLAS)";
  built.fell_back = true;
  built.engine = make_cpu_engine(cpu_options);
  return built;
}

StatusOr<std::shared_ptr<const KernelSpeeds>> load_kernel_speeds(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return InvalidArgument("--kernel-speeds " + path + ": cannot read the file");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  StatusOr<KernelSpeeds> speeds = KernelSpeeds::built_in_and(text);
  if (!speeds.ok()) return InvalidArgument("--kernel-speeds " + path + ": " + speeds.status().message());
  return std::make_shared<const KernelSpeeds>(std::move(*speeds));
}

StatusOr<std::unique_ptr<ClusterDataPlane>> make_cluster_plane(const EngineOptions& options) {
  CudaClusterPlaneOptions po;
  po.devices = options.devices;
  po.log = options.log;
  return make_cuda_cluster_plane(po);
}

}  // namespace sgemm
