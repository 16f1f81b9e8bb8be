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

Status NcclCommunicator::async_error() const {
  for (int rank = 0; rank < size(); ++rank) SGEMM_RETURN_IF_ERROR(async_error(rank));
  return Status::Ok();
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

Status NcclCommunicator::warm_up(std::size_t bytes) {
  const std::size_t n = bytes / sizeof(float);
  const int ranks = size();
  if (ranks < 2 || n < std::size_t(ranks)) return Status::Ok();
  std::vector<float*> buf(std::size_t(ranks), nullptr);
  std::vector<cudaStream_t> streams(std::size_t(ranks), nullptr);
  auto cuda = [](cudaError_t e, const char* what) {
    return e == cudaSuccess ? Status::Ok()
                            : Unavailable(std::string("NCCL warm-up: ") + what + ": " + cudaGetErrorString(e));
  };
  Status st = Status::Ok();
  for (int r = 0; r < ranks && st.ok(); ++r) {
    st = cuda(cudaSetDevice(devices_[std::size_t(r)]), "cudaSetDevice");
    if (st.ok()) st = cuda(cudaMalloc(&buf[std::size_t(r)], n * sizeof(float)), "cudaMalloc");
    if (st.ok()) st = cuda(cudaMemsetAsync(buf[std::size_t(r)], 0, n * sizeof(float)), "cudaMemset");
    if (st.ok()) st = cuda(cudaStreamCreateWithFlags(&streams[std::size_t(r)], cudaStreamNonBlocking), "stream");
    if (st.ok()) st = cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  // The collectives the executors use: broadcast (row split), reduce and
  // reduce-scatter (K split).
  for (int op = 0; op < 3 && st.ok(); ++op) {
    NcclGroup group;
    st = group.start_status();
    const std::size_t part = n / std::size_t(ranks);
    for (int r = 0; r < ranks && st.ok(); ++r) {
      float* b = buf[std::size_t(r)];
      ncclComm_t c = comms_[std::size_t(r)];
      cudaStream_t s = streams[std::size_t(r)];
      switch (op) {
        case 0:
          st = SGEMM_NCCL_STATUS(ncclBroadcast(b, b, n, ncclFloat, 0, c, s));
          break;
        case 1:
          st = SGEMM_NCCL_STATUS(ncclReduce(b, b, n, ncclFloat, ncclSum, 0, c, s));
          break;
        default:
          st = SGEMM_NCCL_STATUS(ncclReduceScatter(b, b + std::size_t(r) * part, part, ncclFloat, ncclSum, c, s));
      }
    }
    Status ended = group.end();
    if (st.ok()) st = ended;
  }
  for (int r = 0; r < ranks; ++r) {
    (void)cudaSetDevice(devices_[std::size_t(r)]);
    if (streams[std::size_t(r)]) {
      Status synced = cuda(cudaStreamSynchronize(streams[std::size_t(r)]), "cudaStreamSynchronize");
      if (st.ok()) st = synced;
      (void)cudaStreamDestroy(streams[std::size_t(r)]);
    }
    if (buf[std::size_t(r)]) (void)cudaFree(buf[std::size_t(r)]);
  }
  return st;
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
  const ncclResult_t r = ncclGroupEnd();
  return r == ncclInProgress ? Status::Ok() : SGEMM_NCCL_STATUS(r);
}

}  // namespace sgemm
