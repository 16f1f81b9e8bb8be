#include "server/service/codec.h"

#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/proto_buffer_writer.h>
#include <grpcpp/support/slice.h>

#include <cstring>

namespace sgemm {

namespace v1 = ::sgemm::v1;

StatusOr<RequestHeader> header_from_proto(const v1::GemmHeader& h) {
  RequestHeader out;
  out.shape = {h.m(), h.n(), h.k()};
  out.alpha = h.has_alpha() ? h.alpha() : 1.0f;
  out.beta = h.has_beta() ? h.beta() : 0.0f;
  out.has_c = h.has_c();
  switch (h.kernel()) {
    case v1::KERNEL_UNSPECIFIED: out.options.kernel = std::nullopt; break;
    case v1::KERNEL_PINGPONG: out.options.kernel = KernelKind::kPingpong; break;
    case v1::KERNEL_CUBLAS: out.options.kernel = KernelKind::kCublas; break;
    default: return InvalidArgument("header.kernel has unknown value " + std::to_string(int(h.kernel())));
  }
  switch (h.split()) {
    case v1::SPLIT_UNSPECIFIED: out.options.split = SplitMode::kAuto; break;
    case v1::SPLIT_SINGLE: out.options.split = SplitMode::kSingle; break;
    case v1::SPLIT_ROWS: out.options.split = SplitMode::kRows; break;
    case v1::SPLIT_K: out.options.split = SplitMode::kK; break;
    default: return InvalidArgument("header.split has unknown value " + std::to_string(int(h.split())));
  }
  return out;
}

StatusOr<MatrixId> matrix_from_proto(v1::Matrix m) {
  switch (m) {
    case v1::MATRIX_A: return MatrixId::kA;
    case v1::MATRIX_B: return MatrixId::kB;
    case v1::MATRIX_C: return MatrixId::kC;
    case v1::MATRIX_UNSPECIFIED: return InvalidArgument("chunk.matrix is MATRIX_UNSPECIFIED; name A, B or C");
    default: return InvalidArgument("chunk.matrix has unknown value " + std::to_string(int(m)));
  }
}

v1::Split split_to_proto(SplitMode s) {
  switch (s) {
    case SplitMode::kSingle: return v1::SPLIT_SINGLE;
    case SplitMode::kRows: return v1::SPLIT_ROWS;
    case SplitMode::kK: return v1::SPLIT_K;
    default: return v1::SPLIT_UNSPECIFIED;
  }
}

StatusOr<RequestMessage> decode_request(grpc::ByteBuffer& buffer, int64_t index, int64_t max_chunk_bytes) {
  const std::size_t bytes = buffer.Length();
  // A chunk's payload plus its few bytes of framing.
  const std::size_t max_message = std::size_t(max_chunk_bytes) + 64;
  if (bytes > max_message)
    return InvalidArgument("message " + std::to_string(index) + " of the stream has " + std::to_string(bytes) +
                           " bytes; this server takes at most " + std::to_string(max_chunk_bytes) +
                           " bytes of matrix data per message: send each matrix as several MatrixChunk messages "
                           "of at most that size (see Limits.max_chunk_bytes in GetInfo)");
  v1::MultiplyRequest req;
  {
    grpc::ProtoBufferReader reader(&buffer);
    if (!req.ParseFromZeroCopyStream(&reader))
      return InvalidArgument("message " + std::to_string(index) + " of the stream (" + std::to_string(bytes) +
                             " bytes) does not parse as a sgemm.v1.MultiplyRequest");
  }
  RequestMessage out;
  switch (req.kind_case()) {
    case v1::MultiplyRequest::kHeader: {
      auto h = header_from_proto(req.header());
      if (!h.ok()) return h.status();
      out.kind = RequestMessage::Kind::kHeader;
      out.header = *h;
      break;
    }
    case v1::MultiplyRequest::kChunk: {
      auto m = matrix_from_proto(req.chunk().matrix());
      if (!m.ok()) return m.status();
      out.kind = RequestMessage::Kind::kChunk;
      out.matrix = *m;
      out.offset = req.chunk().offset();
      out.data = std::move(*req.mutable_chunk()->mutable_data());
      break;
    }
    default:
      out.kind = RequestMessage::Kind::kEmpty;
  }
  return out;
}

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

grpc::ByteBuffer serialize(const v1::MultiplyResponse& msg) {
  grpc::ByteBuffer bb;
  bool own = false;
  [[maybe_unused]] grpc::Status st = grpc::SerializationTraits<v1::MultiplyResponse>::Serialize(msg, &bb, &own);
  return bb;
}

}  // namespace

grpc::ByteBuffer encode_c_chunk(const float* c, int64_t offset, int64_t count) {
  // MultiplyResponse { chunk (1) = MatrixChunk { matrix (1) = MATRIX_C, offset (2), data (3) } }
  const uint64_t data_bytes = uint64_t(count) * sizeof(float);
  const uint64_t chunk_len = 2 + (offset ? 1 + varint_size(uint64_t(offset)) : 0) + 1 + varint_size(data_bytes) +
                             data_bytes;
  std::string head;
  head.push_back(char((1 << 3) | 2));  // field 1, length-delimited
  put_varint(head, chunk_len);
  head.push_back(char((1 << 3) | 0));  // matrix
  put_varint(head, uint64_t(v1::MATRIX_C));
  if (offset) {
    head.push_back(char((2 << 3) | 0));  // offset
    put_varint(head, uint64_t(offset));
  }
  head.push_back(char((3 << 3) | 2));  // data
  put_varint(head, data_bytes);
  grpc::Slice slices[2] = {grpc::Slice(head), grpc::Slice(c + offset, std::size_t(data_bytes))};
  return grpc::ByteBuffer(slices, 2);
}

grpc::ByteBuffer encode_summary(const GemmReport& report, const SummaryFigures& f) {
  v1::MultiplyResponse last;
  v1::MultiplySummary* sum = last.mutable_summary();
  sum->set_request_id(f.request_id);
  sum->set_backend(report.backend);
  sum->set_kernel(std::string(kernel_kind_name(report.kernel)));
  sum->set_split(split_to_proto(report.split));
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
  }
  sum->set_queue_ms(f.queue_ms);
  sum->set_receive_ms(f.receive_ms);
  sum->set_compute_ms(f.compute_ms);
  sum->set_total_ms(f.total_ms);
  sum->set_bytes_received(f.bytes_received);
  sum->set_bytes_sent(f.bytes_sent);
  return serialize(last);
}

void info_to_proto(const EngineInfo& info, const InfoFigures& f, v1::GetInfoResponse* out) {
  out->set_version(f.version);
  out->set_backend(info.backend);
  for (const auto& b : f.backends) out->add_backends(b);
  for (KernelKind k : info.kernels) out->add_kernels(std::string(kernel_kind_name(k)));
  for (const DeviceInfo& d : info.devices) {
    v1::DeviceInfo* p = out->add_devices();
    p->set_index(d.index);
    p->set_name(d.name);
    p->set_memory_bytes(d.memory_bytes);
    p->set_sm_count(d.sm_count);
    p->set_compute_major(d.compute_major);
    p->set_compute_minor(d.compute_minor);
  }
  v1::Limits* lim = out->mutable_limits();
  lim->set_max_matrix_elements(f.max_matrix_elements);
  lim->set_max_in_flight(f.max_in_flight);
  lim->set_max_queued(f.max_queued);
  lim->set_max_chunk_bytes(f.max_chunk_bytes);
  lim->set_host_memory_bytes(f.host_memory_bytes);
  v1::Load* load = out->mutable_load();
  load->set_in_flight(f.in_flight);
  load->set_queued(f.queued);
  load->set_requests_total(f.requests_total);
  load->set_requests_failed(f.requests_failed);
  load->set_host_bytes_in_use(f.host_bytes_in_use);
  load->set_open_streams(f.open_streams);
}

}  // namespace sgemm
