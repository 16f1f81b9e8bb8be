// A Multiply's operands in a caller's device memory (CUDA IPC,
// docs/transport.md "Device buffers"): the header's DeviceBufferRefs,
// converted (device_refs_from_proto), checked before anything is opened
// (check_device_refs), then opened through the registry of the caller's
// connection (device_handles.h) and resolved into the job's DeviceOperands
// (bind_device_operands).
//
// Rules (INVALID_ARGUMENT naming the field): when any ref is set, A and B must
// be device buffers, C must be one exactly when has_c, and neither regions nor
// handles may be named; operands are untransposed and the request has one
// stream; an ipc_handle has 64 bytes; the device is named; offsets are >= 0
// and a multiple of 4; ld is 0 (dense) or at least the width and at most the
// engine's max_leading_dimension(); each matrix lies inside its allocation;
// the output shares bytes with no input but C's own (C in place).
//
// Threads: pure functions, plus the registry's own locking.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/status.h"
#include "server/engine/device_memory.h"
#include "server/engine/engine.h"
#include "sgemm/v1/sgemm.pb.h"

namespace sgemm {

struct DeviceRef {
  std::string ipc_handle;  // the bytes of a cudaIpcMemHandle_t
  std::string device;      // the GPU's UUID or PCI bus id
  int64_t offset = 0;      // bytes from the allocation's start
  int64_t ld = 0;          // elements; 0 = dense
  bool release = false;    // close the server's mapping once the request ends
};

struct DeviceRefs {
  std::optional<DeviceRef> a, b, c, out;
  bool any() const { return a || b || c || out; }
};

DeviceRefs device_refs_from_proto(const sgemm::v1::GemmHeader& h);

// Everything that can be checked before a handle is opened. `stripes` is the
// header's; `other_sources` names regions or handles the header also names
// ("" when none).
Status check_device_refs(const GemmRequest& request, const DeviceRefs& refs, int stripes,
                         const std::string& other_sources, int64_t max_ld);

class DeviceHandleRegistry;
struct DeviceCaller;

// Opens (or finds open) every ref through `registry` for `caller` and
// resolves the layouts against the allocations' sizes.
StatusOr<DeviceOperands> bind_device_operands(DeviceHandleRegistry& registry, const DeviceCaller& caller,
                                              const GemmRequest& request, const DeviceRefs& refs, int64_t max_ld);

}  // namespace sgemm
