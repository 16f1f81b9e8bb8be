// Decoding what clients send: a Multiply stream's messages (in place over
// gRPC's slices, the chunk payload copied once into its matrix) and
// PutMatrix messages. Conversions and what the service sends are in
// codec_convert.cc.
#include "server/service/codec.h"

#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/proto_buffer_writer.h>
#include <grpcpp/support/slice.h>

#include <algorithm>
#include <cstring>

#include "common/chunk_wire.h"

namespace sgemm {

// `v1` is ::sgemm::v1 here (an alias would redefine it; clang says so).

void RequestMessage::copy_data(void* dst) const {
  auto* out = static_cast<uint8_t*>(dst);
  std::size_t skip = data_offset, left = data_bytes;
  for (const grpc::Slice& sl : slices) {
    if (left == 0) break;
    if (skip >= sl.size()) {
      skip -= sl.size();
      continue;
    }
    const std::size_t n = std::min(left, sl.size() - skip);
    std::memcpy(out, sl.begin() + skip, n);
    out += n;
    left -= n;
    skip = 0;
  }
}

namespace {

// Reads protobuf wire format across a message's slices, without copying.
class WireReader {
 public:
  explicit WireReader(const std::vector<grpc::Slice>& slices) : slices_(slices) {
    for (const auto& s : slices_) size_ += s.size();
  }
  std::size_t pos() const { return pos_; }
  std::size_t size() const { return size_; }
  // A varint of at most `max_bytes` bytes (protobuf's limit: 10 for values,
  // 5 for tags and lengths).
  bool varint(uint64_t* v, int max_bytes = 10) {
    *v = 0;
    for (int shift = 0; shift < 7 * max_bytes; shift += 7) {
      uint8_t b;
      if (!byte(&b)) return false;
      *v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  }
  bool skip(std::size_t n) {
    if (n > size_ - pos_) return false;
    advance(n);
    return true;
  }
  // A field's tag as protobuf reads it: a varint of at most 5 bytes and 32
  // bits whose field number is not 0 (the fuzzer found all three let through).
  bool tag(uint32_t* field, uint32_t* wire) {
    uint64_t t;
    if (!varint(&t, 5) || t > 0xffffffffu || (t >> 3) == 0) return false;
    *field = uint32_t(t >> 3);
    *wire = uint32_t(t & 7);
    return true;
  }
  // A length-delimited field's length as protobuf reads it: at most 5 bytes, under 2 GiB.
  bool length(uint64_t* n) { return varint(n, 5) && *n < (uint64_t{1} << 31) - 64; }
  // Skips a field of `wire_type` whose tag was just read.
  bool skip_field(uint32_t wire_type) {
    uint64_t v;
    switch (wire_type) {
      case 0:
        return varint(&v);
      case 1:
        return skip(8);
      case 2:
        return length(&v) && skip(std::size_t(v));
      case 5:
        return skip(4);
      default:
        return false;
    }
  }
  bool bytes(std::size_t n, std::string* out) {
    if (n > size_ - pos_) return false;
    out->clear();
    out->reserve(n);
    while (n > 0) {
      while (in_slice_ >= slices_[slice_].size()) {  // empty slices
        ++slice_;
        in_slice_ = 0;
      }
      const grpc::Slice& s = slices_[slice_];
      const std::size_t k = std::min(n, s.size() - in_slice_);
      out->append(reinterpret_cast<const char*>(s.begin()) + in_slice_, k);
      advance(k);
      n -= k;
    }
    return true;
  }

 private:
  bool byte(uint8_t* b) {
    if (pos_ >= size_) return false;
    while (in_slice_ >= slices_[slice_].size()) {
      ++slice_;
      in_slice_ = 0;
    }
    *b = slices_[slice_].begin()[in_slice_];
    advance(1);
    return true;
  }
  void advance(std::size_t n) {
    pos_ += n;
    while (n > 0 && slice_ < slices_.size()) {
      const std::size_t k = std::min(n, slices_[slice_].size() - in_slice_);
      in_slice_ += k;
      n -= k;
      if (in_slice_ == slices_[slice_].size()) {
        ++slice_;
        in_slice_ = 0;
      }
    }
  }

  const std::vector<grpc::Slice>& slices_;
  std::size_t size_ = 0, pos_ = 0, slice_ = 0, in_slice_ = 0;
};

enum class Fast { kDone, kFallback, kMalformed };

// The usual shapes: one header, or one chunk whose fields each appear once.
Fast decode_in_place(const std::vector<grpc::Slice>& slices, RequestMessage* out, std::string* header_bytes,
                     int* matrix) {
  WireReader r(slices);
  int top_fields = 0;
  while (r.pos() < r.size()) {
    uint32_t field, wire;
    if (!r.tag(&field, &wire)) return Fast::kMalformed;
    if ((field == 1 || field == 2) && wire == 2) {
      if (++top_fields > 1) return Fast::kFallback;  // oneof rules: leave it to protobuf
      uint64_t len;
      if (!r.length(&len) || len > r.size() - r.pos()) return Fast::kMalformed;
      if (field == 1) {
        if (!r.bytes(std::size_t(len), header_bytes)) return Fast::kMalformed;
        out->kind = RequestMessage::Kind::kHeader;
        continue;
      }
      out->kind = RequestMessage::Kind::kChunk;
      const std::size_t end = r.pos() + std::size_t(len);
      bool seen[4] = {false, false, false, false};
      while (r.pos() < end) {
        uint32_t f, w;
        if (!r.tag(&f, &w)) return Fast::kMalformed;
        if (f >= 1 && f <= 3) {
          if (seen[f]) return Fast::kFallback;
          seen[f] = true;
        }
        uint64_t v;
        if (f == 1 && w == 0) {
          if (!r.varint(&v)) return Fast::kMalformed;
          *matrix = int(int32_t(uint32_t(v)));
        } else if (f == 2 && w == 0) {
          if (!r.varint(&v)) return Fast::kMalformed;
          out->offset = int64_t(v);
        } else if (f == 3 && w == 2) {
          if (!r.length(&v) || v > end - r.pos()) return Fast::kMalformed;
          out->data_offset = r.pos();
          out->data_bytes = std::size_t(v);
          if (!r.skip(std::size_t(v))) return Fast::kMalformed;
        } else if (f >= 1 && f <= 3) {
          return Fast::kFallback;  // a known field with an unexpected wire type
        } else if (!r.skip_field(w)) {
          return Fast::kMalformed;
        }
      }
      if (r.pos() != end) return Fast::kMalformed;
    } else if (field == 1 || field == 2 || field == 10) {
      return Fast::kFallback;  // StripeAttach (10) is rare: protobuf reads it
    } else if (!r.skip_field(wire)) {
      return Fast::kMalformed;
    }
  }
  return Fast::kDone;
}

}  // namespace

StatusOr<RequestMessage> decode_request(grpc::ByteBuffer& buffer, int64_t index, int64_t max_chunk_bytes) {
  const std::size_t bytes = buffer.Length();
  // A chunk's payload plus its few bytes of framing.
  const std::size_t max_message = std::size_t(max_chunk_bytes) + 64;
  if (bytes > max_message)
    return InvalidArgument("message " + std::to_string(index) + " of the stream has " + std::to_string(bytes) +
                           " bytes; this server takes at most " + std::to_string(max_chunk_bytes) +
                           " bytes of matrix data per message: send each matrix as several MatrixChunk messages "
                           "of at most that size (see Limits.max_chunk_bytes in GetInfo)");
  const Status parse_error =
      InvalidArgument("message " + std::to_string(index) + " of the stream (" + std::to_string(bytes) +
                      " bytes) does not parse as a sgemm.v1.MultiplyRequest");
  RequestMessage out;
  if (!buffer.Dump(&out.slices).ok()) return parse_error;
  std::string header_bytes;
  int matrix = 0;
  const Fast fast = decode_in_place(out.slices, &out, &header_bytes, &matrix);
  if (fast == Fast::kMalformed) return parse_error;
  if (fast == Fast::kDone) {
    if (out.kind == RequestMessage::Kind::kHeader) {
      v1::GemmHeader h;
      if (!h.ParseFromString(header_bytes)) return parse_error;
      auto converted = header_from_proto(h);
      if (!converted.ok()) return converted.status();
      out.header = *converted;
      out.regions = region_operands_from_proto(h);
      out.resident = resident_operands_from_proto(h);
      out.device = device_refs_from_proto(h);
      out.trace = h.trace();
      out.stripes = h.stripes();
      out.stripe_rows = h.stripe_rows();
      out.slices.clear();
    } else if (out.kind == RequestMessage::Kind::kChunk) {
      auto m = matrix_from_proto(static_cast<v1::Matrix>(matrix));
      if (!m.ok()) return m.status();
      out.matrix = *m;
    } else {
      out.slices.clear();
    }
    return out;
  }
  // Unusual encodings: protobuf decides, and the payload is copied once more.
  v1::MultiplyRequest req;
  {
    grpc::ProtoBufferReader reader(&buffer);
    if (!req.ParseFromZeroCopyStream(&reader)) return parse_error;
  }
  RequestMessage slow;
  switch (req.kind_case()) {
    case v1::MultiplyRequest::kHeader: {
      auto h = header_from_proto(req.header());
      if (!h.ok()) return h.status();
      slow.kind = RequestMessage::Kind::kHeader;
      slow.header = *h;
      slow.regions = region_operands_from_proto(req.header());
      slow.resident = resident_operands_from_proto(req.header());
      slow.device = device_refs_from_proto(req.header());
      slow.trace = req.header().trace();
      slow.stripes = req.header().stripes();
      slow.stripe_rows = req.header().stripe_rows();
      break;
    }
    case v1::MultiplyRequest::kAttach:
      slow.kind = RequestMessage::Kind::kAttach;
      slow.token = req.attach().token();
      slow.stripe = req.attach().stripe();
      break;
    case v1::MultiplyRequest::kChunk: {
      auto m = matrix_from_proto(req.chunk().matrix());
      if (!m.ok()) return m.status();
      slow.kind = RequestMessage::Kind::kChunk;
      slow.matrix = *m;
      slow.offset = req.chunk().offset();
      slow.data_bytes = req.chunk().data().size();
      slow.slices.emplace_back(req.chunk().data());
      break;
    }
    default:
      slow.kind = RequestMessage::Kind::kEmpty;
  }
  return slow;
}

namespace {

// The bytes [begin, end) of `slices`, as slices over the same memory.
std::vector<grpc::Slice> sub_slices(const std::vector<grpc::Slice>& slices, std::size_t begin, std::size_t end) {
  std::vector<grpc::Slice> out;
  std::size_t at = 0;
  for (const grpc::Slice& sl : slices) {
    const std::size_t s0 = at, s1 = at + sl.size();
    at = s1;
    if (s1 <= begin || s0 >= end) continue;
    out.push_back(sl.sub(std::max(begin, s0) - s0, std::min(end, s1) - s0));
  }
  return out;
}

}  // namespace

StatusOr<std::vector<RequestMessage>> decode_unary_request(const grpc::ByteBuffer& buffer, int64_t max_chunk_bytes) {
  const Status parse_error = InvalidArgument("the request (" + std::to_string(buffer.Length()) +
                                             " bytes) does not parse as a sgemm.v1.MultiplyUnaryRequest");
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) return parse_error;
  std::vector<RequestMessage> out;
  WireReader r(slices);
  int chunks = 0;
  while (r.pos() < r.size()) {
    const std::size_t begin = r.pos();
    uint32_t field, wire;
    if (!r.tag(&field, &wire)) return parse_error;
    if (field != 1 && field != 2) {  // not ours: skipped
      if (!r.skip_field(wire)) return parse_error;
      continue;
    }
    uint64_t len;
    if (wire != 2 || !r.length(&len) || !r.skip(std::size_t(len))) return parse_error;
    std::vector<grpc::Slice> one = sub_slices(slices, begin, r.pos());
    grpc::ByteBuffer message(one.data(), one.size());
    const std::string name = field == 1 ? std::string("header") : "chunks[" + std::to_string(chunks++) + "]";
    auto decoded = decode_request(message, int64_t(out.size()) + 1, max_chunk_bytes);
    // A header's own errors name their field already ("header.m").
    if (!decoded.ok())
      return field == 1 ? decoded.status() : decoded.status().with_context("MultiplyUnaryRequest." + name);
    out.push_back(std::move(decoded).value());
  }
  return out;
}

grpc::ByteBuffer concat_messages(grpc::ByteBuffer& first, grpc::ByteBuffer& second) {
  std::vector<grpc::Slice> slices, more;
  (void)first.Dump(&slices);
  (void)second.Dump(&more);
  slices.insert(slices.end(), more.begin(), more.end());
  return grpc::ByteBuffer(slices.data(), slices.size());
}

StatusOr<PutMessage> decode_put_request(grpc::ByteBuffer& buffer, int64_t index) {
  const std::size_t bytes = buffer.Length();
  const Status parse_error =
      InvalidArgument("message " + std::to_string(index) + " of the stream (" + std::to_string(bytes) +
                      " bytes) does not parse as a sgemm.v1.PutMatrixRequest");
  PutMessage out;
  RequestMessage& m = out.chunk;
  if (!buffer.Dump(&m.slices).ok()) return parse_error;
  std::string header_bytes;
  int matrix = 0;
  // PutMatrixRequest has MultiplyRequest's layout (1: header, 2: chunk), so a
  // chunk is read in place the same way; only the header's type differs.
  const Fast fast = decode_in_place(m.slices, &m, &header_bytes, &matrix);
  if (fast == Fast::kMalformed) return parse_error;
  if (fast == Fast::kDone) {
    if (m.kind == RequestMessage::Kind::kHeader) {
      if (!out.header.ParseFromString(header_bytes)) return parse_error;
      out.is_header = true;
      m = RequestMessage{};
    } else if (m.kind != RequestMessage::Kind::kChunk) {
      m.slices.clear();
    }
    return out;
  }
  v1::PutMatrixRequest req;
  {
    grpc::ProtoBufferReader reader(&buffer);
    if (!req.ParseFromZeroCopyStream(&reader)) return parse_error;
  }
  m = RequestMessage{};
  if (req.has_header()) {
    out.is_header = true;
    out.header = req.header();
  } else if (req.has_chunk()) {
    m.kind = RequestMessage::Kind::kChunk;
    m.offset = req.chunk().offset();
    m.data_bytes = req.chunk().data().size();
    m.slices.emplace_back(req.chunk().data());
  }
  return out;
}

}  // namespace sgemm
