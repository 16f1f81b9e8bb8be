#include "server/comm/nccl_comm.h"

#include <cuda_runtime_api.h>

namespace sgemm {

StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::create(const std::vector<int>& devices) {
  if (devices.size() < 2) return InvalidArgument("an NCCL communicator needs at least 2 devices");
  std::unique_ptr<NcclCommunicator> c(new NcclCommunicator());
  c->devices_ = devices;
  c->comms_.assign(devices.size(), nullptr);
  Status s = SGEMM_NCCL_STATUS(ncclCommInitAll(c->comms_.data(), int(devices.size()), devices.data()));
  if (!s.ok()) {
    c->comms_.clear();  // ncclCommInitAll leaves nothing to destroy on failure
    return Unavailable("NCCL communicator over the device pool: " + s.message());
  }
  return c;
}

NcclCommunicator::~NcclCommunicator() {
  for (size_t i = 0; i < comms_.size(); ++i) {
    if (comms_[i] == nullptr) continue;
    (void)cudaSetDevice(devices_[i]);
    (void)ncclCommDestroy(comms_[i]);
  }
}

NcclGroup::NcclGroup() {
  start_ = SGEMM_NCCL_STATUS(ncclGroupStart());
  open_ = start_.ok();
}

NcclGroup::~NcclGroup() {
  if (open_) (void)ncclGroupEnd();
}

Status NcclGroup::end() {
  if (!open_) return start_;
  open_ = false;
  return SGEMM_NCCL_STATUS(ncclGroupEnd());
}

}  // namespace sgemm
