// MultiplyCall's header and the request's input rows (input_source.h): the
// header is validated, its rows are made and bound (regions, device buffers,
// resident matrices, an upload for the rest), and the footprint is what the
// rows need plus C when the server holds it. A request whose rows are all
// ready at the header (every operand in regions, device buffers or kept
// resident) computes at once;
// otherwise it receives. With keep_result C becomes a resident matrix whose
// handle the summary carries (docs/resident.md).
#include "server/service/multiply_call.h"
#include "server/service/put_matrix_call.h"
#include "server/service/request_checks.h"

namespace sgemm {

Status MultiplyCall::on_header(const GemmRequest& header, const RegionOperands& regions,
                               const ResidentOperands& resident, const DeviceRefs& device) {
  if (header.batch) return on_batch_header(header, regions, resident);
  header_ = header;
  if (!resident.c.empty()) header_.has_c = true;  // a C named by handle is an input C
  // One validation, before any data (request_checks.h, as MultiplyUnary's).
  SGEMM_RETURN_IF_ERROR(check_product_header(shared_, request(), regions.out || device.out));
  const GemmShape& s = header_.shape;
  if (!regions.any() && !device.any())
    assembler_.emplace(s, header_.has_c, nullptr, nullptr, nullptr, shared_.options.limits.max_chunk_bytes,
                       header_.op_a, header_.op_b);
  SGEMM_ASSIGN_OR_RETURN(sources_, make_input_sources(regions, resident, device, assembler_ ? &*assembler_ : nullptr));
  ResidentStore* store = shared_.engine.resident_store();
  if (resident.keep && !store)
    return FailedPrecondition("this server's backend keeps no resident matrices (header names handles)");
  const SourceContext ctx{shared_, client_, ctx_->peer(), header_};
  for (auto& row : sources_) {
    SGEMM_RETURN_IF_ERROR(row->bind(ctx, job_));
    if (auto* held = dynamic_cast<CallerMemorySource*>(row.get())) caller_memory_ = held;
  }
  if (caller_memory_) return start_from_caller_memory();
  keep_ = {resident.keep, resident.keep_evictable, !resident.keep || resident.send_c};
  // The client's quota now; the room itself with the request's memory
  // (reserve_keep), so a header alone holds no resident bytes and evicts nothing.
  if (keep_.keep) SGEMM_RETURN_IF_ERROR(check_resident_quota(client_, *store, s.m * s.n * int64_t(sizeof(float))));
  // Host memory for what the rows need (what is uploaded), and for C.
  SGEMM_ASSIGN_OR_RETURN(footprint_bytes_, request_footprint(shared_, s, sources_));
  if (client_) {
    SGEMM_ASSIGN_OR_RETURN(client_lease_, client_->admit(footprint_bytes_));
  }
  if (!move_to(Phase::kReceiving)) return Status::Ok();
  for (const auto& row : sources_)
    if (!row->ready()) return Status::Ok();  // chunks follow
  return start_without_upload();
}

Status MultiplyCall::start_from_caller_memory() {
  float* host_c = nullptr;
  if (!caller_memory_->writes_c()) {
    // C comes back as chunks: a dense buffer from the host-memory budget (no
    // waiting for it here: the request holds the caller's memory, so it is
    // refused instead).
    footprint_bytes_ = request_matrix_elements(header_, MatrixId::kC) * int64_t(sizeof(float));
    auto r = shared_.budget.try_reserve(footprint_bytes_);
    if (!r) return c_budget_full(shared_, footprint_bytes_);
    reservation_ = std::move(*r);
    const int c_idx = static_cast<int>(MatrixId::kC);
    auto got = shared_.engine.host_allocator().allocate(std::size_t(footprint_bytes_));
    if (!got.ok()) return got.status().with_context("allocating C");
    buffers_[c_idx] = std::make_shared<HostBuffer>(std::move(got).value());
    host_c = buffers_[c_idx]->floats();
  }
  job_.request = request();
  caller_memory_->prepare_c(job_, host_c);
  // Nothing to receive: the upload is complete now, and computing never starts early.
  t_received_ = Clock::now();
  return start_compute(/*early=*/false);
}

Status MultiplyCall::reserve_keep() {
  if (!keep_.keep || keep_bytes_.bytes() > 0) return Status::Ok();
  // Room for the kept C before the upload goes on: a request whose result
  // could not be kept fails here, not after computing.
  const GemmShape& s = header_.shape;
  const int64_t bytes = s.m * s.n * int64_t(sizeof(float));
  if (const ResidentStore* store = shared_.engine.resident_store()) {
    SGEMM_ASSIGN_OR_RETURN(keep_charge_, charge_resident_quota(client_, *store, bytes));
  }
  SGEMM_ASSIGN_OR_RETURN(keep_bytes_, shared_.engine.reserve_resident(bytes, "keep_result of a " + std::to_string(s.m) +
                                                                                 " x " + std::to_string(s.n) + " C (" +
                                                                                 std::to_string(bytes) + " bytes)"));
  return Status::Ok();
}

Status MultiplyCall::start_without_upload() {
  SGEMM_RETURN_IF_ERROR(reserve_keep());
  // No upload: C's memory now, or a refusal (nothing to wait with).
  auto r = shared_.budget.try_reserve(footprint_bytes_);
  if (!r)
    return ResourceExhausted("the host memory budget has no room for C's " + std::to_string(footprint_bytes_) +
                             " bytes (--host-memory-bytes " + std::to_string(shared_.budget.capacity()) + ", " +
                             std::to_string(shared_.budget.in_use()) + " in use); retry later");
  reservation_ = std::move(*r);
  t_received_ = Clock::now();
  return start_compute(/*early=*/false);
}

Status MultiplyCall::keep_result() {
  std::shared_ptr<HostBuffer> c;
  {
    std::lock_guard lock(mu_);
    c = buffers_[static_cast<int>(MatrixId::kC)];
  }
  ResidentStore* store = shared_.engine.resident_store();
  if (!c || !store) return Internal("keep_result without C's buffer or a resident store");
  const GemmShape& s = header_.shape;
  SGEMM_ASSIGN_OR_RETURN(auto data, shared_.engine.make_resident(c, s.m, s.n, std::move(keep_bytes_)));
  auto m = store->add(client_ ? client_->name() : std::string(), "result of request " + id_, s.m, s.n, keep_.evictable,
                      std::move(data));
  std::lock_guard lock(mu_);
  keep_charge_.reset();  // the store counts it now
  result_handle_ = m->handle;
  return Status::Ok();
}

}  // namespace sgemm
