// libFuzzer target: a Multiply stream's messages through the decoder and the
// chunk assembler (server/service/request_assembly.h), as MultiplyCall drives
// them: a header, then chunks, each checked before its matrix's buffer is
// allocated, then the half-close.
//
// Input: a sequence of messages, each a 2-byte little-endian length and that
// many bytes of (possibly malformed) MultiplyRequest. Sizes are capped
// (--max-matrix-elements 1<<16, 64 KiB chunks) so every input runs fast.
// Besides the sanitizers, it checks what the assembler promises: a complete
// request has every element of each declared matrix written exactly where
// the chunks said, and an accepted chunk never writes outside its matrix.
// A header with stripes (GemmHeader.stripes, checked as the service checks
// it) spreads the chunks over stripes: most go on the stripe that owns their
// block, every third on stripe (message number % stripes), right or wrong.
//
//   build-fuzz/bin/sgemm-fuzz-assembly tests/fuzz/corpus/assembly -max_len=65536 -max_total_time=60
#include <grpc/grpc.h>
#include <grpcpp/support/byte_buffer.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include "server/service/codec.h"
#include "server/service/request_assembly.h"

namespace {

void check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "assembly fuzzer: %s\n", what);
  std::abort();
}

constexpr int64_t kMaxChunkBytes = 64 << 10;
// Guard floats around each matrix: an out-of-bounds write shows as a changed
// guard (ASan would see it too, but only past the vector's allocation).
constexpr std::size_t kGuard = 16;
constexpr uint32_t kGuardBits = 0x7fc0dead;      // a NaN marking the guards
constexpr uint32_t kUnwrittenBits = 0x7fc0beef;  // elements not written yet

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
uint32_t to_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  grpc_init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  sgemm::RequestLimits limits;
  limits.max_matrix_elements = 1 << 16;
  limits.max_chunk_bytes = kMaxChunkBytes;
  std::optional<sgemm::MatrixAssembler> assembler;
  sgemm::GemmRequest header;
  int stripes = 1;
  int64_t stripe_rows = 1;
  std::vector<float> buffers[3];
  std::size_t at = 0;
  int64_t index = 0;
  while (at + 2 <= size) {
    const std::size_t len = std::min<std::size_t>(data[at] | (std::size_t(data[at + 1]) << 8), size - at - 2);
    at += 2;
    grpc::Slice slice(data + at, len);
    at += len;
    grpc::ByteBuffer buffer(&slice, 1);
    auto msg = sgemm::decode_request(buffer, ++index, limits.max_chunk_bytes);
    if (!msg.ok()) return 0;  // the call ends here
    if (msg->kind == sgemm::RequestMessage::Kind::kEmpty) return 0;
    if (msg->kind == sgemm::RequestMessage::Kind::kHeader) {
      if (assembler) return 0;  // a second header ends the call
      header = msg->header;
      if (!sgemm::check_limits(header, limits).ok()) return 0;
      const sgemm::GemmShape& s = header.shape;
      if (s.m < 1 || s.n < 1 || s.k < 1) return 0;  // the engine's rule (Engine::validate)
      assembler.emplace(s, header.has_c, nullptr, nullptr, nullptr, limits.max_chunk_bytes);
      if (msg->stripes > 1) {  // MultiplyCall::start_stripes' rules
        if (msg->stripes > 16 || msg->stripe_rows < 1) return 0;
        if (s.m / msg->stripe_rows + (s.m % msg->stripe_rows != 0) < msg->stripes) return 0;
        stripes = msg->stripes;
        stripe_rows = msg->stripe_rows;
        assembler->set_stripes(stripes, stripe_rows);
      }
      continue;
    }
    if (!assembler) return 0;                                        // a chunk before the header
    if (msg->kind != sgemm::RequestMessage::Kind::kChunk) return 0;  // an attach here ends the call
    if (assembler->complete()) return 0;
    const int idx = static_cast<int>(msg->matrix);
    int stripe = 0;
    if (stripes > 1) {
      const int64_t width = msg->matrix == sgemm::MatrixId::kA ? header.shape.k : header.shape.n;
      stripe = index % 3 == 0 ? int(index % stripes) : int((msg->offset / width / stripe_rows) % stripes);
    }
    if (!assembler->check_chunk(msg->matrix, msg->offset, msg->data_bytes, stripe).ok()) return 0;
    if (buffers[idx].empty()) {
      const int64_t elements = sgemm::matrix_elements(header.shape, msg->matrix);
      check(elements > 0 && elements <= limits.max_matrix_elements, "a chunk accepted for an impossible matrix");
      buffers[idx].assign(std::size_t(elements) + 2 * kGuard, from_bits(kUnwrittenBits));
      for (std::size_t i = 0; i < kGuard; ++i) {
        buffers[idx][i] = from_bits(kGuardBits);
        buffers[idx][buffers[idx].size() - 1 - i] = from_bits(kGuardBits);
      }
      assembler->set_destination(msg->matrix, buffers[idx].data() + kGuard);
    }
    const int64_t before = assembler->received(msg->matrix);
    const auto st = assembler->add_chunk(
        msg->matrix, msg->offset, msg->data_bytes, [&](void* dst) { msg->copy_data(dst); }, stripe);
    if (!st.ok()) return 0;
    check(msg->data_bytes % 4 == 0, "a chunk accepted with a partial float");
    if (stripes == 1) {
      check(msg->offset == before, "a chunk accepted out of order");
      check(assembler->received(msg->matrix) == before + int64_t(msg->data_bytes / 4), "received() miscounts");
    } else {
      check(assembler->received(msg->matrix) >= before, "the stripes' common prefix went back");
      check(assembler->received(msg->matrix) <= sgemm::matrix_elements(header.shape, msg->matrix),
            "the stripes' common prefix passed the matrix's end");
    }
    for (std::size_t i = 0; i < kGuard; ++i)
      check(to_bits(buffers[idx][i]) == kGuardBits && to_bits(buffers[idx][buffers[idx].size() - 1 - i]) == kGuardBits,
            "a chunk wrote outside its matrix");
  }
  if (!assembler) return 0;
  const sgemm::Status finished = assembler->finish();
  check(finished.ok() == assembler->complete(), "finish() and complete() disagree");
  if (!finished.ok()) return 0;
  for (int m = 0; m < 3; ++m) {
    const auto id = static_cast<sgemm::MatrixId>(m);
    if (!assembler->declared(id)) continue;
    const int64_t elements = sgemm::matrix_elements(header.shape, id);
    check(assembler->received(id) == elements, "complete, but a matrix is short");
    check(assembler->wait_for(id, elements).ok(), "wait_for() fails on a complete matrix");
  }
  return 0;
}
