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

NcclCommunicator::~NcclCommunicator() { destroy(); }

void NcclCommunicator::destroy() {
  if (aborted_) return;  // ncclCommAbort freed them
  for (size_t i = 0; i < comms_.size(); ++i) {
    if (comms_[i] == nullptr) continue;
    (void)cudaSetDevice(devices_[i]);
    (void)ncclCommDestroy(comms_[i]);
  }
}

void NcclCommunicator::abort(const std::function<void(int rank)>& before_rank) {
  if (aborted_.exchange(true)) return;
  for (size_t i = 0; i < comms_.size(); ++i) {
    if (before_rank) before_rank(int(i));
    if (comms_[i] == nullptr) continue;
    (void)cudaSetDevice(devices_[i]);
    (void)ncclCommAbort(comms_[i]);
  }
}

Status NcclCommunicator::async_error(int rank) const {
  if (aborted_ || rank < 0 || rank >= int(comms_.size())) return Status::Ok();
  ncclResult_t async = ncclSuccess;
  const ncclResult_t r = ncclCommGetAsyncError(comms_[size_t(rank)], &async);
  if (r != ncclSuccess) return nccl_status(r, comms_[size_t(rank)], "ncclCommGetAsyncError", __FILE__, __LINE__);
  return nccl_status(async, comms_[size_t(rank)], "a collective (asynchronous error)", __FILE__, __LINE__);
}

Status NcclCommunicator::rebuild(const std::vector<int>& devices) {
  destroy();
  comms_.clear();
  devices_.clear();
  aborted_ = false;
  if (devices.size() < 2) return InvalidArgument("an NCCL communicator needs at least 2 devices");
  std::vector<ncclComm_t> comms(devices.size(), nullptr);
  Status s = SGEMM_NCCL_STATUS(ncclCommInitAll(comms.data(), int(devices.size()), devices.data()));
  if (!s.ok()) return Unavailable("rebuilding the NCCL communicator: " + s.message());
  comms_ = std::move(comms);
  devices_ = devices;
  return Status::Ok();
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
