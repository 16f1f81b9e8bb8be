// The client's side of sgemm.v1's data plane, encoded and decoded by hand so
// matrix bytes are never copied into or out of protobuf messages:
//
//   encode_chunk()     a MultiplyRequest{chunk} as a grpc::ByteBuffer of two
//                      slices: a few bytes of framing (the same bytes protobuf
//                      writes) and a slice over the caller's own memory, which
//                      gRPC hands to the socket without a copy
//   decode_response()  a MultiplyResponse: a chunk of C is copied once, from
//                      gRPC's received slices straight into the caller's C;
//                      a summary (small) goes through protobuf
//
// Lifetime: a chunk's payload slice refers to the caller's memory. Each such
// slice holds one count on `SliceRefs`, released when gRPC drops its last
// reference (possibly after the call has ended, once the transport has written
// it); the caller must keep the memory until SliceRefs::wait_zero() returns.
//
// Threads: the functions are pure; SliceRefs is thread-safe.
#pragma once

#include <grpcpp/support/byte_buffer.h>

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>

#include "common/status.h"

namespace sgemm::v1 {
class MultiplyResponse;
}

namespace sgemm::wire {

// Counts payload slices that gRPC still holds.
class SliceRefs {
 public:
  void add();
  void release();
  void wait_zero();  // until every payload slice is released
  static void release_cb(void* self);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t count_ = 0;  // guarded by mu_
};

// The wire values of sgemm.v1.Matrix.
enum class WireMatrix : int { kA = 1, kB = 2, kC = 3 };

// MultiplyRequest { chunk (2) = MatrixChunk { matrix, offset, data } }'s
// bytes before the payload: byte-exact with protobuf's own encoding (offset 0
// omitted, as proto3 does).
std::string request_chunk_head(WireMatrix matrix, int64_t offset, uint64_t data_bytes);

// A MultiplyRequest carrying elements [offset, offset + count) of `data`
// (the whole matrix's base pointer), without copying them; `refs` counts the
// payload slice until gRPC releases it.
grpc::ByteBuffer encode_chunk(WireMatrix matrix, const float* data, int64_t offset, int64_t count, SliceRefs* refs);

// One decoded MultiplyResponse.
struct Response {
  enum class Kind { kChunk, kSummary, kStripeGrant, kEmpty };
  Kind kind = Kind::kEmpty;
  int64_t offset = 0;  // kChunk: elements [offset, offset + count) of C
  int64_t count = 0;
};

// Decodes `buffer`. A chunk of C is checked against `c_elements` and copied
// into `c` + offset; a summary (or a stripe grant) is parsed into `summary`. INTERNAL for a
// malformed message (the server's bug), naming what was wrong.
StatusOr<Response> decode_response(grpc::ByteBuffer& buffer, float* c, int64_t c_elements,
                                   sgemm::v1::MultiplyResponse* summary);

}  // namespace sgemm::wire
