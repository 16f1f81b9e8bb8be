// The CUDA runtime as the client needs it for device buffers (CUDA IPC,
// docs/transport.md "Device buffers"), loaded at run time with dlopen so the
// client builds, installs and runs where CUDA is absent: only
// `sgemm-client submit --transport cuda-ipc` asks for it.
//
// Ownership: a CudaRuntime keeps the library loaded for its life; a
// DeviceAllocation frees its memory when destroyed. Threads: one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "client/sgemm_client.h"
#include "common/status.h"

namespace sgemm {

class CudaRuntime;

// cudaMalloc'd memory on one GPU, exported for the server.
class DeviceAllocation {
 public:
  ~DeviceAllocation();
  DeviceAllocation(const DeviceAllocation&) = delete;
  DeviceAllocation& operator=(const DeviceAllocation&) = delete;
  void* data() const { return ptr_; }
  int64_t bytes() const { return bytes_; }
  // A matrix at byte `offset` with leading dimension `ld` (0 = dense), as the server names it.
  DeviceBufferMatrix matrix(int64_t offset = 0, int64_t ld = 0) const;
  Status upload(const void* host, int64_t bytes);
  Status download(void* host, int64_t bytes) const;

 private:
  friend class CudaRuntime;
  DeviceAllocation(std::shared_ptr<CudaRuntime> rt, int device, void* ptr, int64_t bytes, std::string handle,
                   std::string bus_id)
      : rt_(std::move(rt)),
        device_(device),
        ptr_(ptr),
        bytes_(bytes),
        handle_(std::move(handle)),
        bus_id_(std::move(bus_id)) {}
  std::shared_ptr<CudaRuntime> rt_;
  int device_;
  void* ptr_;
  int64_t bytes_;
  std::string handle_;  // cudaIpcMemHandle_t's bytes
  std::string bus_id_;  // the GPU's PCI bus id
};

class CudaRuntime : public std::enable_shared_from_this<CudaRuntime> {
 public:
  // Loads libcudart (libcudart.so, or a versioned name). UNAVAILABLE where
  // no CUDA runtime is installed.
  static StatusOr<std::shared_ptr<CudaRuntime>> load();
  ~CudaRuntime();
  int device_count() const;
  // `bytes` of device memory on CUDA device `device`, with its IPC handle.
  StatusOr<std::unique_ptr<DeviceAllocation>> allocate(int device, int64_t bytes);

 private:
  friend class DeviceAllocation;
  CudaRuntime() = default;
  Status check(int err, const char* what) const;
  void* lib_ = nullptr;
  int (*malloc_)(void**, std::size_t) = nullptr;
  int (*free_)(void*) = nullptr;
  int (*memcpy_)(void*, const void*, std::size_t, int) = nullptr;
  int (*set_device_)(int) = nullptr;
  int (*device_count_)(int*) = nullptr;
  int (*ipc_get_)(void*, void*) = nullptr;  // cudaIpcGetMemHandle(cudaIpcMemHandle_t*, void*)
  int (*bus_id_)(char*, int, int) = nullptr;
  int (*synchronize_)() = nullptr;
  const char* (*error_string_)(int) = nullptr;
};

}  // namespace sgemm
