// The opening of a caller's device memory (CUDA IPC) for DeviceBufferJobs
// (device_buffer_jobs.h): the GPU a request names, by UUID or PCI bus id, and
// the mapping of its handle, checked to be a whole device allocation on that GPU.
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cctype>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "kernels/cuda_status.h"
#include "server/engine/cuda/device_buffer_jobs.h"

namespace sgemm {
namespace {

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi -L prints it.
std::string uuid_string(const cudaUUID_t& u) {
  static constexpr int kGroups[] = {4, 2, 2, 2, 6};
  std::string s = "GPU-";
  int i = 0;
  for (int g = 0; g < 5; ++g) {
    if (g) s += '-';
    for (int j = 0; j < kGroups[g]; ++j, ++i) {
      char hex[3];
      std::snprintf(hex, sizeof hex, "%02x", static_cast<unsigned char>(u.bytes[i]));
      s += hex;
    }
  }
  return s;
}

// The driver's cuMemGetAddressRange (the size of the allocation a pointer is
// in), which the runtime does not offer. Looked up in the driver the runtime
// has loaded, so the server links no libcuda and starts (on the cpu backend)
// where no driver is installed. Null when it cannot be found.
using AddressRangeFn = int (*)(unsigned long long* base, std::size_t* size, unsigned long long ptr);
AddressRangeFn address_range() {
  static const AddressRangeFn fn = [] {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!lib) lib = dlopen("libcuda.so.1", RTLD_NOW);
    return lib ? reinterpret_cast<AddressRangeFn>(dlsym(lib, "cuMemGetAddressRange_v2")) : nullptr;
  }();
  return fn;
}

std::string lowercase(std::string s) {
  for (char& ch : s) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

// One allocation of another process, mapped into this one.
class IpcMapping final : public OpenedDeviceMemory {
 public:
  IpcMapping(int device, void* ptr, int64_t bytes) : device_(device), ptr_(ptr), bytes_(bytes) {}
  ~IpcMapping() override {
    // Jobs using it have ended: each holds the mapping until run() returns.
    if (cudaSetDevice(device_) == cudaSuccess) (void)cudaIpcCloseMemHandle(ptr_);
    (void)cudaGetLastError();
  }
  IpcMapping(const IpcMapping&) = delete;
  IpcMapping& operator=(const IpcMapping&) = delete;
  int device() const override { return device_; }
  std::byte* base() const override { return static_cast<std::byte*>(ptr_); }
  int64_t bytes() const override { return bytes_; }

 private:
  const int device_;
  void* const ptr_;
  const int64_t bytes_;
};

}  // namespace

StatusOr<int> DeviceBufferJobs::resolve_gpu(const std::string& gpu, const std::string& field) const {
  if (gpu.empty())
    return InvalidArgument(field +
                           ".device is empty: name the GPU holding the buffer by its UUID (\"GPU-...\") or PCI bus id");
  int ordinal = -1;
  if (lowercase(gpu).rfind("gpu-", 0) == 0) {
    for (int i = 0; i < pool_->size(); ++i) {
      cudaDeviceProp prop{};
      SGEMM_CUDA_TRY(cudaGetDeviceProperties(&prop, pool_->ordinal(i)));
      if (lowercase(uuid_string(prop.uuid)) == lowercase(gpu)) ordinal = pool_->ordinal(i);
    }
  } else {
    const cudaError_t e = cudaDeviceGetByPCIBusId(&ordinal, gpu.c_str());
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      ordinal = -1;
    }
  }
  if (ordinal < 0 || index_of(ordinal) < 0)
    return InvalidArgument(field + ".device '" + gpu +
                           "' is not one of this server's GPUs (give the UUID nvidia-smi -L prints, or the PCI bus "
                           "id from cudaDeviceGetPCIBusId)");
  return ordinal;
}

StatusOr<std::shared_ptr<const OpenedDeviceMemory>> DeviceBufferJobs::open_ipc(const std::string& gpu,
                                                                               const std::string& ipc_handle,
                                                                               const std::string& field) {
  if (ipc_handle.size() != sizeof(cudaIpcMemHandle_t))
    return InvalidArgument(field + ".ipc_handle has " + std::to_string(ipc_handle.size()) +
                           " bytes; a CUDA IPC handle has " + std::to_string(sizeof(cudaIpcMemHandle_t)));
  SGEMM_ASSIGN_OR_RETURN(const int ordinal, resolve_gpu(gpu, field));
  cudaIpcMemHandle_t handle;
  std::memcpy(&handle, ipc_handle.data(), sizeof handle);
  SGEMM_CUDA_TRY(cudaSetDevice(ordinal));
  void* ptr = nullptr;
  const cudaError_t e = cudaIpcOpenMemHandle(&ptr, handle, cudaIpcMemLazyEnablePeerAccess);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky: the device goes on serving
    return InvalidArgument(field + ".ipc_handle does not open on GPU " + gpu + " (" + cudaGetErrorName(e) + ": " +
                           cudaGetErrorString(e) +
                           "): it must come from cudaIpcGetMemHandle in a process on this host that still holds the "
                           "allocation, on that GPU");
  }
  // From here the mapping closes itself whatever fails.
  cudaPointerAttributes attr{};
  Status checked = SGEMM_CUDA_STATUS(cudaPointerGetAttributes(&attr, ptr));
  unsigned long long base = 0;
  std::size_t size = 0;
  if (checked.ok()) {
    const AddressRangeFn range = address_range();
    const int r = range ? range(&base, &size, reinterpret_cast<unsigned long long>(ptr)) : -1;
    if (r != 0)
      checked = Internal("cuMemGetAddressRange of an opened IPC allocation failed (CUresult " + std::to_string(r) +
                         (range ? ")" : "; the driver's function was not found)"));
  }
  const int holder = checked.ok() ? attr.device : ordinal;
  auto mapping = std::make_shared<const IpcMapping>(holder, ptr, int64_t(size));
  SGEMM_RETURN_IF_ERROR(checked);
  if (attr.type != cudaMemoryTypeDevice || holder != ordinal)
    return InvalidArgument(field + ".device names GPU " + gpu + ", but the allocation is on CUDA device " +
                           std::to_string(holder) + " of this server");
  if (base != reinterpret_cast<unsigned long long>(ptr))
    return Internal("an opened IPC allocation does not start at its mapping");
  return std::shared_ptr<const OpenedDeviceMemory>(std::move(mapping));
}

}  // namespace sgemm
