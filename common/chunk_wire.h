#pragma once
// The protobuf wire bytes in front of a MatrixChunk's data (proto/sgemm/v1):
// the client's encoder of A and B and the server's encoder of C both send the
// data as its own slice over the caller's buffer, behind this head. Plain
// bytes: no protobuf needed.
#include <cstdint>
#include <string>

namespace sgemm {

// The head of `message { MatrixChunk <outer_field> = { matrix (1), [offset (2)],
// data (3) } }` up to the first data byte: MultiplyRequest.chunk is field 2,
// MultiplyResponse.chunk field 1. An offset of 0 is left out, as protobuf does.
std::string matrix_chunk_head(uint32_t outer_field, uint64_t matrix, int64_t offset, uint64_t data_bytes);

}  // namespace sgemm
