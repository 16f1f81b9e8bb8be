// MultiplyCall's header for a batch or group (GemmHeader.batch / group,
// server/engine/batch.h): the engine validates the products, the service's
// limits apply to the concatenated operands, and the request then goes
// through the usual steps (admit_memory, on_chunk, start_compute, send_more)
// with A, B and C each one matrix of every product's operand in turn. Its
// rows are uploaded only: no region, handle or stripe (batch_from_proto
// refuses them), and it never starts computing before the upload is complete.
#include "server/service/multiply_call.h"

namespace sgemm {

Status MultiplyCall::on_batch_header(const GemmRequest& header) {
  header_ = header;
  // The engine first, so a bad product shape is named before any size figure.
  SGEMM_RETURN_IF_ERROR(shared_.engine.validate(request()));
  SGEMM_RETURN_IF_ERROR(check_batch_limits(header_, shared_.options.limits));
  const BatchSpec& spec = *header_.batch;
  assembler_.emplace(std::array<int64_t, 3>{spec.a_elements, spec.b_elements, spec.c_elements}, header_.has_c,
                     shared_.options.limits.max_chunk_bytes);
  SGEMM_ASSIGN_OR_RETURN(sources_, make_input_sources({}, {}, {}, &*assembler_));
  const SourceContext ctx{shared_, client_, ctx_->peer(), header_};
  for (auto& row : sources_) SGEMM_RETURN_IF_ERROR(row->bind(ctx, job_));
  // Host memory: the concatenated A and B as uploaded, and C (received or computed).
  footprint_bytes_ = (spec.a_elements + spec.b_elements + spec.c_elements) * int64_t(sizeof(float));
  if (footprint_bytes_ > shared_.budget.capacity())
    return ResourceExhausted(
        "the " + std::to_string(spec.count()) + " products need " + std::to_string(footprint_bytes_) +
        " bytes of host memory for their A, B and C, more than the server's whole budget of " +
        std::to_string(shared_.budget.capacity()) + " bytes (--host-memory-bytes); send fewer products per request");
  if (client_) {
    SGEMM_ASSIGN_OR_RETURN(client_lease_, client_->admit(footprint_bytes_));
  }
  if (!move_to(Phase::kReceiving)) return Status::Ok();
  return Status::Ok();  // chunks follow: every product has an A and a B
}

}  // namespace sgemm
