// The CUDA IPC allocations this server holds open for its callers
// (docs/transport.md "Device buffers"). Opening a handle costs a
// cudaIpcOpenMemHandle (milliseconds: the driver maps the allocation), so the
// first request naming an allocation opens it and later requests of the same
// connection and client find it open.
//
// Rules:
//   - an allocation is open at most once in the server, whoever names it
//     (CUDA maps a handle once per process);
//   - it belongs to the client (--auth-tokens; "" without) and the Unix user
//     that opened it: another client or user naming it is PERMISSION_DENIED,
//     as long as it is open;
//   - it stays open while a connection that named it is open and has not
//     released it (DeviceBufferRef.release); the connection table's close
//     calls drop_connection(); a request running on it holds its mapping by
//     reference and finishes;
//   - a connection holds at most `max_per_connection` allocations
//     (RESOURCE_EXHAUSTED naming the field beyond that: release some).
//
// Threads: every method is thread-safe (mu_); an open runs under mu_, so two
// requests naming a new allocation at once open it once.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "common/status.h"
#include "common/thread_annotations.h"
#include "server/engine/device_memory.h"
#include "server/service/device_operands.h"

namespace sgemm {

// Who names a device buffer.
struct DeviceCaller {
  bool unix_socket = false;  // false: device buffers are refused (TCP)
  uint64_t connection = 0;   // the Unix connection's id (unix_connections.h)
  uid_t uid = 0;             // its peer's user
  std::string client;        // the bearer token's client; "" without tokens
};

struct DeviceHandleOptions {
  int max_per_connection = 256;  // allocations one connection may hold open
};

class DeviceHandleRegistry {
 public:
  // `access` is the engine's (null: no GPUs, every acquire is refused).
  DeviceHandleRegistry(DeviceMemoryAccess* access, DeviceHandleOptions options = {})
      : access_(access), options_(options) {}

  // The allocation `ref` names, open for `caller`; `field` ("header.a_device")
  // names it in errors.
  StatusOr<std::shared_ptr<const OpenedDeviceMemory>> acquire(const DeviceCaller& caller, const std::string& field,
                                                              const DeviceRef& ref) SGEMM_EXCLUDES(mu_);
  // `caller`'s connection lets go of `ref`'s allocation; closed when no
  // connection holds it (and no request still uses it).
  void release(const DeviceCaller& caller, const DeviceRef& ref) SGEMM_EXCLUDES(mu_);
  // A connection closed: everything it held is let go.
  void drop_connection(uint64_t connection) SGEMM_EXCLUDES(mu_);
  int open_count() const SGEMM_EXCLUDES(mu_);  // allocations open now

 private:
  struct Entry {
    std::string client;
    uid_t uid = 0;
    std::shared_ptr<const OpenedDeviceMemory> memory;
    std::set<uint64_t> connections;
  };
  int held_by(uint64_t connection) const SGEMM_REQUIRES(mu_);

  DeviceMemoryAccess* const access_;
  const DeviceHandleOptions options_;
  mutable Mutex mu_;
  std::map<std::string, Entry> open_ SGEMM_GUARDED_BY(mu_);  // by the handle's bytes
};

// FAILED_PRECONDITION for a request naming device buffers on an engine without GPUs.
Status device_buffers_need_cuda(const std::string& field);
// FAILED_PRECONDITION for a request naming device buffers over TCP.
Status device_buffers_need_unix_socket(const std::string& field);

}  // namespace sgemm
