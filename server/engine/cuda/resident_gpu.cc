#include "server/engine/cuda/resident_gpu.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <mutex>
#include <set>
#include <utility>

#include "kernels/cuda_status.h"

namespace sgemm {

namespace {

StatusOr<std::shared_ptr<GpuPiece>> allocate_piece(const Piece& where, int64_t cols, ResidentBytes bytes) {
  auto p = std::make_shared<GpuPiece>();
  p->where = where;
  p->ld = resident_ld(cols);
  SGEMM_CUDA_TRY(cudaSetDevice(where.device));
  void* mem = nullptr;
  SGEMM_CUDA_TRY(cudaMalloc(&mem, std::size_t(std::max<int64_t>(1, where.rows()) * p->ld) * sizeof(float)));
  p->data = static_cast<float*>(mem);
  p->bytes = std::move(bytes);
  return p;
}

}  // namespace

void enable_peer_access(int a, int b) {
  static std::mutex mu;
  static std::set<std::pair<int, int>> done;
  std::lock_guard lock(mu);
  for (const auto& [from, to] : {std::make_pair(a, b), std::make_pair(b, a)}) {
    if (!done.insert({from, to}).second) continue;
    int can = 0;
    if (cudaDeviceCanAccessPeer(&can, from, to) != cudaSuccess || !can) continue;
    if (cudaSetDevice(from) != cudaSuccess) continue;
    (void)cudaDeviceEnablePeerAccess(to, 0);  // cudaErrorPeerAccessAlreadyEnabled is fine
  }
  (void)cudaGetLastError();
}

GpuPiece::~GpuPiece() {
  if (data) {
    // Jobs reading this piece have ended (they hold it until run() returns).
    if (cudaSetDevice(where.device) == cudaSuccess) (void)cudaFree(data);
    (void)cudaGetLastError();
  }
}

Layout GpuResident::layout() const {
  Layout out;
  for (const auto& p : pieces_) out.push_back(p->where);
  return out;
}

const GpuPiece* GpuResident::find(int device, int64_t begin, int64_t end) const {
  for (const auto& p : pieces_)
    if (p->where.device == device && p->where.row_begin <= begin && p->where.row_end >= end) return p.get();
  return nullptr;
}

StatusOr<std::shared_ptr<ResidentData>> upload_resident(const HostBuffer& host, int64_t rows, int64_t cols,
                                                        ResidentBytes bytes) {
  const int device = bytes.location();
  if (device < 0) return Internal("a GPU resident matrix reserved on host memory");
  SGEMM_ASSIGN_OR_RETURN(auto piece, allocate_piece(Piece{device, 0, rows}, cols, std::move(bytes)));
  SGEMM_CUDA_TRY(cudaMemcpy2D(piece->data, std::size_t(piece->ld) * sizeof(float), host.data(),
                              std::size_t(cols) * sizeof(float), std::size_t(cols) * sizeof(float), std::size_t(rows),
                              cudaMemcpyHostToDevice));
  return std::shared_ptr<ResidentData>(
      std::make_shared<GpuResident>(rows, cols, std::vector<std::shared_ptr<GpuPiece>>{std::move(piece)}));
}

StatusOr<std::shared_ptr<const GpuResident>> ensure_layout(ResidentStore& store, const ResidentMatrix& m,
                                                           const Layout& wanted, bool additive) {
  std::lock_guard lock(m.layout_mutex());
  auto cur = std::dynamic_pointer_cast<const GpuResident>(m.data());
  if (!cur) return Internal("resident matrix '" + m.handle + "' has no GPU data");
  const Layout have = cur->layout();
  if (satisfies(have, wanted)) return cur;
  Layout need = wanted;
  if (additive)  // keep every current piece, add what is missing
    for (const Piece& p : have)
      if (std::find(need.begin(), need.end(), p) == need.end()) need.push_back(p);
  const Move mv = plan_move(have, need, m.cols * int64_t(sizeof(float)));
  if (!mv.ok) return Internal("cannot lay out resident matrix '" + m.handle + "': " + mv.why);
  std::vector<std::shared_ptr<GpuPiece>> pieces(mv.target.size());
  for (std::size_t i = 0; i < mv.target.size(); ++i) {
    if (mv.reuse[i] >= 0) {
      pieces[i] = cur->pieces()[std::size_t(mv.reuse[i])];
      continue;
    }
    const Piece& t = mv.target[i];
    SGEMM_ASSIGN_OR_RETURN(ResidentBytes bytes,
                           store.reserve(t.device, t.rows() * m.cols * int64_t(sizeof(float)),
                                         "laying out resident matrix '" + m.handle + "' as " + describe_layout(need)));
    SGEMM_ASSIGN_OR_RETURN(pieces[i], allocate_piece(t, m.cols, std::move(bytes)));
  }
  // The copies go on a stream of their own per target device, so they wait
  // for nothing else (cudaMemcpyPeer would serialise with all work on both
  // GPUs); the new layout is published only once they are done.
  std::vector<std::pair<int, cudaStream_t>> streams;
  auto stream_on = [&](int device) -> StatusOr<cudaStream_t> {
    for (const auto& [d, st] : streams)
      if (d == device) return st;
    SGEMM_CUDA_TRY(cudaSetDevice(device));
    cudaStream_t st = nullptr;
    SGEMM_CUDA_TRY(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    streams.emplace_back(device, st);
    return st;
  };
  Status copied = Status::Ok();
  for (const PieceCopy& c : mv.copies) {
    const GpuPiece& src = *cur->pieces()[std::size_t(c.src)];
    GpuPiece& dst = *pieces[std::size_t(c.dst)];
    const std::size_t bytes = std::size_t((c.row_end - c.row_begin) * dst.ld) * sizeof(float);
    float* to = dst.data + (c.row_begin - dst.where.row_begin) * dst.ld;
    if (src.where.device != dst.where.device) enable_peer_access(src.where.device, dst.where.device);
    auto st = stream_on(dst.where.device);
    if (!st.ok()) {
      copied = st.status();
      break;
    }
    copied = SGEMM_CUDA_STATUS(cudaSetDevice(dst.where.device));
    if (!copied.ok()) break;
    // Pieces share the padded leading dimension, so a range of rows is contiguous.
    copied = SGEMM_CUDA_STATUS(
        cudaMemcpyPeerAsync(to, dst.where.device, src.row(c.row_begin), src.where.device, bytes, *st));
    if (!copied.ok()) break;
  }
  for (const auto& [d, st] : streams) {  // always drained and destroyed, even after an error
    if (cudaSetDevice(d) != cudaSuccess) continue;
    const Status synced = SGEMM_CUDA_STATUS(cudaStreamSynchronize(st));
    if (copied.ok()) copied = synced;
    (void)cudaStreamDestroy(st);
  }
  SGEMM_RETURN_IF_ERROR(copied);
  auto next = std::make_shared<const GpuResident>(cur->rows(), cur->cols(), std::move(pieces));
  // The entry takes the new layout; pieces no longer in it are freed when the
  // jobs still reading the old layout end.
  m.set_data(std::const_pointer_cast<GpuResident>(next));
  return std::shared_ptr<const GpuResident>(next);
}

}  // namespace sgemm
