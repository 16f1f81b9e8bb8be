// Assembles one request's matrices from streamed chunks, and is the engine's
// InputFeed for that request. Protobuf-free so it can be unit-tested alone.
//
// Threads: the service's RPC threads call add_chunk()/finish()/fail() (with
// stripes, one thread per stripe at a time: stripes copy concurrently into
// disjoint rows); the engine's thread calls wait_for(). All state is guarded
// by mu_; a chunk's payload is copied with mu_ released.
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "server/engine/engine.h"

namespace sgemm {

struct RequestLimits {
  int64_t max_matrix_elements = int64_t{1} << 30;  // largest A, B or C (4 GiB of fp32)
  int64_t max_chunk_bytes = (4 << 20) - 1024;      // one chunk's payload, under gRPC's 4 MiB default
  // Memory held in proportion to data received (check_upload_pace): once an
  // upload holds its memory, it must average at least this many bytes a
  // second after a grace of --idle-timeout; 0 = no minimum.
  int64_t min_upload_bytes_per_s = 4 << 20;
  // Outputs bounded against inputs (check_output_bound): a C the server holds
  // may be at most max_output_ratio times the bytes of the inputs, or
  // output_floor_bytes, whichever is larger; max_output_ratio 0 = no bound.
  int64_t max_output_ratio = 64;
  int64_t output_floor_bytes = int64_t{256} << 20;
};

std::string_view matrix_name(MatrixId m);

// The service's own limits on a request: each matrix's element count fits
// int64 (INVALID_ARGUMENT) and the server's --max-matrix-elements
// (RESOURCE_EXHAUSTED), naming the matrix. The request's shape and scalar
// rules are the engine's (Engine::validate, check_gemm_request): dimensions
// under 1 are left to it.
Status check_limits(const GemmRequest& request, const RequestLimits& limits);

// The minimum upload rate (docs/security.md): an upload that holds memory
// (`held_bytes`, reserved `since` ago) has received `received_bytes`; it must
// have received at least min_upload_bytes_per_s x (since - grace). So a
// request holds memory only while its data keeps coming (progress counted in
// bytes, not messages: 4 bytes every few seconds is no progress), and a whole
// upload of U bytes must end within grace + U / rate. DEADLINE_EXCEEDED
// naming the figures otherwise; OK with a rate of 0. `what` names the call.
Status check_upload_pace(int64_t received_bytes, std::chrono::steady_clock::duration since,
                         std::chrono::milliseconds grace, int64_t held_bytes, const RequestLimits& limits,
                         std::string_view what);

// Outputs bounded against inputs (docs/security.md): a C of m x n floats that
// the server must hold (sent back as chunks or kept resident) may be at most
// limits.max_output_ratio times the bytes of A, B and the input C (however
// they arrive: uploaded, in regions, resident), or limits.output_floor_bytes,
// whichever is larger. Without the bound, 256 KiB of upload (m = n = 32768,
// k = 1) makes the server compute and hold 4 GiB. RESOURCE_EXHAUSTED naming
// the sizes and the flag. A C written into the caller's region costs the
// server nothing and is not bounded (the caller does not call this).
Status check_output_bound(const GemmRequest& request, const RequestLimits& limits);

// Element count of each matrix for a shape (C counted even without has_c).
int64_t matrix_elements(const GemmShape& shape, MatrixId m);

class MatrixAssembler final : public InputFeed {
 public:
  // Destinations must hold matrix_elements() floats each; `c` may be null when
  // !has_c. Any may be null until set_destination() (buffers allocated when a
  // matrix's first chunk arrives). Each matrix is held as STORED: with
  // op_a = kT A is k x m, with op_b = kT B is n x k; its rows are the stored
  // rows (what set_stripes() cuts into blocks).
  MatrixAssembler(const GemmShape& shape, bool has_c, float* a, float* b, float* c, int64_t max_chunk_bytes,
                  Op op_a = Op::kN, Op op_b = Op::kN);

  // A batch's concatenated operands (server/engine/batch.h): `elements` of A,
  // B and C (C's ignored without has_c), each one stored row of that many
  // elements, so chunks need only be in order; set_stripes() does not apply.
  MatrixAssembler(const std::array<int64_t, 3>& elements, bool has_c, int64_t max_chunk_bytes);

  void set_destination(MatrixId matrix, float* dst);

  // One request over several streams (GemmHeader.stripes, docs/transport.md):
  // every matrix's stored rows are cut into blocks of `stripe_rows` rows and block j
  // belongs to stripe j % stripes. A stripe's chunks of a matrix arrive in
  // order, block after block, and never cross a block's end; matrices and
  // stripes interleave freely. What wait_for() sees is each matrix's prefix
  // present on every stripe (the smallest next offset over the stripes).
  // Call before the first chunk; the default is one stripe (the whole stream).
  void set_stripes(int stripes, int64_t stripe_rows);
  int stripes() const { return stripes_; }

  // The matrix is not sent: the header named it by handle (a resident
  // matrix, docs/resident.md). It counts as complete; a chunk for it is
  // INVALID_ARGUMENT.
  void mark_provided(MatrixId matrix);
  // Whether a chunk would be accepted (the checks add_chunk makes), without copying.
  Status check_chunk(MatrixId matrix, int64_t offset, std::size_t bytes, int stripe = 0) const;
  // Every declared matrix has all its elements.
  bool complete() const;

  // Copies a chunk into place. Chunks of one matrix must be contiguous and in
  // order; matrices may interleave. Errors name the matrix and the offsets.
  Status add_chunk(MatrixId matrix, int64_t offset, const void* data, std::size_t bytes, int stripe = 0);
  // The same, with `copy(dst)` writing the chunk's `bytes` to its place (a
  // payload still in gRPC's slices is copied once, straight into the matrix).
  Status add_chunk(MatrixId matrix, int64_t offset, std::size_t bytes, const std::function<void(void*)>& copy,
                   int stripe = 0);
  // The client half-closed: every declared matrix must be complete.
  Status finish();
  // Stripe `stripe`'s stream half-closed: its share of every matrix must be complete.
  Status finish_stripe(int stripe);
  // Fails the request: waiters in wait_for() return `why`. First failure wins.
  void fail(const Status& why);

  // Yielding, for an engine that started before the upload ended and holds
  // a compute slot while it waits (docs/lifecycle.md). With a budget, a
  // wait_for() that cannot return at once returns UNAVAILABLE ("yielded")
  // instead of blocking once the time spent blocked, summed over its calls,
  // reaches `budget`, or at once after yield_now(); from then on every
  // wait_for() that would block yields. Zero (the default): wait_for() blocks
  // until the data or a failure comes. set_wait_budget() also clears a yield.
  void set_wait_budget(std::chrono::milliseconds budget);
  void yield_now();
  bool yielded() const;  // a wait_for() returned "yielded"

  Status wait_for(MatrixId matrix, int64_t elements) override;

  int64_t received(MatrixId matrix) const;
  bool declared(MatrixId matrix) const { return matrix != MatrixId::kC || has_c_; }
  int64_t bytes_received() const;

 private:
  // The end (exclusive) of the block holding element `offset` of matrix `idx`.
  int64_t block_end(int idx, int64_t offset) const;
  // Where stripe `stripe`'s next block of matrix `idx` after the one ending at `end` starts (expected_ if none).
  int64_t next_block_start(int idx, int64_t end) const;

  const bool has_c_;
  const int64_t max_chunk_bytes_;
  std::array<int64_t, 3> expected_{};
  std::array<int64_t, 3> width_{};  // elements per stored row of each matrix
  int stripes_ = 1;
  std::array<int64_t, 3> block_elems_{};  // elements per block of each matrix (stripes_ > 1)
  std::array<float*, 3> dst_{};
  std::array<bool, 3> provided_{};  // guarded by mu_
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::array<std::vector<int64_t>, 3> next_;       // guarded by mu_: per stripe, the next element expected
  int64_t bytes_ = 0;                              // guarded by mu_: payload bytes copied in
  std::array<int64_t, 3> received_{};              // guarded by mu_: the prefix present on every stripe
  Status failure_;                                 // guarded by mu_
  std::chrono::milliseconds wait_budget_{0};       // guarded by mu_
  std::chrono::steady_clock::duration waited_{0};  // guarded by mu_: time spent blocked in wait_for()
  bool yield_ = false;                             // guarded by mu_: yield_now() called or budget spent
  bool yielded_ = false;                           // guarded by mu_
};

}  // namespace sgemm
