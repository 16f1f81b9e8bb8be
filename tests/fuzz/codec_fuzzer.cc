// libFuzzer target: decode_request() (server/service/codec.h) on arbitrary
// bytes, spread over one to four grpc::Slices as gRPC may hand them over.
//
// Besides the sanitizers' checks, the decoder is held to protobuf's word:
// whatever it accepts must parse as a sgemm.v1.MultiplyRequest with the same
// kind, matrix, offset and payload (its in-place path and protobuf's parser
// must never disagree on a message both take).
//
//   build-fuzz/bin/sgemm-fuzz-codec tests/fuzz/corpus/codec -max_total_time=60
#include <grpc/grpc.h>
#include <grpcpp/support/byte_buffer.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "server/service/codec.h"
#include "sgemm/v1/sgemm.pb.h"

namespace {

void check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "codec fuzzer: %s\n", what);
  std::abort();  // a finding: libFuzzer keeps the input
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  grpc_init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  // First byte: how to cut the rest into slices, and the chunk limit.
  const uint8_t control = data[0];
  ++data;
  --size;
  const int pieces = 1 + (control & 3);
  const int64_t max_chunk = (control & 4) ? 64 : (4 << 20) - 1024;
  std::vector<grpc::Slice> slices;
  std::size_t at = 0;
  for (int i = 0; i < pieces; ++i) {
    const std::size_t n = i + 1 == pieces ? size - at : std::min(size - at, std::size_t(control >> 3) * (i + 1));
    slices.emplace_back(data + at, n);
    at += n;
  }
  grpc::ByteBuffer buffer(slices.data(), slices.size());
  auto decoded = sgemm::decode_request(buffer, 1, max_chunk);
  if (!decoded.ok()) {
    check(decoded.status().code() == sgemm::StatusCode::kInvalidArgument, "an error other than INVALID_ARGUMENT");
    check(!decoded.status().message().empty(), "an error without a message");
    return 0;
  }
  const sgemm::RequestMessage& msg = *decoded;
  sgemm::v1::MultiplyRequest req;
  check(req.ParseFromArray(data, int(size)), "decode_request accepted bytes protobuf does not parse");
  switch (msg.kind) {
    case sgemm::RequestMessage::Kind::kEmpty:
      check(req.kind_case() == sgemm::v1::MultiplyRequest::KIND_NOT_SET, "empty, but protobuf sees a field");
      break;
    case sgemm::RequestMessage::Kind::kHeader: {
      check(req.has_header(), "a header, but protobuf sees none");
      // A group's header has no shape of its own (m, n, k are 0): the request carries its
      // first product's, and every product is in its batch spec.
      const sgemm::v1::GemmHeader& h = req.header();
      const bool group = h.group_size() > 0;
      const int64_t m = group ? h.group(0).m() : h.m(), n = group ? h.group(0).n() : h.n(),
                    k = group ? h.group(0).k() : h.k();
      check(msg.header.shape.m == m && msg.header.shape.n == n && msg.header.shape.k == k,
            "the header's shape differs from protobuf's");
      check(!group || (msg.header.batch && msg.header.batch->count() == h.group_size()),
            "a group whose products differ in number from protobuf's");
      sgemm::RequestLimits limits;
      (void)sgemm::check_limits(msg.header, limits);
      break;
    }
    case sgemm::RequestMessage::Kind::kChunk: {
      check(req.has_chunk(), "a chunk, but protobuf sees none");
      check(int(msg.matrix) + 1 == int(req.chunk().matrix()), "the chunk's matrix differs from protobuf's");
      check(msg.offset == req.chunk().offset(), "the chunk's offset differs from protobuf's");
      check(msg.data_bytes == req.chunk().data().size(), "the chunk's length differs from protobuf's");
      std::string copy(msg.data_bytes, '\0');
      msg.copy_data(copy.data());
      check(copy == req.chunk().data(), "the chunk's payload differs from protobuf's");
      break;
    }
    case sgemm::RequestMessage::Kind::kAttach:
      check(req.has_attach(), "a stripe attach, but protobuf sees none");
      check(msg.token == req.attach().token() && msg.stripe == req.attach().stripe(),
            "the attach's token or stripe differs from protobuf's");
      break;
  }
  return 0;
}
