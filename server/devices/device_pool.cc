#include "server/devices/device_pool.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "kernels/cuda_status.h"

namespace sgemm {

Lane::~Lane() {
  (void)cudaSetDevice(device_);
  backends_.clear();
  workspace_.reset();
  if (compute_) (void)cudaStreamSynchronize(compute_);
  for (cudaEvent_t e : events_) (void)cudaEventDestroy(e);
  for (cudaStream_t s : {h2d_, compute_, comm_, d2h_})
    if (s) (void)cudaStreamDestroy(s);
  (void)cudaGetLastError();
}

GemmBackend* Lane::backend(KernelKind kind) const {
  for (const auto& b : backends_)
    if (b->kind() == kind) return b.get();
  return nullptr;
}

StatusOr<void*> Lane::workspace(std::size_t bytes) {
  if (bytes == 0) return static_cast<void*>(nullptr);
  if (bytes > workspace_bytes_) {
    workspace_.reset();  // stream-ordered after every earlier use on compute()
    workspace_bytes_ = 0;
    SGEMM_ASSIGN_OR_RETURN(workspace_, DeviceBuffer::allocate(device_, bytes, compute_));
    workspace_bytes_ = bytes;
  }
  return static_cast<void*>(workspace_.floats());
}

StatusOr<cudaEvent_t> Lane::next_event() {
  if (next_event_ == events_.size()) {
    cudaEvent_t e = nullptr;
    SGEMM_CUDA_TRY(cudaSetDevice(device_));
    SGEMM_CUDA_TRY(cudaEventCreate(&e));  // timing enabled: spans are measured with it
    events_.push_back(e);
  }
  return events_[next_event_++];
}

LaneLease& LaneLease::operator=(LaneLease&& o) noexcept {
  if (this != &o) {
    release();
    pool_ = std::exchange(o.pool_, nullptr);
    index_ = std::exchange(o.index_, -1);
    lane_ = std::exchange(o.lane_, -1);
  }
  return *this;
}

Lane* LaneLease::operator->() const { return pool_->devices_[size_t(index_)]->lanes[size_t(lane_)].get(); }

void LaneLease::release() {
  if (pool_) pool_->give_back(index_, lane_);
  pool_ = nullptr;
}

StatusOr<std::unique_ptr<DevicePool>> DevicePool::create(const DevicePoolOptions& options) {
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    return Unavailable(std::string("no usable CUDA device: ") +
                       (e == cudaSuccess ? "none visible" : cudaGetErrorString(e)));
  }
  if (options.lanes_per_device < 1) return InvalidArgument("lanes_per_device must be >= 1");
  std::vector<int> ordinals = options.devices;
  if (ordinals.empty())
    for (int i = 0; i < count; ++i) ordinals.push_back(i);
  for (size_t i = 0; i < ordinals.size(); ++i) {
    if (ordinals[i] < 0 || ordinals[i] >= count)
      return InvalidArgument("devices[" + std::to_string(i) + "] = " + std::to_string(ordinals[i]) +
                             " is not a visible CUDA device (" + std::to_string(count) + " visible)");
    if (std::count(ordinals.begin(), ordinals.end(), ordinals[i]) > 1)
      return InvalidArgument("devices lists CUDA device " + std::to_string(ordinals[i]) + " twice");
  }

  std::unique_ptr<DevicePool> pool(new DevicePool());
  // Which kinds build: try each on the first device; the others must agree.
  std::vector<KernelKind> wanted = options.kernels.empty() ? gpu_kernel_kinds() : options.kernels;
  std::string refusals;
  SGEMM_CUDA_TRY(cudaSetDevice(ordinals[0]));
  for (KernelKind k : wanted) {
    auto b = make_gemm_backend(k);
    if (b.ok()) {
      pool->kernels_.push_back(k);
    } else {
      refusals += (refusals.empty() ? "" : "; ") + b.status().message();
    }
  }
  if (pool->kernels_.empty()) return Unavailable("no GEMM backend is available: " + refusals);

  for (int ordinal : ordinals) {
    auto dev = std::make_unique<Device>();
    SGEMM_CUDA_TRY(cudaSetDevice(ordinal));
    cudaDeviceProp prop{};
    SGEMM_CUDA_TRY(cudaGetDeviceProperties(&prop, ordinal));
    dev->info =
        DeviceInfo{ordinal, prop.name, int64_t(prop.totalGlobalMem), prop.multiProcessorCount, prop.major, prop.minor};
    cudaMemPool_t mempool = nullptr;
    SGEMM_CUDA_TRY(cudaDeviceGetDefaultMemPool(&mempool, ordinal));
    uint64_t threshold = options.mempool_release_threshold;
    SGEMM_CUDA_TRY(cudaMemPoolSetAttribute(mempool, cudaMemPoolAttrReleaseThreshold, &threshold));
    for (int l = 0; l < options.lanes_per_device; ++l) {
      std::unique_ptr<Lane> lane(new Lane());
      lane->device_ = ordinal;
      for (cudaStream_t* s : {&lane->h2d_, &lane->compute_, &lane->comm_, &lane->d2h_})
        SGEMM_CUDA_TRY(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking));
      for (KernelKind k : pool->kernels_) {
        auto b = make_gemm_backend(k);
        if (!b.ok())
          return b.status().with_context("kernel '" + std::string(kernel_kind_name(k)) + "' on CUDA device " +
                                         std::to_string(ordinal));
        lane->backends_.push_back(std::move(b).value());
      }
      dev->lanes.push_back(std::move(lane));
    }
    {
      MutexLock lock(dev->mu);  // not shared yet: uncontended, and the rule has no exception
      dev->in_use.assign(dev->lanes.size(), false);
    }
    pool->devices_.push_back(std::move(dev));
  }
  return pool;
}

Status DevicePool::warm_up() {
  // One shape every kernel accepts: tiles of 128 divide it and it is 16-byte
  // aligned; each backend is asked first (can_implement) and skipped if not.
  constexpr int64_t kN = 256;
  for (auto& dev : devices_) {
    SGEMM_CUDA_TRY(cudaSetDevice(dev->info.index));
    for (auto& lane : dev->lanes) {
      const std::size_t bytes = std::size_t(kN * kN) * sizeof(float);
      SGEMM_ASSIGN_OR_RETURN(DeviceBuffer a, DeviceBuffer::allocate(dev->info.index, bytes, lane->compute_));
      SGEMM_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::allocate(dev->info.index, bytes, lane->compute_));
      SGEMM_ASSIGN_OR_RETURN(DeviceBuffer c, DeviceBuffer::allocate(dev->info.index, bytes, lane->compute_));
      for (DeviceBuffer* buf : {&a, &b, &c}) SGEMM_CUDA_TRY(cudaMemsetAsync(buf->floats(), 0, bytes, lane->compute_));
      for (auto& be : lane->backends_) {
        GemmArgs args{GemmShape{kN, kN, kN}, 1.0f, 0.0f, a.floats(), kN, b.floats(), kN, c.floats(), kN};
        if (!be->can_implement(args).ok()) continue;
        const std::size_t need = be->workspace_bytes(args);
        SGEMM_ASSIGN_OR_RETURN(void* ws, lane->workspace(need));
        SGEMM_RETURN_IF_ERROR(be->run(args, ws, need, lane->compute_)
                                  .with_context("warm-up of kernel '" + std::string(be->name()) + "' on CUDA device " +
                                                std::to_string(dev->info.index)));
      }
      // Done (and any error seen) before the engine is handed out.
      for (cudaStream_t s : lane->streams()) SGEMM_CUDA_TRY(cudaStreamSynchronize(s));
    }
  }
  return Status::Ok();
}

DevicePool::~DevicePool() {
  for (auto& d : devices_) {
    (void)cudaSetDevice(d->info.index);
    (void)cudaDeviceSynchronize();
  }
  (void)cudaGetLastError();
}

std::vector<int> DevicePool::ordinals() const {
  std::vector<int> v;
  for (const auto& d : devices_) v.push_back(d->info.index);
  return v;
}

StatusOr<LaneLease> DevicePool::acquire(int index, const CancelToken* cancel) {
  Device& d = *devices_[size_t(index)];
  MutexLock lock(d.mu);
  // Woken by give_back(); the timeout only bounds how late a cancellation is seen.
  while (!lock.wait_for(d.cv, std::chrono::milliseconds(5), [&] {
    d.mu.assert_held();
    return d.busy < int(d.lanes.size());
  }))
    if (cancel) SGEMM_RETURN_IF_ERROR(cancel->status());
  const int lane = int(std::find(d.in_use.begin(), d.in_use.end(), false) - d.in_use.begin());
  d.in_use[size_t(lane)] = true;
  d.busy++;
  return LaneLease(this, index, lane);
}

const GemmBackend* DevicePool::probe_backend(KernelKind kind) const {
  if (devices_.empty() || devices_[0]->lanes.empty()) return nullptr;
  return devices_[0]->lanes[0]->backend(kind);
}

void DevicePool::give_back(int index, int lane) {
  Device& d = *devices_[size_t(index)];
  {
    MutexLock lock(d.mu);
    d.in_use[size_t(lane)] = false;
    d.busy--;
  }
  d.cv.notify_one();
}

int DevicePool::busy_lanes(int index) const {
  const Device& d = *devices_[size_t(index)];
  MutexLock lock(d.mu);
  return d.busy;
}

StatusOr<DeviceBuffer> DeviceBuffer::allocate(int device, std::size_t bytes, cudaStream_t stream) {
  DeviceBuffer b;
  SGEMM_CUDA_TRY(cudaSetDevice(device));
  if (bytes == 0) return b;
  Status s = SGEMM_CUDA_STATUS(cudaMallocAsync(&b.ptr_, bytes, stream));
  if (!s.ok()) {
    b.ptr_ = nullptr;
    return s.with_context("device memory (" + std::to_string(bytes) + " bytes on CUDA device " +
                          std::to_string(device) + ")");
  }
  b.device_ = device;
  b.stream_ = stream;
  return b;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    ptr_ = std::exchange(o.ptr_, nullptr);
    device_ = o.device_;
    stream_ = o.stream_;
  }
  return *this;
}

void DeviceBuffer::reset() {
  if (!ptr_) return;
  (void)cudaSetDevice(device_);
  if (cudaFreeAsync(ptr_, stream_) != cudaSuccess) (void)cudaGetLastError();
  ptr_ = nullptr;
}

int64_t DevicePool::memory_used(int index) const {
  // cudaMemGetInfo answers for the calling thread's current device.
  if (cudaSetDevice(ordinal(index)) != cudaSuccess) return -1;
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) return -1;
  return int64_t(total_bytes) - int64_t(free_bytes);
}

}  // namespace sgemm
