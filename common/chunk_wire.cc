#include "common/chunk_wire.h"

namespace sgemm {
namespace {

void put_varint(std::string& s, uint64_t v) {
  while (v >= 0x80) {
    s.push_back(char(uint8_t(v) | 0x80));
    v >>= 7;
  }
  s.push_back(char(v));
}

std::size_t varint_size(uint64_t v) {
  std::size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

constexpr char tag(uint32_t field, uint32_t wire_type) { return char((field << 3) | wire_type); }

}  // namespace

std::string matrix_chunk_head(uint32_t outer_field, uint64_t matrix, int64_t offset, uint64_t data_bytes) {
  const uint64_t chunk_len = 1 + varint_size(matrix) + (offset ? 1 + varint_size(uint64_t(offset)) : 0) + 1 +
                             varint_size(data_bytes) + data_bytes;
  std::string head;
  head.push_back(tag(outer_field, 2));  // the chunk, length-delimited
  put_varint(head, chunk_len);
  head.push_back(tag(1, 0));  // matrix
  put_varint(head, matrix);
  if (offset) {
    head.push_back(tag(2, 0));  // offset
    put_varint(head, uint64_t(offset));
  }
  head.push_back(tag(3, 2));  // data
  put_varint(head, data_bytes);
  return head;
}

}  // namespace sgemm
