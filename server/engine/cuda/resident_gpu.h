// Resident matrices on the CUDA engine (docs/resident.md): each is a set of
// pieces in device memory (rows of the matrix on one GPU, dense with the
// leading dimension padded to 4 floats like every device layout of the
// engine). The planner's placement functions (server/planner/placement.h)
// decide the layout a plan needs and the copies to reach it; this file
// allocates, copies (cudaMemcpyPeer between GPUs) and frees. Private to the
// CUDA engine.
//
// Ownership: a GpuResident is immutable once made and shared by the store's
// entry and the jobs using it; a layout change makes a new one (reusing the
// pieces it can) and swaps it into the entry, so a running job keeps the
// pieces it reads until it ends. A piece frees its memory and gives its bytes
// back to the store's budget when the last holder lets go.
//
// Threads: ensure_layout() serialises layout changes of one matrix on its
// layout mutex; everything else is immutable.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/host_buffer.h"
#include "common/status.h"
#include "server/engine/resident_store.h"
#include "server/planner/placement.h"

namespace sgemm {

// The leading dimension (elements) of a resident matrix of `cols` columns on
// a GPU: `cols` rounded up to 4 floats, so every row starts 16-byte aligned.
inline int64_t resident_ld(int64_t cols) { return (cols + 3) / 4 * 4; }

struct GpuPiece {
  GpuPiece() = default;
  GpuPiece(const GpuPiece&) = delete;
  GpuPiece& operator=(const GpuPiece&) = delete;
  ~GpuPiece();  // cudaFree on its device, then the bytes go back to the budget
  Piece where;
  float* data = nullptr;  // row `where.row_begin` of the matrix
  int64_t ld = 0;         // elements: resident_ld(cols)
  ResidentBytes bytes;
  const float* row(int64_t r) const { return data + (r - where.row_begin) * ld; }
};

class GpuResident final : public ResidentData {
 public:
  GpuResident(int64_t rows, int64_t cols, std::vector<std::shared_ptr<GpuPiece>> pieces)
      : rows_(rows), cols_(cols), pieces_(std::move(pieces)) {}
  Layout layout() const override;
  // The piece on `device` holding rows [begin, end); null when none does.
  const GpuPiece* find(int device, int64_t begin, int64_t end) const;
  const std::vector<std::shared_ptr<GpuPiece>>& pieces() const { return pieces_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }

 private:
  int64_t rows_, cols_;
  std::vector<std::shared_ptr<GpuPiece>> pieces_;
};

// The matrix in `host` (rows x cols, dense) copied to the GPU `bytes` was
// reserved on; the host buffer is not kept.
StatusOr<std::shared_ptr<ResidentData>> upload_resident(const HostBuffer& host, int64_t rows, int64_t cols,
                                                        ResidentBytes bytes);

// The matrix's data laid out to hold `need` (placement.h): the current data
// when it already does, else a new layout built by plan_move() (peer copies,
// new pieces charged to `store`, evicting as it allows) that replaces the
// current one in the entry; with `additive` the current pieces are kept and
// only the missing ones added (a copy for another GPU, not a move). The
// matrix must be pinned by the caller.
StatusOr<std::shared_ptr<const GpuResident>> ensure_layout(ResidentStore& store, const ResidentMatrix& m,
                                                           const Layout& need, bool additive = false);

// Peer access between two GPUs (both ways), once per pair, so their copies go
// over NVLink (or PCIe peer-to-peer) rather than staged through the host.
// Where the hardware cannot, the copy still works (staged). NCCL tolerates
// peer access the application enabled. Thread-safe.
void enable_peer_access(int a, int b);

}  // namespace sgemm
