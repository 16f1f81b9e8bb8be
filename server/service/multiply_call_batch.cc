// MultiplyCall's header for a batch or group (GemmHeader.batch / group,
// server/engine/batch.h): the engine validates the products, the service's
// limits apply to the concatenated operands, and the request's input rows
// (input_source.h) are made and bound as for one product: regions holding
// every product's A, B (and C) concatenated, C written into an out region or
// sent back; or an upload of each operand in turn, with A or B of a strided
// batch possibly one resident matrix every product reads. No device buffer,
// C handle or stripe (batch_from_proto refuses them); an uploaded batch never
// starts computing before its upload is complete.
#include "server/service/multiply_call.h"

namespace sgemm {

Status MultiplyCall::on_batch_header(const GemmRequest& header, const RegionOperands& regions,
                                     const ResidentOperands& resident) {
  header_ = header;
  // The engine first, so a bad product shape (or an operand it cannot share) is named before any size figure.
  SGEMM_RETURN_IF_ERROR(shared_.engine.validate(request()));
  SGEMM_RETURN_IF_ERROR(check_batch_limits(header_, shared_.options.limits, bool(regions.out)));
  const BatchSpec& spec = *header_.batch;
  if (!regions.any())
    assembler_.emplace(std::array<int64_t, 3>{spec.a_elements, spec.b_elements, spec.c_elements}, header_.has_c,
                       shared_.options.limits.max_chunk_bytes);
  SGEMM_ASSIGN_OR_RETURN(sources_, make_input_sources(regions, resident, {}, assembler_ ? &*assembler_ : nullptr));
  const SourceContext ctx{shared_, client_, ctx_->peer(), header_};
  for (auto& row : sources_) {
    SGEMM_RETURN_IF_ERROR(row->bind(ctx, job_));
    if (auto* held = dynamic_cast<CallerMemorySource*>(row.get())) caller_memory_ = held;
  }
  if (caller_memory_) return start_from_caller_memory();
  // Host memory: the concatenated A and B as uploaded (not a resident one), and C (received or computed).
  footprint_bytes_ = spec.c_elements * int64_t(sizeof(float));
  if (!job_.a_resident) footprint_bytes_ += spec.a_elements * int64_t(sizeof(float));
  if (!job_.b_resident) footprint_bytes_ += spec.b_elements * int64_t(sizeof(float));
  if (footprint_bytes_ > shared_.budget.capacity())
    return ResourceExhausted(
        "the " + std::to_string(spec.count()) + " products need " + std::to_string(footprint_bytes_) +
        " bytes of host memory for their A, B and C, more than the server's whole budget of " +
        std::to_string(shared_.budget.capacity()) + " bytes (--host-memory-bytes); send fewer products per request");
  if (client_) {
    SGEMM_ASSIGN_OR_RETURN(client_lease_, client_->admit(footprint_bytes_));
  }
  if (!move_to(Phase::kReceiving)) return Status::Ok();
  for (const auto& row : sources_)
    if (!row->ready()) return Status::Ok();  // chunks follow
  return start_without_upload();             // A and B resident, no C: nothing to receive
}

}  // namespace sgemm
