#include "client/multiply_unary.h"

#include <algorithm>
#include <string>
#include <vector>

#include "proto/grpc_status.h"

namespace sgemm {

namespace {

// A varint at byte `pos` of `slices` (at most 10 bytes); false past the end.
bool read_varint(const std::vector<grpc::Slice>& slices, std::size_t pos, uint64_t* v, std::size_t* next) {
  *v = 0;
  std::size_t at = 0;  // offset of the current slice's first byte
  int shift = 0;
  for (const grpc::Slice& s : slices) {
    if (at + s.size() <= pos) {  // wholly before the varint
      at += s.size();
      continue;
    }
    for (std::size_t i = pos > at ? pos - at : 0; i < s.size(); ++i) {
      if (shift >= 70) return false;
      const uint8_t b = s.begin()[i];
      *v |= uint64_t(b & 0x7f) << shift;
      shift += 7;
      if (!(b & 0x80)) {
        *next = at + i + 1;
        return true;
      }
    }
    at += s.size();
  }
  return false;
}

// The bytes [begin, end) of `slices`, as slices over the same memory.
grpc::ByteBuffer sub_buffer(const std::vector<grpc::Slice>& slices, std::size_t begin, std::size_t end) {
  std::vector<grpc::Slice> out;
  std::size_t at = 0;
  for (const grpc::Slice& sl : slices) {
    const std::size_t s0 = at, s1 = at + sl.size();
    at = s1;
    if (s1 <= begin || s0 >= end) continue;
    out.push_back(sl.sub(std::max(begin, s0) - s0, std::min(end, s1) - s0));
  }
  return grpc::ByteBuffer(out.data(), out.size());
}

}  // namespace

bool fits_unary(const GemmShape& s, int64_t sent_elements) {
  const int64_t in = sent_elements * int64_t(sizeof(float));
  const int64_t out = s.m * s.n * int64_t(sizeof(float));
  return in <= kUnaryMaxBytes && out <= kUnaryMaxBytes;
}

UnaryExchange grpc_unary_exchange(grpc::TemplatedGenericStub<grpc::ByteBuffer, grpc::ByteBuffer>& stub,
                                  grpc::ClientContext* ctx) {
  return [&stub, ctx](const grpc::ByteBuffer& request, grpc::ByteBuffer* response) {
    grpc::Status status;
    grpc::CompletionQueue cq;
    auto call = stub.PrepareUnaryCall(ctx, "/sgemm.v1.Sgemm/MultiplyUnary", request, &cq);
    call->StartCall();
    call->Finish(response, &status, reinterpret_cast<void*>(1));
    void* tag = nullptr;
    bool ok = false;
    (void)cq.Next(&tag, &ok);  // the call's one event: its answer
    cq.Shutdown();
    while (cq.Next(&tag, &ok)) {
    }
    return from_grpc(status);
  };
}

StatusOr<UnaryOutcome> run_unary(const UnaryExchange& exchange, const v1::MultiplyRequest& header,
                                 const std::vector<UnaryInput>& inputs, float* c, int64_t c_elements,
                                 wire::SliceRefs* refs) {
  UnaryOutcome outcome;
  std::vector<grpc::Slice> slices;
  slices.emplace_back(header.SerializeAsString());
  for (const UnaryInput& in : inputs) {
    grpc::ByteBuffer chunk = wire::encode_chunk(in.matrix, in.data, 0, in.elements, refs);
    std::vector<grpc::Slice> parts;
    (void)chunk.Dump(&parts);
    slices.insert(slices.end(), parts.begin(), parts.end());
    outcome.bytes_sent += in.elements * int64_t(sizeof(float));
  }
  const grpc::ByteBuffer request(slices.data(), slices.size());
  slices.clear();  // the request holds its own references

  grpc::ByteBuffer response;
  SGEMM_RETURN_IF_ERROR(exchange(request, &response));

  // MultiplyUnaryResponse: each top-level field decodes as the
  // MultiplyResponse of that one field (c = chunk, summary).
  std::vector<grpc::Slice> in;
  if (!response.Dump(&in).ok()) return Internal("the server's MultiplyUnaryResponse is unreadable");
  std::size_t total = 0;
  for (const auto& s : in) total += s.size();
  bool have_summary = false;
  v1::MultiplyResponse summary;
  for (std::size_t pos = 0; pos < total;) {
    uint64_t tag = 0, len = 0;
    std::size_t after_tag = 0, after_len = 0;
    if (!read_varint(in, pos, &tag, &after_tag) || (tag & 7) != 2 || !read_varint(in, after_tag, &len, &after_len) ||
        len > total - after_len)
      return Internal("the server's MultiplyUnaryResponse does not parse at byte " + std::to_string(pos));
    const std::size_t end = after_len + std::size_t(len);
    grpc::ByteBuffer field = sub_buffer(in, pos, end);
    pos = end;
    const uint64_t number = tag >> 3;
    if (number != 1 && number != 2) continue;  // a field this client does not know
    SGEMM_ASSIGN_OR_RETURN(wire::Response r, wire::decode_response(field, c, c_elements, &summary));
    if (r.kind == wire::Response::Kind::kChunk) outcome.bytes_received += r.count * int64_t(sizeof(float));
    if (r.kind == wire::Response::Kind::kSummary) have_summary = true;
  }
  if (!have_summary) return Internal("the server's MultiplyUnaryResponse has no summary");
  if (outcome.bytes_received != c_elements * int64_t(sizeof(float)))
    return Internal("the server sent " + std::to_string(outcome.bytes_received / 4) + " of " +
                    std::to_string(c_elements) + " elements of C");
  outcome.summary = summary.summary();
  return outcome;
}

}  // namespace sgemm
