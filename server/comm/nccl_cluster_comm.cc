#include "server/comm/nccl_cluster_comm.h"

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "server/comm/nccl_status.h"

namespace sgemm {

StatusOr<std::string> NcclClusterComm::new_unique_id() {
  ncclUniqueId id;
  SGEMM_NCCL_TRY(ncclGetUniqueId(&id));
  return std::string(id.internal, sizeof id.internal);
}

Status NcclClusterComm::warm_up(const std::vector<int>& devices) {
  std::vector<ncclComm_t> comms(devices.size(), nullptr);
  SGEMM_NCCL_TRY(ncclCommInitAll(comms.data(), int(devices.size()), devices.data()));
  for (ncclComm_t c : comms) (void)ncclCommDestroy(c);
  return Status::Ok();
}

StatusOr<std::unique_ptr<NcclClusterComm>> NcclClusterComm::create(const std::string& unique_id, int nranks,
                                                                   int first_rank, const std::vector<int>& devices,
                                                                   const CancelToken* abort, int64_t timeout_ms) {
  ncclUniqueId id;
  if (unique_id.size() != sizeof id.internal)
    return InvalidArgument("an ncclUniqueId has " + std::to_string(sizeof id.internal) + " bytes, not " +
                           std::to_string(unique_id.size()));
  if (devices.empty() || first_rank < 0 || first_rank + int(devices.size()) > nranks)
    return InvalidArgument("ranks " + std::to_string(first_rank) + ".." +
                           std::to_string(first_rank + int(devices.size()) - 1) + " do not fit in " +
                           std::to_string(nranks));
  std::memcpy(id.internal, unique_id.data(), sizeof id.internal);
  std::unique_ptr<NcclClusterComm> c(new NcclClusterComm());
  c->devices_ = devices;
  c->nranks_ = nranks;
  c->first_rank_ = first_rank;
  c->comms_.assign(devices.size(), nullptr);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // every wait is ours, with a deadline and an abort
  Status s = SGEMM_NCCL_STATUS(ncclGroupStart());
  if (!s.ok()) return s;
  for (size_t i = 0; i < devices.size(); ++i) {
    if (cudaSetDevice(devices[i]) != cudaSuccess) {
      (void)cudaGetLastError();
      (void)ncclGroupEnd();
      return Unavailable("cluster communicator: GPU " + std::to_string(devices[i]) + " is not usable");
    }
    const ncclResult_t r = ncclCommInitRankConfig(&c->comms_[i], nranks, id, first_rank + int(i), &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      (void)ncclGroupEnd();
      c->abort();
      return SGEMM_NCCL_STATUS(r).with_context("cluster communicator");
    }
  }
  const ncclResult_t end = ncclGroupEnd();
  if (end != ncclSuccess && end != ncclInProgress) {
    c->abort();
    return SGEMM_NCCL_STATUS(end).with_context("cluster communicator");
  }
  if (Status w = c->wait_issued(abort, timeout_ms); !w.ok()) {
    c->abort();
    return w.with_context("cluster communicator (" + std::to_string(nranks) + " ranks)");
  }
  return c;
}

NcclClusterComm::~NcclClusterComm() { abort(); }

Status NcclClusterComm::wait_issued(const CancelToken* abort, int64_t timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    bool pending = false;
    for (size_t i = 0; i < comms_.size(); ++i) {
      ncclResult_t state = ncclSuccess;
      if (comms_[i] == nullptr) continue;
      Status s = SGEMM_NCCL_STATUS(ncclCommGetAsyncError(comms_[i], &state));
      if (!s.ok()) return s;
      if (state == ncclInProgress) {
        pending = true;
      } else if (state != ncclSuccess) {
        return Unavailable("NCCL rank " + std::to_string(first_rank_ + int(i)) + ": " + ncclGetErrorString(state) +
                           (ncclGetLastError(comms_[i]) ? std::string(" (") + ncclGetLastError(comms_[i]) + ")" : ""));
      }
    }
    if (!pending) return Status::Ok();
    if (abort && !abort->status().ok()) return abort->status();
    if (std::chrono::steady_clock::now() >= deadline)
      return Unavailable("NCCL did not finish within " + std::to_string(timeout_ms) + " ms");
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

Status NcclClusterComm::async_error() const {
  for (size_t i = 0; i < comms_.size(); ++i) {
    if (comms_[i] == nullptr) continue;
    ncclResult_t state = ncclSuccess;
    if (ncclCommGetAsyncError(comms_[i], &state) != ncclSuccess) return Unavailable("NCCL: cannot read its state");
    if (state != ncclSuccess && state != ncclInProgress)
      return Unavailable("NCCL rank " + std::to_string(first_rank_ + int(i)) + ": " + ncclGetErrorString(state) +
                         (ncclGetLastError(comms_[i]) ? std::string(" (") + ncclGetLastError(comms_[i]) + ")" : ""));
  }
  return Status::Ok();
}

void NcclClusterComm::abort() {
  for (size_t i = 0; i < comms_.size(); ++i) {
    if (comms_[i] == nullptr) continue;
    (void)cudaSetDevice(devices_[i]);
    (void)ncclCommAbort(comms_[i]);
    comms_[i] = nullptr;
  }
  aborted_ = true;
}

}  // namespace sgemm
