#include "server/service/device_handles.h"

#include <utility>
#include <vector>

namespace sgemm {

Status device_buffers_need_cuda(const std::string& field) {
  return FailedPrecondition(field +
                            ": device buffers need the cuda backend (this server computes on the CPU and cannot "
                            "open CUDA IPC handles); send the matrices, or name shared-memory regions");
}

Status device_buffers_need_unix_socket(const std::string& field) {
  return FailedPrecondition(field +
                            ": device buffers (CUDA IPC) work only over the server's Unix socket, from a process on "
                            "its host; this call did not come over it (connect to unix:PATH, the server's "
                            "--listen unix: address)");
}

int DeviceHandleRegistry::held_by(uint64_t connection) const {
  int n = 0;
  for (const auto& [key, e] : open_) n += int(e.connections.count(connection));
  return n;
}

StatusOr<std::shared_ptr<const OpenedDeviceMemory>> DeviceHandleRegistry::acquire(const DeviceCaller& caller,
                                                                                  const std::string& field,
                                                                                  const DeviceRef& ref) {
  if (!access_) return device_buffers_need_cuda(field);
  if (!caller.unix_socket) return device_buffers_need_unix_socket(field);
  if (ref.ipc_handle.size() != kIpcHandleBytes)
    return InvalidArgument(field + ".ipc_handle has " + std::to_string(ref.ipc_handle.size()) +
                           " bytes; a CUDA IPC handle (cudaIpcMemHandle_t) has " + std::to_string(kIpcHandleBytes));
  MutexLock lock(mu_);
  if (auto it = open_.find(ref.ipc_handle); it != open_.end()) {
    Entry& e = it->second;
    if (e.client != caller.client || e.uid != caller.uid)
      return PermissionDenied(field + ".ipc_handle names an allocation another client holds open on this server");
    e.connections.insert(caller.connection);
    return e.memory;
  }
  if (held_by(caller.connection) >= options_.max_per_connection)
    return ResourceExhausted(field + ": this connection holds " + std::to_string(options_.max_per_connection) +
                             " device allocations open, the most it may; set release in the DeviceBufferRef of "
                             "allocations it no longer uses");
  SGEMM_ASSIGN_OR_RETURN(std::shared_ptr<const OpenedDeviceMemory> memory,
                         access_->open_ipc(ref.device, ref.ipc_handle, field));
  Entry e{caller.client, caller.uid, memory, {caller.connection}};
  open_.emplace(ref.ipc_handle, std::move(e));
  return memory;
}

void DeviceHandleRegistry::release(const DeviceCaller& caller, const DeviceRef& ref) {
  std::shared_ptr<const OpenedDeviceMemory> closing;  // unmapped after the lock is released
  MutexLock lock(mu_);
  auto it = open_.find(ref.ipc_handle);
  if (it == open_.end() || it->second.client != caller.client || it->second.uid != caller.uid) return;
  it->second.connections.erase(caller.connection);
  if (it->second.connections.empty()) {
    closing = std::move(it->second.memory);
    open_.erase(it);
  }
  lock.unlock();
}

void DeviceHandleRegistry::drop_connection(uint64_t connection) {
  std::vector<std::shared_ptr<const OpenedDeviceMemory>> closing;
  MutexLock lock(mu_);
  for (auto it = open_.begin(); it != open_.end();) {
    it->second.connections.erase(connection);
    if (it->second.connections.empty()) {
      closing.push_back(std::move(it->second.memory));
      it = open_.erase(it);
    } else {
      ++it;
    }
  }
  lock.unlock();
}

int DeviceHandleRegistry::open_count() const {
  MutexLock lock(mu_);
  return int(open_.size());
}

}  // namespace sgemm
