// Device buffers (docs/transport.md, "Device buffers"): matrices in the CUDA
// device memory of another process on this host, opened through CUDA IPC, and
// the operands of a GemmJob that reads and writes them where they are. No
// CUDA here: the service holds these types, the CUDA engine implements them.
//
// Ownership: an OpenedDeviceMemory is the mapping of one allocation into this
// process; it is closed (cudaIpcCloseMemHandle) when the last holder lets go,
// so a job holding its operands keeps them mapped until run() returns.
//
// Threads: open_ipc() is thread-safe; an OpenedDeviceMemory is immutable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/status.h"

namespace sgemm {

// The bytes of a cudaIpcMemHandle_t (CUDA's CU_IPC_HANDLE_SIZE).
inline constexpr std::size_t kIpcHandleBytes = 64;

class OpenedDeviceMemory {
 public:
  virtual ~OpenedDeviceMemory() = default;
  virtual int device() const = 0;       // this server's CUDA ordinal of the GPU holding it
  virtual std::byte* base() const = 0;  // device address of the allocation's first byte (in this process)
  virtual int64_t bytes() const = 0;    // the allocation's size
};

// One matrix inside an opened allocation: element (i, j) of the stored
// matrix at byte `offset` + 4 * (i * ld + j). The service checks the layout
// against the allocation's size before a job carries it.
struct DeviceMatrix {
  std::shared_ptr<const OpenedDeviceMemory> memory;
  int64_t offset = 0;  // bytes, a multiple of 4
  int64_t ld = 0;      // elements, resolved (>= the width)
  float* data() const { return reinterpret_cast<float*>(memory->base() + offset); }
  int device() const { return memory->device(); }
};

// A job's operands in device buffers (GemmJob::device). A and B always; the
// input C when has_c; `out` is where C is written (it may be C's own bytes),
// or absent: C goes to the job's host `c` (dense) and is reported through the
// sink as usual.
struct DeviceOperands {
  DeviceMatrix a, b;
  std::optional<DeviceMatrix> c, out;
};

// The engine's access to other processes' device memory. Engines without GPUs
// return null from Engine::device_memory().
class DeviceMemoryAccess {
 public:
  virtual ~DeviceMemoryAccess() = default;
  // Opens the allocation behind `ipc_handle` (kIpcHandleBytes bytes) on the GPU
  // named `gpu` (its UUID "GPU-..." or PCI bus id "0000:17:00.0"). `field`
  // names the operand in messages: INVALID_ARGUMENT for a GPU this engine does
  // not own or a handle that does not open on it.
  virtual StatusOr<std::shared_ptr<const OpenedDeviceMemory>> open_ipc(const std::string& gpu,
                                                                       const std::string& ipc_handle,
                                                                       const std::string& field) = 0;
};

}  // namespace sgemm
