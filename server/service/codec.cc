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

StatusOr<GemmRequest> header_from_proto(const v1::GemmHeader& h) {
  GemmRequest out;
  out.shape = {h.m(), h.n(), h.k()};
  out.alpha = h.has_alpha() ? h.alpha() : 1.0f;
  out.beta = h.has_beta() ? h.beta() : 0.0f;
  out.has_c = h.has_c();
  switch (h.kernel()) {
    case v1::KERNEL_UNSPECIFIED:
      out.options.kernel = std::nullopt;
      break;
    case v1::KERNEL_PINGPONG:
      out.options.kernel = KernelKind::kPingpong;
      break;
    case v1::KERNEL_CUBLAS:
      out.options.kernel = KernelKind::kCublas;
      break;
    default:
      return InvalidArgument("header.kernel has unknown value " + std::to_string(int(h.kernel())));
  }
  switch (h.precision()) {
    case v1::PRECISION_UNSPECIFIED:
    case v1::PRECISION_FP32:
      out.options.precision = Precision::kFp32;
      break;
    case v1::PRECISION_TF32:
      out.options.precision = Precision::kTf32;
      break;
    case v1::PRECISION_FP32X3:
      out.options.precision = Precision::kFp32x3;
      break;
    case v1::PRECISION_FP32_FFMA:
      out.options.precision = Precision::kFp32Ffma;
      break;
    default:
      return InvalidArgument("header.precision has unknown value " + std::to_string(int(h.precision())));
  }
  switch (h.split()) {
    case v1::SPLIT_UNSPECIFIED:
      out.options.split = SplitMode::kAuto;
      break;
    case v1::SPLIT_SINGLE:
      out.options.split = SplitMode::kSingle;
      break;
    case v1::SPLIT_ROWS:
      out.options.split = SplitMode::kRows;
      break;
    case v1::SPLIT_K:
      out.options.split = SplitMode::kK;
      break;
    default:
      return InvalidArgument("header.split has unknown value " + std::to_string(int(h.split())));
  }
  return out;
}

StatusOr<MatrixId> matrix_from_proto(v1::Matrix m) {
  switch (m) {
    case v1::MATRIX_A:
      return MatrixId::kA;
    case v1::MATRIX_B:
      return MatrixId::kB;
    case v1::MATRIX_C:
      return MatrixId::kC;
    case v1::MATRIX_UNSPECIFIED:
      return InvalidArgument("chunk.matrix is MATRIX_UNSPECIFIED; name A, B or C");
    default:
      return InvalidArgument("chunk.matrix has unknown value " + std::to_string(int(m)));
  }
}

v1::Split split_to_proto(SplitMode s) {
  switch (s) {
    case SplitMode::kSingle:
      return v1::SPLIT_SINGLE;
    case SplitMode::kRows:
      return v1::SPLIT_ROWS;
    case SplitMode::kK:
      return v1::SPLIT_K;
    default:
      return v1::SPLIT_UNSPECIFIED;
  }
}

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

grpc::ByteBuffer serialize(const v1::MultiplyResponse& msg) {
  grpc::ByteBuffer bb;
  bool own = false;
  [[maybe_unused]] grpc::Status st = grpc::SerializationTraits<v1::MultiplyResponse>::Serialize(msg, &bb, &own);
  return bb;
}

}  // namespace

grpc::ByteBuffer encode_c_chunk(const float* c, int64_t offset, int64_t count, std::shared_ptr<const void> keep) {
  // MultiplyResponse { chunk (1) = MatrixChunk { matrix (1) = MATRIX_C, offset (2), data (3) } }
  const uint64_t data_bytes = uint64_t(count) * sizeof(float);
  const std::string head = matrix_chunk_head(1, uint64_t(v1::MATRIX_C), offset, data_bytes);
  if (!keep) {
    grpc::Slice slices[2] = {grpc::Slice(head), grpc::Slice(c + offset, std::size_t(data_bytes))};
    return grpc::ByteBuffer(slices, 2);
  }
  // The slice owns a reference to C's buffer; gRPC drops it once the bytes are written.
  auto* ref = new std::shared_ptr<const void>(std::move(keep));
  grpc::Slice slices[2] = {grpc::Slice(head),
                           grpc::Slice(
                               const_cast<float*>(c + offset), std::size_t(data_bytes),
                               [](void* p) { delete static_cast<std::shared_ptr<const void>*>(p); }, ref)};
  return grpc::ByteBuffer(slices, 2);
}

grpc::ByteBuffer encode_stripe_grant(const std::string& token, int stripes) {
  v1::MultiplyResponse msg;
  msg.mutable_stripe_grant()->set_token(token);
  msg.mutable_stripe_grant()->set_stripes(stripes);
  return serialize(msg);
}

v1::Precision precision_to_proto(Precision p) {
  switch (p) {
    case Precision::kFp32:
      return v1::PRECISION_FP32;
    case Precision::kTf32:
      return v1::PRECISION_TF32;
    case Precision::kFp32x3:
      return v1::PRECISION_FP32X3;
    case Precision::kFp32Ffma:
      return v1::PRECISION_FP32_FFMA;
  }
  return v1::PRECISION_UNSPECIFIED;
}

grpc::ByteBuffer encode_summary(const GemmReport& report, const SummaryFigures& f) {
  v1::MultiplyResponse last;
  v1::MultiplySummary* sum = last.mutable_summary();
  sum->set_request_id(f.request_id);
  sum->set_backend(report.backend);
  sum->set_kernel(report_kernel_name(report));
  sum->set_split(split_to_proto(report.split));
  sum->set_precision(precision_to_proto(report.precision));
  sum->set_plan_reason(report.plan_reason);
  for (const DeviceTiming& d : report.devices) {
    v1::DeviceTiming* t = sum->add_devices();
    t->set_index(d.device);
    t->set_name(d.name);
    t->set_row_begin(d.shard.row_begin);
    t->set_row_end(d.shard.row_end);
    t->set_k_begin(d.shard.k_begin);
    t->set_k_end(d.shard.k_end);
    t->set_copy_in_ms(d.copy_in_ms);
    t->set_kernel_ms(d.kernel_ms);
    t->set_reduce_ms(d.reduce_ms);
    t->set_copy_out_ms(d.copy_out_ms);
    t->set_copy_in_wait_ms(d.copy_in_wait_ms);
    t->set_kernel_wait_ms(d.kernel_wait_ms);
    t->set_reduce_wait_ms(d.reduce_wait_ms);
    t->set_copy_out_wait_ms(d.copy_out_wait_ms);
    t->set_order_wait_ms(d.order_wait_ms);
    t->set_host(d.host);
  }
  sum->set_send_ms(f.send_ms);
  if (!f.result_handle.empty()) sum->set_result_handle(f.result_handle);
  if (!f.trace_json.empty()) sum->set_trace_json(f.trace_json);
  sum->set_queue_ms(f.queue_ms);
  sum->set_receive_ms(f.receive_ms);
  sum->set_compute_ms(f.compute_ms);
  sum->set_total_ms(f.total_ms);
  sum->set_bytes_received(f.bytes_received);
  sum->set_bytes_sent(f.bytes_sent);
  if (f.stripes > 1) sum->set_stripes(f.stripes);
  return serialize(last);
}

void info_to_proto(const EngineInfo& info, const InfoFigures& f, v1::GetInfoResponse* out) {
  out->set_version(f.version);
  out->set_backend(info.backend);
  for (const auto& b : f.backends) out->add_backends(b);
  for (KernelKind k : info.kernels) out->add_kernels(std::string(kernel_kind_name(k)));
  for (Precision p : info.precisions) out->add_precisions(precision_to_proto(p));
  for (const PrecisionContractInfo& c : info.contracts) {
    v1::PrecisionContract* pc = out->add_contracts();
    pc->set_precision(precision_to_proto(c.precision));
    pc->set_promise(std::string(precision_contract(c.precision)));
    for (KernelKind k : c.kernels) pc->add_kernels(std::string(kernel_kind_name(k)));
  }
  for (const DeviceInfo& d : info.devices) {
    v1::DeviceInfo* p = out->add_devices();
    p->set_index(d.index);
    p->set_name(d.name);
    p->set_memory_bytes(d.memory_bytes);
    p->set_sm_count(d.sm_count);
    p->set_compute_major(d.compute_major);
    p->set_compute_minor(d.compute_minor);
    const std::size_t i = std::size_t(out->devices_size() - 1);
    if (i < info.unhealthy.size() && !info.unhealthy[i].empty()) {
      p->set_unhealthy(true);
      p->set_health_reason(info.unhealthy[i]);
    }
  }
  v1::Limits* lim = out->mutable_limits();
  lim->set_max_matrix_elements(f.max_matrix_elements);
  lim->set_max_in_flight(f.max_in_flight);
  lim->set_max_queued(f.max_queued);
  lim->set_max_chunk_bytes(f.max_chunk_bytes);
  lim->set_host_memory_bytes(f.host_memory_bytes);
  lim->set_max_stripes(f.max_stripes);
  v1::Load* load = out->mutable_load();
  load->set_in_flight(f.in_flight);
  load->set_queued(f.queued);
  load->set_requests_total(f.requests_total);
  load->set_requests_failed(f.requests_failed);
  load->set_host_bytes_in_use(f.host_bytes_in_use);
  load->set_open_streams(f.open_streams);
  out->set_startup_ms(info.startup_ms);
  out->set_pinned_pool_bytes(info.pinned_pool_bytes);
  out->set_client(f.client);
  lim->set_client_max_in_flight(f.client_max_in_flight);
  lim->set_client_max_bytes_in_flight(f.client_max_bytes_in_flight);
  load->set_client_in_flight(f.client_in_flight);
  load->set_client_bytes_in_flight(f.client_bytes_in_flight);
}

}  // namespace sgemm

namespace sgemm {

ResidentOperands resident_operands_from_proto(const v1::GemmHeader& h) {
  ResidentOperands r;
  r.a = h.a_handle();
  r.b = h.b_handle();
  r.c = h.c_handle();
  r.keep = h.keep_result();
  r.keep_evictable = h.keep_evictable();
  r.send_c = h.send_c();
  return r;
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
