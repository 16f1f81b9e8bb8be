#include "server/service/request_assembly.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

namespace sgemm {

std::string_view matrix_name(MatrixId m) {
  switch (m) {
    case MatrixId::kA:
      return "A";
    case MatrixId::kB:
      return "B";
    case MatrixId::kC:
      return "C";
  }
  return "?";
}

int64_t matrix_elements(const GemmShape& s, MatrixId m) {
  switch (m) {
    case MatrixId::kA:
      return s.m * s.k;
    case MatrixId::kB:
      return s.k * s.n;
    case MatrixId::kC:
      return s.m * s.n;
  }
  return 0;
}

namespace {

Status check_product(const char* what, const char* dims, int64_t x, int64_t y, const RequestLimits& limits) {
  if (x > std::numeric_limits<int64_t>::max() / y)
    return InvalidArgument(std::string(what) + " (" + dims + " = " + std::to_string(x) + " x " + std::to_string(y) +
                           ") overflows a 64-bit element count");
  const int64_t elements = x * y;
  if (elements > limits.max_matrix_elements)
    return ResourceExhausted(std::string(what) + " has " + std::to_string(elements) + " elements (" + dims +
                             "), over the server's limit of " + std::to_string(limits.max_matrix_elements) +
                             " (--max-matrix-elements)");
  return Status::Ok();
}

}  // namespace

Status check_limits(const GemmRequest& h, const RequestLimits& limits) {
  if (h.shape.m < 1 || h.shape.n < 1 || h.shape.k < 1) return Status::Ok();  // Engine::validate names it
  SGEMM_RETURN_IF_ERROR(check_product("A", "m x k", h.shape.m, h.shape.k, limits));
  SGEMM_RETURN_IF_ERROR(check_product("B", "k x n", h.shape.k, h.shape.n, limits));
  SGEMM_RETURN_IF_ERROR(check_product("C", "m x n", h.shape.m, h.shape.n, limits));
  return Status::Ok();
}

Status check_upload_pace(int64_t received_bytes, std::chrono::steady_clock::duration since,
                         std::chrono::milliseconds grace, int64_t held_bytes, const RequestLimits& limits,
                         std::string_view what) {
  const int64_t rate = limits.min_upload_bytes_per_s;
  if (rate <= 0 || since <= grace) return Status::Ok();
  const double paced_s = std::chrono::duration<double>(since - grace).count();
  const double due = double(rate) * paced_s;
  if (double(received_bytes) >= due) return Status::Ok();
  const double since_s = std::chrono::duration<double>(since).count();
  char figures[256];
  std::snprintf(figures, sizeof figures, "%lld bytes in %.1f s (%.0f bytes/s)", (long long)received_bytes, since_s,
                received_bytes / std::max(since_s, 1e-9));
  return DeadlineExceeded(std::string(what) + " uploaded too slowly while holding " + std::to_string(held_bytes) +
                          " bytes of server memory: " + figures + "; after " + std::to_string(grace.count() / 1000) +
                          " s of grace (--idle-timeout) an upload must average at least " + std::to_string(rate) +
                          " bytes/s (--min-upload-rate)");
}

Status check_output_bound(const GemmRequest& r, const RequestLimits& limits) {
  if (limits.max_output_ratio <= 0) return Status::Ok();
  const GemmShape& s = r.shape;
  const __int128 c_bytes = __int128(s.m) * s.n * 4;
  const __int128 in_bytes = (__int128(s.m) * s.k + __int128(s.k) * s.n + (r.has_c ? __int128(s.m) * s.n : 0)) * 4;
  if (c_bytes <= limits.output_floor_bytes || c_bytes <= in_bytes * limits.max_output_ratio) return Status::Ok();
  return ResourceExhausted(
      "C (m x n = " + std::to_string(s.m) + " x " + std::to_string(s.n) + ") is " + std::to_string(int64_t(c_bytes)) +
      " bytes from " + std::to_string(int64_t(in_bytes)) + " bytes of inputs: the server holds an output of at most " +
      std::to_string(limits.max_output_ratio) + " times its inputs (--max-output-ratio) or " +
      std::to_string(limits.output_floor_bytes) +
      " bytes (--output-floor-bytes), whichever is larger; split the product into blocks of rows of C, or name an "
      "output region (header.out_region) on the Unix socket");
}

MatrixAssembler::MatrixAssembler(const GemmShape& shape, bool has_c, float* a, float* b, float* c,
                                 int64_t max_chunk_bytes, Op op_a, Op op_b)
    : has_c_(has_c), max_chunk_bytes_(max_chunk_bytes) {
  expected_ = {matrix_elements(shape, MatrixId::kA), matrix_elements(shape, MatrixId::kB),
               has_c ? matrix_elements(shape, MatrixId::kC) : 0};
  // Stored widths: A is k x m under op_a = kT, B is n x k under op_b = kT.
  width_ = {op_a == Op::kT ? shape.m : shape.k, op_b == Op::kT ? shape.k : shape.n, shape.n};
  dst_ = {a, b, has_c ? c : nullptr};
  for (int i = 0; i < 3; ++i) next_[i] = {0};
}

MatrixAssembler::MatrixAssembler(const std::array<int64_t, 3>& elements, bool has_c, int64_t max_chunk_bytes)
    : has_c_(has_c), max_chunk_bytes_(max_chunk_bytes) {
  expected_ = {elements[0], elements[1], has_c ? elements[2] : 0};
  width_ = {elements[0], elements[1], elements[2]};
  for (int i = 0; i < 3; ++i) next_[i] = {0};
}

void MatrixAssembler::set_destination(MatrixId matrix, float* dst) {
  std::lock_guard lock(mu_);
  dst_[static_cast<int>(matrix)] = dst;
}

void MatrixAssembler::set_stripes(int stripes, int64_t stripe_rows) {
  std::lock_guard lock(mu_);
  stripes_ = std::max(1, stripes);
  for (int i = 0; i < 3; ++i) {
    const int64_t rows = width_[i] > 0 ? expected_[i] / width_[i] : 0;
    // Clamped to the matrix's rows, so the product cannot overflow: one block is then the whole matrix.
    block_elems_[i] = std::max<int64_t>(
        1, std::min(std::max<int64_t>(stripe_rows, 1), std::max<int64_t>(rows, 1)) * std::max<int64_t>(width_[i], 1));
    next_[i].assign(std::size_t(stripes_), 0);
    // Block s starts stripe s's share; a stripe with no block of this matrix has its share already
    // (every stripe has it all when the header named the matrix by handle).
    for (int s = 0; s < stripes_; ++s)
      next_[i][std::size_t(s)] = provided_[i] ? expected_[i] : std::min(int64_t(s) * block_elems_[i], expected_[i]);
    received_[i] = *std::min_element(next_[i].begin(), next_[i].end());
  }
}

int64_t MatrixAssembler::block_end(int idx, int64_t offset) const {
  if (stripes_ == 1) return expected_[idx];
  return std::min(expected_[idx], (offset / block_elems_[idx] + 1) * block_elems_[idx]);
}

int64_t MatrixAssembler::next_block_start(int idx, int64_t end) const {
  if (stripes_ == 1 || end >= expected_[idx] || end % block_elems_[idx] != 0) return end;
  // `end` closes a block: the stripe's next one is stripes_ - 1 blocks further on.
  const int64_t skip = int64_t(stripes_ - 1) * block_elems_[idx];
  return skip > expected_[idx] - end ? expected_[idx] : std::min(expected_[idx], end + skip);
}

void MatrixAssembler::mark_provided(MatrixId matrix) {
  std::lock_guard lock(mu_);
  const int idx = static_cast<int>(matrix);
  provided_[idx] = true;
  received_[idx] = expected_[idx];
  for (auto& n : next_[idx]) n = expected_[idx];  // every stripe's share is there
}

Status MatrixAssembler::check_chunk(MatrixId matrix, int64_t offset, std::size_t bytes, int stripe) const {
  const int idx = static_cast<int>(matrix);
  const std::string name(matrix_name(matrix));
  {
    std::lock_guard lock(mu_);
    if (provided_[idx])
      return InvalidArgument("chunk for " + name + ", but the header names " + name +
                             " by handle (a resident matrix): send no chunk for it");
  }
  if (!declared(matrix))
    return InvalidArgument("chunk for matrix C, but the header declared no C (set header.has_c to send C)");
  if (bytes == 0) return InvalidArgument("chunk for " + name + " at offset " + std::to_string(offset) + " is empty");
  if (bytes % sizeof(float) != 0)
    return InvalidArgument("chunk for " + name + " has " + std::to_string(bytes) +
                           " bytes, not a multiple of 4 (fp32 values)");
  if (int64_t(bytes) > max_chunk_bytes_)
    return InvalidArgument("chunk for " + name + " has " + std::to_string(bytes) + " bytes, over the limit of " +
                           std::to_string(max_chunk_bytes_) + " bytes per chunk; send the matrix in smaller chunks");
  const int64_t count = int64_t(bytes / sizeof(float));
  std::lock_guard lock(mu_);
  if (!failure_.ok()) return failure_;
  if (stripe < 0 || stripe >= stripes_) return Internal("chunk on stripe " + std::to_string(stripe) + " of none");
  const int64_t have = next_[idx][std::size_t(stripe)];
  if (stripes_ > 1) {
    const std::string on = " on stripe " + std::to_string(stripe) + " of " + std::to_string(stripes_);
    if (offset != have)
      return InvalidArgument("chunk for " + name + on + " starts at offset " + std::to_string(offset) +
                             " but the stripe's next element of " + name + " is " + std::to_string(have) +
                             (have == expected_[idx] ? " (its share is complete)" : "") +
                             "; a stripe sends the blocks of stripe_rows rows it owns (block j on stripe j % "
                             "stripes) in order, without gaps or overlaps");
    const int64_t end = block_end(idx, offset);
    if (count > end - offset)
      return InvalidArgument("chunk for " + name + on + " at offset " + std::to_string(offset) + " has " +
                             std::to_string(count) + " values and crosses the end of its block at element " +
                             std::to_string(end) + "; end each chunk at its block's end (GemmHeader.stripe_rows)");
    return Status::Ok();
  }
  if (offset != have)
    return InvalidArgument("chunk for " + name + " starts at offset " + std::to_string(offset) + " but " +
                           std::to_string(have) + " elements of " + name +
                           " have arrived; a matrix's chunks must arrive in order without gaps or overlaps");
  if (count > expected_[idx] - have)
    return InvalidArgument("chunk for " + name + " overruns the matrix: offset " + std::to_string(offset) + " + " +
                           std::to_string(count) + " values > " + std::to_string(expected_[idx]) + " elements");
  return Status::Ok();
}

bool MatrixAssembler::complete() const {
  std::lock_guard lock(mu_);
  return received_ == expected_;
}

Status MatrixAssembler::add_chunk(MatrixId matrix, int64_t offset, const void* data, std::size_t bytes, int stripe) {
  return add_chunk(
      matrix, offset, bytes, [&](void* dst) { std::memcpy(dst, data, bytes); }, stripe);
}

Status MatrixAssembler::add_chunk(MatrixId matrix, int64_t offset, std::size_t bytes,
                                  const std::function<void(void*)>& copy, int stripe) {
  SGEMM_RETURN_IF_ERROR(check_chunk(matrix, offset, bytes, stripe));
  const int idx = static_cast<int>(matrix);
  const int64_t count = int64_t(bytes / sizeof(float));
  float* dst;
  {
    std::lock_guard lock(mu_);
    dst = dst_[idx];
  }
  if (!dst) return Internal("no buffer for matrix " + std::string(matrix_name(matrix)) + " before its first chunk");
  // Only this stripe's thread writes this region, and readers wait until received_ covers it.
  copy(dst + offset);
  {
    std::lock_guard lock(mu_);
    auto& next = next_[idx];
    next[std::size_t(stripe)] = next_block_start(idx, offset + count);
    received_[idx] = *std::min_element(next.begin(), next.end());
    bytes_ += int64_t(bytes);
  }
  cv_.notify_all();
  return Status::Ok();
}

Status MatrixAssembler::finish_stripe(int stripe) {
  std::lock_guard lock(mu_);
  if (!failure_.ok()) return failure_;
  if (stripe < 0 || stripe >= stripes_) return Internal("finish of stripe " + std::to_string(stripe) + " of none");
  for (MatrixId m : {MatrixId::kA, MatrixId::kB, MatrixId::kC}) {
    const int idx = static_cast<int>(m);
    const int64_t next = next_[idx][std::size_t(stripe)];
    if (next != expected_[idx])
      return InvalidArgument("stripe " + std::to_string(stripe) + " of " + std::to_string(stripes_) +
                             " ended its stream early: it had sent " + std::string(matrix_name(m)) + " up to element " +
                             std::to_string(next) + " of its share (the matrix has " + std::to_string(expected_[idx]) +
                             " elements)");
  }
  return Status::Ok();
}

Status MatrixAssembler::finish() {
  std::lock_guard lock(mu_);
  if (!failure_.ok()) return failure_;
  for (MatrixId m : {MatrixId::kA, MatrixId::kB, MatrixId::kC}) {
    const int idx = static_cast<int>(m);
    if (received_[idx] != expected_[idx])
      return InvalidArgument("the request stream ended early: " + std::string(matrix_name(m)) + " has " +
                             std::to_string(received_[idx]) + " of " + std::to_string(expected_[idx]) + " elements");
  }
  return Status::Ok();
}

void MatrixAssembler::fail(const Status& why) {
  {
    std::lock_guard lock(mu_);
    if (failure_.ok()) failure_ = why.ok() ? Internal("request failed without a reason") : why;
  }
  cv_.notify_all();
}

void MatrixAssembler::set_wait_budget(std::chrono::milliseconds budget) {
  std::lock_guard lock(mu_);
  wait_budget_ = budget;
  waited_ = {};
  yield_ = yielded_ = false;
}

void MatrixAssembler::yield_now() {
  {
    std::lock_guard lock(mu_);
    if (wait_budget_.count() == 0) return;
    yield_ = true;
  }
  cv_.notify_all();
}

bool MatrixAssembler::yielded() const {
  std::lock_guard lock(mu_);
  return yielded_;
}

Status MatrixAssembler::wait_for(MatrixId matrix, int64_t elements) {
  const int idx = static_cast<int>(matrix);
  std::unique_lock lock(mu_);
  if (elements > expected_[idx])
    return Internal("engine waited for " + std::to_string(elements) + " elements of " +
                    std::string(matrix_name(matrix)) + ", which has " + std::to_string(expected_[idx]));
  const auto ready = [&] { return !failure_.ok() || received_[idx] >= elements; };
  if (wait_budget_.count() == 0) {
    cv_.wait(lock, ready);
  } else if (!ready()) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto left = std::chrono::steady_clock::duration(wait_budget_) - waited_;
    if (!yield_ && left.count() > 0) cv_.wait_until(lock, t0 + left, [&] { return ready() || yield_; });
    waited_ += std::chrono::steady_clock::now() - t0;
    if (!ready()) {
      yield_ = yielded_ = true;
      return Unavailable("yielded the compute slot while waiting for " + std::string(matrix_name(matrix)) + " (" +
                         std::to_string(received_[idx]) + " of " + std::to_string(expected_[idx]) + " elements)");
    }
  }
  if (received_[idx] >= elements) return Status::Ok();
  return failure_;
}

int64_t MatrixAssembler::received(MatrixId matrix) const {
  std::lock_guard lock(mu_);
  return received_[static_cast<int>(matrix)];
}

int64_t MatrixAssembler::bytes_received() const {
  std::lock_guard lock(mu_);
  return bytes_;
}

}  // namespace sgemm
