// MultiplyUnaryCall's request side (multiply_unary_call.h): the message read
// in place, the header checked as the stream's, the request's input rows bound
// (uploaded chunks, resident matrices, shared-memory regions), the footprint
// reserved or waited for; then the operands assembled, or the caller's memory
// prepared, for submit().
#include <algorithm>
#include <string>
#include <utility>

#include "server/service/batch_request.h"
#include "server/service/codec.h"
#include "server/service/multiply_unary_call.h"
#include "server/service/request_checks.h"

namespace sgemm {

namespace {

// A header field the unary call refuses, and why: what only the stream carries.
Status stream_only(const std::string& field, const std::string& what) {
  return InvalidArgument(field + ": " + what +
                         " is not carried by MultiplyUnary, which takes one product sent whole; "
                         "use the Multiply stream");
}

}  // namespace

Status MultiplyUnaryCall::receive(const grpc::ByteBuffer& request) {
  const int64_t max_chunk = shared_.options.limits.max_chunk_bytes;
  // The unary limit, checked at the header, bounds the message: the chunk
  // limit applies through the assembler, after it.
  SGEMM_ASSIGN_OR_RETURN(std::vector<RequestMessage> messages,
                         decode_unary_request(request, std::max<int64_t>(max_chunk, int64_t(request.Length()))));
  if (messages.empty() || messages.front().kind != RequestMessage::Kind::kHeader)
    return InvalidArgument("MultiplyUnaryRequest.header is missing: the header comes first, then the chunks");
  RequestMessage& h = messages.front();
  // What only the stream carries: stripes, batches, device buffers and a kept result.
  if (h.stripes > 1) return stream_only("header.stripes", "a request over several connections");
  if (h.header.batch) return stream_only("header.batch / header.group", "a batch or group of products");
  if (h.device.any()) return stream_only("header.a_device ...", "an operand in device memory");
  if (h.resident.keep) return stream_only("header.keep_result", "a result kept resident");
  header_ = h.header;
  trace_ = h.trace;
  // Operands named by handle (resident_source.cc) are not sent, and a C named
  // by handle is an input C; operands in shared-memory regions
  // (region_source.cc) are not sent either, and a C written into an output
  // region does not come back.
  const ResidentOperands& named = h.resident;
  if (!named.c.empty()) header_.has_c = true;
  const bool regions = h.regions.any();
  SGEMM_RETURN_IF_ERROR(check_product_header(shared_, header_, /*c_in_caller_memory=*/h.regions.out.has_value()));
  const GemmShape& s = header_.shape;
  const int64_t in_bytes = regions ? 0
                                   : ((named.a.empty() ? s.m * s.k : 0) + (named.b.empty() ? s.k * s.n : 0) +
                                      (header_.has_c && named.c.empty() ? s.m * s.n : 0)) *
                                         int64_t(sizeof(float));
  const int64_t out_bytes = h.regions.out.has_value() ? 0 : s.m * s.n * int64_t(sizeof(float));
  if (in_bytes > kMaxUnaryBytes || out_bytes > kMaxUnaryBytes)
    return InvalidArgument("header: a " + std::to_string(s.m) + " x " + std::to_string(s.n) + " x " +
                           std::to_string(s.k) + " product sends " + std::to_string(in_bytes) +
                           " bytes of matrices and receives " + std::to_string(out_bytes) +
                           ", over MultiplyUnary's limit of " + std::to_string(kMaxUnaryBytes) +
                           " bytes each way (Limits.max_unary_bytes); use the Multiply stream");
  if (!move_to(Phase::kReceiving)) return Status::Ok();
  if (!regions) assembler_.emplace(s, header_.has_c, nullptr, nullptr, nullptr, max_chunk, header_.op_a, header_.op_b);
  // The stream's rows and their checks (an offset such as header.b_at without
  // its handle; regions and handles together).
  SGEMM_ASSIGN_OR_RETURN(sources_, make_input_sources(h.regions, h.resident, {}, assembler_ ? &*assembler_ : nullptr));
  if (regions && messages.size() > 1)
    return InvalidArgument(
        "MultiplyUnaryRequest.chunks: the header names shared-memory regions for A and B (and C), "
        "so no chunk may follow");
  const SourceContext source_ctx{shared_, client_, reply_->peer(), header_};
  for (auto& row : sources_) {
    SGEMM_RETURN_IF_ERROR(row->bind(source_ctx, job_));
    if (auto* held = dynamic_cast<CallerMemorySource*>(row.get())) caller_memory_ = held;
  }
  if (caller_memory_) {
    // Only a C sent back needs the budget; a request holding the caller's
    // memory is refused rather than queued for it, as on the stream.
    footprint_bytes_ = caller_memory_->writes_c() ? 0 : s.m * s.n * int64_t(sizeof(float));
  } else {
    SGEMM_ASSIGN_OR_RETURN(footprint_bytes_, request_footprint(shared_, s, sources_));
  }
  if (client_) {
    SGEMM_ASSIGN_OR_RETURN(client_lease_, client_->admit(footprint_bytes_));
  }
  for (std::size_t i = 1; i < messages.size(); ++i)
    if (messages[i].kind != RequestMessage::Kind::kChunk)
      return InvalidArgument("MultiplyUnaryRequest carries one header; field " + std::to_string(i + 1) +
                             " is a second header");
  if (messages.size() > 1) {  // a bad chunk is refused before it costs memory
    const RequestMessage& first = messages[1];
    SGEMM_RETURN_IF_ERROR(assembler_->check_chunk(first.matrix, first.offset, first.data_bytes));
  }
  pending_ = std::move(messages);
  if (auto r = shared_.budget.try_reserve(footprint_bytes_)) {
    reservation_ = std::move(*r);
    return Status::Ok();
  }
  if (caller_memory_) return c_budget_full(shared_, footprint_bytes_);
  // No room now: the request waits for it as a stream's first chunk does,
  // holding its message (and nothing of the budget), until the memory is
  // granted or --idle-timeout passes (check_idle).
  SGEMM_ASSIGN_OR_RETURN(memory_ticket_,
                         queue_for_memory(shared_, footprint_bytes_, refs_,
                                          [this](MemoryBudget::Reservation r) { on_memory_granted(std::move(r)); }));
  memory_since_ = Clock::now();
  move_to(Phase::kWaitMemory);
  return Status::Ok();
}

Status MultiplyUnaryCall::assemble_and_submit(bool on_handler_thread) {
  std::vector<RequestMessage> messages = std::move(pending_);
  pending_.clear();
  if (caller_memory_) return submit_from_caller_memory(on_handler_thread);
  for (std::size_t i = 1; i < messages.size(); ++i) {
    RequestMessage& msg = messages[i];
    const int idx = static_cast<int>(msg.matrix);
    if (!buffers_[idx]) {
      // The check before allocating: a chunk that would be refused costs nothing.
      SGEMM_RETURN_IF_ERROR(assembler_->check_chunk(msg.matrix, msg.offset, msg.data_bytes));
      const int64_t elements = request_matrix_elements(header_, msg.matrix);
      auto got = shared_.engine.host_allocator().allocate(std::size_t(elements) * sizeof(float));
      if (!got.ok()) return got.status().with_context("allocating " + std::string(matrix_name(msg.matrix)));
      buffers_[idx] = std::make_shared<HostBuffer>(std::move(got).value());
      assembler_->set_destination(msg.matrix, buffers_[idx]->floats());
    }
    SGEMM_RETURN_IF_ERROR(
        assembler_->add_chunk(msg.matrix, msg.offset, msg.data_bytes, [&](void* dst) { msg.copy_data(dst); }));
    bytes_in_ += int64_t(msg.data_bytes);
  }
  if (!assembler_->complete()) return assembler_->finish();  // names the matrix that is short
  t_received_ = Clock::now();
  const int c_idx = static_cast<int>(MatrixId::kC);
  if (!buffers_[c_idx]) {
    auto got = shared_.engine.host_allocator().allocate(std::size_t(header_.shape.m * header_.shape.n) * sizeof(float));
    if (!got.ok()) return got.status().with_context("allocating C");
    buffers_[c_idx] = std::make_shared<HostBuffer>(std::move(got).value());
  }
  // A and B not uploaded are resident (job_.a_resident, job_.b_resident).
  if (buffers_[0]) job_.a = buffers_[0]->floats();
  if (buffers_[1]) job_.b = buffers_[1]->floats();
  job_.c = buffers_[c_idx]->floats();
  job_.request = header_;
  job_.cancel = &cancel_;
  job_.origin = t_start_;
  return submit(on_handler_thread);
}

// A, B (and C) in the caller's regions: nothing was sent. C goes into the
// output region, or into a buffer the answer carries.
Status MultiplyUnaryCall::submit_from_caller_memory(bool on_handler_thread) {
  t_received_ = Clock::now();
  float* host_c = nullptr;
  if (!caller_memory_->writes_c()) {
    const int c_idx = static_cast<int>(MatrixId::kC);
    auto got = shared_.engine.host_allocator().allocate(std::size_t(footprint_bytes_));
    if (!got.ok()) return got.status().with_context("allocating C");
    buffers_[c_idx] = std::make_shared<HostBuffer>(std::move(got).value());
    host_c = buffers_[c_idx]->floats();
  }
  job_.request = header_;
  caller_memory_->prepare_c(job_, host_c);
  job_.cancel = &cancel_;
  job_.origin = t_start_;
  return submit(on_handler_thread);
}

}  // namespace sgemm
