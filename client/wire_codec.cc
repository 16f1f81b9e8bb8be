#include "client/wire_codec.h"

#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/slice.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/chunk_wire.h"
#include "sgemm/v1/sgemm.pb.h"

namespace sgemm::wire {

namespace v1 = ::sgemm::v1;

void SliceRefs::add() {
  std::lock_guard lock(mu_);
  ++count_;
}

void SliceRefs::release() {
  // Notified under the lock: wait_zero() may destroy *this as soon as it sees zero.
  std::lock_guard lock(mu_);
  if (--count_ == 0) cv_.notify_all();
}

void SliceRefs::wait_zero() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return count_ == 0; });
}

void SliceRefs::release_cb(void* self) { static_cast<SliceRefs*>(self)->release(); }

namespace {

// Reads varints from a small prefix copied out of the message.
struct Prefix {
  const uint8_t* p;
  std::size_t size, pos = 0;
  bool varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos >= size) return false;
      const uint8_t b = p[pos++];
      *v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  }
};

// Copies `n` bytes starting `skip` bytes into `slices` to `dst`.
void copy_out(const std::vector<grpc::Slice>& slices, std::size_t skip, std::size_t n, uint8_t* dst) {
  for (const grpc::Slice& sl : slices) {
    if (n == 0) return;
    if (skip >= sl.size()) {
      skip -= sl.size();
      continue;
    }
    const std::size_t k = std::min(n, sl.size() - skip);
    std::memcpy(dst, sl.begin() + skip, k);
    dst += k;
    n -= k;
    skip = 0;
  }
}

StatusOr<Response> check_chunk(int64_t matrix, int64_t offset, uint64_t bytes, int64_t c_elements) {
  if (matrix != int64_t(v1::MATRIX_C) || offset < 0 || bytes % sizeof(float) != 0 ||
      int64_t(bytes / sizeof(float)) > c_elements - offset)
    return Internal("server sent a malformed chunk of C (matrix " + std::to_string(matrix) + ", offset " +
                    std::to_string(offset) + ", " + std::to_string(bytes) + " bytes, C has " +
                    std::to_string(c_elements) + " elements)");
  Response r;
  r.kind = Response::Kind::kChunk;
  r.offset = offset;
  r.count = int64_t(bytes / sizeof(float));
  return r;
}

}  // namespace

std::string request_chunk_head(WireMatrix matrix, int64_t offset, uint64_t data_bytes) {
  return matrix_chunk_head(2, uint64_t(matrix), offset, data_bytes);  // MultiplyRequest.chunk
}

grpc::ByteBuffer encode_chunk(WireMatrix matrix, const float* data, int64_t offset, int64_t count, SliceRefs* refs) {
  const std::size_t bytes = std::size_t(count) * sizeof(float);
  refs->add();
  // gRPC never writes through a send slice; the count drops when it lets go of it.
  grpc::Slice slices[2] = {grpc::Slice(request_chunk_head(matrix, offset, bytes)),
                           grpc::Slice(const_cast<float*>(data + offset), bytes, &SliceRefs::release_cb, refs)};
  return grpc::ByteBuffer(slices, 2);
}

StatusOr<Response> decode_response(grpc::ByteBuffer& buffer, float* c, int64_t c_elements,
                                   v1::MultiplyResponse* summary) {
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) return Internal("server sent an unreadable message");
  std::size_t total = 0;
  for (const auto& s : slices) total += s.size();
  // The usual chunk: MultiplyResponse.chunk (1) { matrix (1), [offset (2)], data (3) }, in that order.
  uint8_t head[40];
  const std::size_t head_size = std::min(total, sizeof head);
  copy_out(slices, 0, head_size, head);
  Prefix r{head, head_size};
  uint64_t tag, len, matrix, v, offset = 0;
  if (head_size > 0 && head[0] == ((1 << 3) | 2) && r.varint(&tag) && r.varint(&len) && len == total - r.pos &&
      r.varint(&tag) && tag == ((1 << 3) | 0) && r.varint(&matrix) && r.varint(&tag)) {
    if (tag == ((2 << 3) | 0) && r.varint(&offset)) {
      if (!r.varint(&tag)) tag = 0;
    }
    if (tag == ((3 << 3) | 2) && r.varint(&v) && v == total - r.pos) {
      auto resp = check_chunk(int64_t(matrix), int64_t(offset), v, c_elements);
      if (!resp.ok()) return resp.status();
      copy_out(slices, r.pos, std::size_t(v), reinterpret_cast<uint8_t*>(c + offset));
      return resp;
    }
  }
  // Anything else (the summary, or a chunk encoded differently): protobuf decides.
  v1::MultiplyResponse msg;
  grpc::ByteBuffer whole(slices.data(), slices.size());
  if (!grpc::SerializationTraits<v1::MultiplyResponse>::Deserialize(&whole, &msg).ok())
    return Internal("server sent a message that does not parse as a sgemm.v1.MultiplyResponse");
  if (msg.has_chunk()) {
    const v1::MatrixChunk& ch = msg.chunk();
    auto resp = check_chunk(int64_t(ch.matrix()), ch.offset(), ch.data().size(), c_elements);
    if (!resp.ok()) return resp.status();
    std::memcpy(c + ch.offset(), ch.data().data(), ch.data().size());
    return resp;
  }
  Response out;
  if (msg.has_summary()) {
    summary->Swap(&msg);
    out.kind = Response::Kind::kSummary;
  } else if (msg.has_stripe_grant()) {
    summary->Swap(&msg);
    out.kind = Response::Kind::kStripeGrant;
  }
  return out;
}

}  // namespace sgemm::wire
