// Protobuf <-> plain structs for what the service sends and the header's
// fields: the header and operand conversions, C's chunks, the stripe grant,
// the summary and GetInfo (codec.h). The request stream's decoding is in
// codec.cc.
#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/proto_buffer_writer.h>
#include <grpcpp/support/slice.h>

#include <algorithm>
#include <cstring>
#include <tuple>

#include "common/chunk_wire.h"
#include "server/service/batch_request.h"
#include "server/service/codec.h"

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
  for (auto [field, value, out_op] :
       {std::tuple{"op_a", h.op_a(), &out.op_a}, std::tuple{"op_b", h.op_b(), &out.op_b}}) {
    switch (value) {
      case v1::OP_N:
        *out_op = Op::kN;
        break;
      case v1::OP_T:
        *out_op = Op::kT;
        break;
      default:
        return InvalidArgument(std::string("header.") + field + " has unknown value " + std::to_string(int(value)) +
                               " (OP_N = 0, OP_T = 1)");
    }
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
  SGEMM_RETURN_IF_ERROR(batch_from_proto(h, &out));  // batch_request.h: a batch or group, if any
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

ResidentOperands resident_operands_from_proto(const v1::GemmHeader& h) {
  ResidentOperands r;
  r.a = h.a_handle();
  r.b = h.b_handle();
  r.c = h.c_handle();
  r.a_at = h.has_a_at() ? std::optional<MatrixOffset>(MatrixOffset{h.a_at().row(), h.a_at().col()}) : std::nullopt;
  r.b_at = h.has_b_at() ? std::optional<MatrixOffset>(MatrixOffset{h.b_at().row(), h.b_at().col()}) : std::nullopt;
  r.c_at = h.has_c_at() ? std::optional<MatrixOffset>(MatrixOffset{h.c_at().row(), h.c_at().col()}) : std::nullopt;
  r.keep = h.keep_result();
  r.keep_evictable = h.keep_evictable();
  r.send_c = h.send_c();
  return r;
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
  for (const KernelRowUse& k : report.kernel_rows) {
    v1::MultiplySummary::KernelRow* row = sum->add_kernel_rows();
    row->set_name(k.name);
    row->set_launches(k.launches);
  }
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
  products_to_proto(report, f.batch.get(), sum);
  if (!f.result_handle.empty()) sum->set_result_handle(f.result_handle);
  if (!f.trace_json.empty()) sum->set_trace_json(f.trace_json);
  sum->set_queue_ms(f.queue_ms);
  sum->set_receive_ms(f.receive_ms);
  sum->set_compute_ms(f.compute_ms);
  sum->set_total_ms(f.total_ms);
  sum->set_bytes_received(f.bytes_received);
  sum->set_bytes_sent(f.bytes_sent);
  if (f.stripes > 1) sum->set_stripes(f.stripes);
  sum->set_launch_products(f.launch_products);
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
  lim->set_max_unary_bytes(kMaxUnaryBytes);
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
