// Device buffers for the CUDA IPC suites: memory this test process allocates
// on a GPU and exports, as a caller of the server does (the server must be
// another process: CUDA does not open a process's own IPC handles).
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "client/sgemm_client.h"

namespace sgemm::testing {

// The GPU's PCI bus id, as the server is told where a buffer is.
inline std::string pci_bus_id(int device) {
  char bus[32] = {};
  EXPECT_EQ(cudaDeviceGetPCIBusId(bus, int(sizeof bus), device), cudaSuccess);
  return bus;
}

// The GPU's UUID as nvidia-smi -L prints it ("GPU-xxxxxxxx-xxxx-...").
inline std::string gpu_uuid(int device) {
  cudaDeviceProp prop{};
  EXPECT_EQ(cudaGetDeviceProperties(&prop, device), cudaSuccess);
  static constexpr int kGroups[] = {4, 2, 2, 2, 6};
  std::string s = "GPU-";
  int i = 0;
  for (int g = 0; g < 5; ++g) {
    if (g) s += '-';
    for (int j = 0; j < kGroups[g]; ++j, ++i) {
      char hex[3];
      std::snprintf(hex, sizeof hex, "%02x", static_cast<unsigned char>(prop.uuid.bytes[i]));
      s += hex;
    }
  }
  return s;
}

// One cudaMalloc'd allocation with its IPC handle. Matrices are placed in it
// row by row at a byte offset with a leading dimension; the padding between
// rows holds a sentinel the server must leave alone.
class GpuAllocation {
 public:
  static constexpr float kSentinel = -12345.0f;
  GpuAllocation(int device, int64_t bytes) : device_(device), bytes_(bytes) {
    EXPECT_EQ(cudaSetDevice(device), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&ptr_, std::size_t(bytes)), cudaSuccess);
    cudaIpcMemHandle_t h;
    EXPECT_EQ(cudaIpcGetMemHandle(&h, ptr_), cudaSuccess);
    handle_.assign(reinterpret_cast<const char*>(&h), sizeof h);
    std::vector<float> fill(std::size_t(bytes / 4), kSentinel);
    EXPECT_EQ(cudaMemcpy(ptr_, fill.data(), fill.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~GpuAllocation() {
    cudaSetDevice(device_);
    cudaFree(ptr_);
  }
  GpuAllocation(const GpuAllocation&) = delete;
  GpuAllocation& operator=(const GpuAllocation&) = delete;

  int device() const { return device_; }
  const std::string& handle() const { return handle_; }
  // The reference a request carries; the GPU named by PCI bus id (or UUID).
  DeviceBufferMatrix at(int64_t offset, int64_t ld, bool by_uuid = false) const {
    return DeviceBufferMatrix{handle_, by_uuid ? gpu_uuid(device_) : pci_bus_id(device_), offset, ld, false};
  }
  // `dense` (rows x cols) written at `offset` with leading dimension `ld`.
  void put(const std::vector<float>& dense, int64_t rows, int64_t cols, int64_t offset, int64_t ld) {
    ASSERT_EQ(cudaSetDevice(device_), cudaSuccess);
    ASSERT_EQ(cudaMemcpy2D(static_cast<char*>(ptr_) + offset, std::size_t(ld) * 4, dense.data(), std::size_t(cols) * 4,
                           std::size_t(cols) * 4, std::size_t(rows), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  std::vector<float> get(int64_t rows, int64_t cols, int64_t offset, int64_t ld) const {
    std::vector<float> dense(std::size_t(rows * cols));
    EXPECT_EQ(cudaSetDevice(device_), cudaSuccess);
    EXPECT_EQ(cudaMemcpy2D(dense.data(), std::size_t(cols) * 4, static_cast<const char*>(ptr_) + offset,
                           std::size_t(ld) * 4, std::size_t(cols) * 4, std::size_t(rows), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return dense;
  }
  // Whether every float outside [offset, offset + span) of the rows' widths is still the sentinel
  // (the server wrote only the matrix's elements).
  bool only_matrix_written(int64_t rows, int64_t cols, int64_t offset, int64_t ld) const {
    std::vector<float> all(std::size_t(bytes_ / 4));
    EXPECT_EQ(cudaSetDevice(device_), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(all.data(), ptr_, all.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    const int64_t first = offset / 4;
    for (int64_t e = 0; e < int64_t(all.size()); ++e) {
      const int64_t rel = e - first;
      const bool inside = rel >= 0 && rel / ld < rows && rel % ld < cols;
      if (!inside && all[std::size_t(e)] != kSentinel) return false;
    }
    return true;
  }

 private:
  int device_;
  int64_t bytes_;
  void* ptr_ = nullptr;
  std::string handle_;
};

}  // namespace sgemm::testing
