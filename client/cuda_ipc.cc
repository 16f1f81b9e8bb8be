#include "client/cuda_ipc.h"

#include <dlfcn.h>

#include <utility>

namespace sgemm {

namespace {

constexpr int kMemcpyHostToDevice = 1;  // cudaMemcpyKind values
constexpr int kMemcpyDeviceToHost = 2;
constexpr std::size_t kIpcHandleSize = 64;  // sizeof(cudaIpcMemHandle_t)

template <typename F>
bool resolve(void* lib, const char* name, F* f) {
  *f = reinterpret_cast<F>(dlsym(lib, name));
  return *f != nullptr;
}

}  // namespace

StatusOr<std::shared_ptr<CudaRuntime>> CudaRuntime::load() {
  std::shared_ptr<CudaRuntime> rt(new CudaRuntime());
  for (const char* name : {"libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"}) {
    rt->lib_ = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (rt->lib_) break;
  }
  if (!rt->lib_)
    return Unavailable("device buffers need the CUDA runtime (libcudart.so) on this host; none could be loaded");
  void* l = rt->lib_;
  if (!resolve(l, "cudaMalloc", &rt->malloc_) || !resolve(l, "cudaFree", &rt->free_) ||
      !resolve(l, "cudaMemcpy", &rt->memcpy_) || !resolve(l, "cudaSetDevice", &rt->set_device_) ||
      !resolve(l, "cudaGetDeviceCount", &rt->device_count_) || !resolve(l, "cudaIpcGetMemHandle", &rt->ipc_get_) ||
      !resolve(l, "cudaDeviceGetPCIBusId", &rt->bus_id_) || !resolve(l, "cudaDeviceSynchronize", &rt->synchronize_) ||
      !resolve(l, "cudaGetErrorString", &rt->error_string_))
    return Unavailable("the CUDA runtime loaded lacks a function device buffers need");
  return rt;
}

CudaRuntime::~CudaRuntime() {
  if (lib_) dlclose(lib_);
}

Status CudaRuntime::check(int err, const char* what) const {
  if (err == 0) return Status::Ok();
  return Unavailable(std::string(what) + " failed: " + error_string_(err));
}

int CudaRuntime::device_count() const {
  int n = 0;
  return device_count_(&n) == 0 ? n : 0;
}

StatusOr<std::unique_ptr<DeviceAllocation>> CudaRuntime::allocate(int device, int64_t bytes) {
  SGEMM_RETURN_IF_ERROR(check(set_device_(device), "cudaSetDevice"));
  void* ptr = nullptr;
  SGEMM_RETURN_IF_ERROR(check(malloc_(&ptr, std::size_t(bytes)), "cudaMalloc"));
  char handle[kIpcHandleSize] = {};
  char bus[32] = {};
  Status st = check(ipc_get_(handle, ptr), "cudaIpcGetMemHandle");
  if (st.ok()) st = check(bus_id_(bus, int(sizeof bus), device), "cudaDeviceGetPCIBusId");
  std::unique_ptr<DeviceAllocation> a(new DeviceAllocation(shared_from_this(), device, ptr, bytes,
                                                           std::string(handle, kIpcHandleSize), std::string(bus)));
  SGEMM_RETURN_IF_ERROR(st);
  return a;
}

DeviceAllocation::~DeviceAllocation() {
  if (ptr_ && rt_->set_device_(device_) == 0) (void)rt_->free_(ptr_);
}

DeviceBufferMatrix DeviceAllocation::matrix(int64_t offset, int64_t ld) const {
  return DeviceBufferMatrix{handle_, bus_id_, offset, ld, false};
}

Status DeviceAllocation::upload(const void* host, int64_t bytes) {
  SGEMM_RETURN_IF_ERROR(rt_->check(rt_->set_device_(device_), "cudaSetDevice"));
  SGEMM_RETURN_IF_ERROR(rt_->check(rt_->memcpy_(ptr_, host, std::size_t(bytes), kMemcpyHostToDevice), "cudaMemcpy"));
  return rt_->check(rt_->synchronize_(), "cudaDeviceSynchronize");
}

Status DeviceAllocation::download(void* host, int64_t bytes) const {
  SGEMM_RETURN_IF_ERROR(rt_->check(rt_->set_device_(device_), "cudaSetDevice"));
  return rt_->check(rt_->memcpy_(host, ptr_, std::size_t(bytes), kMemcpyDeviceToHost), "cudaMemcpy");
}

}  // namespace sgemm
