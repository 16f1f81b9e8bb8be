// MultiplyCall's branch for resident operands (docs/resident.md): matrices
// named by handle in the header are pinned in the engine's ResidentStore
// (so they are neither evicted nor freed while the request runs), are not
// uploaded, and the engine reads them where they live; with keep_result C
// becomes a new resident matrix whose handle the summary carries.
#include "server/service/multiply_call.h"
#include "server/service/put_matrix_call.h"

namespace sgemm {

namespace {

Status check_shape(const ResidentMatrix& m, const char* field, const char* name, const char* dims, int64_t rows,
                   int64_t cols) {
  if (m.rows == rows && m.cols == cols) return Status::Ok();
  return InvalidArgument(std::string("header.") + field + " '" + m.handle + "' is " + std::to_string(m.rows) + " x " +
                         std::to_string(m.cols) + "; " + name + " must be " + dims + " = " + std::to_string(rows) +
                         " x " + std::to_string(cols));
}

}  // namespace

Status MultiplyCall::bind_resident(const ResidentOperands& resident) {
  ResidentStore* store = shared_.engine.resident_store();
  if (!store) return FailedPrecondition("this server's backend keeps no resident matrices (header names handles)");
  const std::string owner = client_ ? client_->name() : std::string();
  const GemmShape& s = header_.shape;
  struct Named {
    const std::string& handle;
    const char* field;
    const char* name;
    const char* dims;
    int64_t rows, cols;
  };
  const Named named[3] = {{resident.a, "a_handle", "A", "m x k", s.m, s.k},
                          {resident.b, "b_handle", "B", "k x n", s.k, s.n},
                          {resident.c, "c_handle", "C", "m x n", s.m, s.n}};
  for (int i = 0; i < 3; ++i) {
    if (named[i].handle.empty()) continue;
    SGEMM_ASSIGN_OR_RETURN(resident_[i], store->acquire(named[i].handle, owner));
    SGEMM_RETURN_IF_ERROR(
        check_shape(*resident_[i].get(), named[i].field, named[i].name, named[i].dims, named[i].rows, named[i].cols));
  }
  job_.a_resident = resident_[0].get();
  job_.b_resident = resident_[1].get();
  job_.c_resident = resident_[2].get();
  keep_ = resident.keep;
  keep_evictable_ = resident.keep_evictable;
  send_c_ = !resident.keep || resident.send_c;
  // The client's quota now; the room itself with the request's memory
  // (reserve_keep), so a header alone holds no resident bytes and evicts nothing.
  if (keep_) SGEMM_RETURN_IF_ERROR(check_resident_quota(client_, *store, s.m * s.n * int64_t(sizeof(float))));
  return Status::Ok();
}

Status MultiplyCall::reserve_keep() {
  if (!keep_ || keep_bytes_.bytes() > 0) return Status::Ok();
  // Room for the kept C before the upload goes on: a request whose result
  // could not be kept fails here, not after computing.
  const GemmShape& s = header_.shape;
  const int64_t bytes = s.m * s.n * int64_t(sizeof(float));
  SGEMM_ASSIGN_OR_RETURN(keep_bytes_, shared_.engine.reserve_resident(bytes, "keep_result of a " + std::to_string(s.m) +
                                                                                 " x " + std::to_string(s.n) + " C (" +
                                                                                 std::to_string(bytes) + " bytes)"));
  return Status::Ok();
}

Status MultiplyCall::start_if_nothing_to_send() {
  for (int i = 0; i < 3; ++i)
    if (resident_[i]) assembler_->mark_provided(static_cast<MatrixId>(i));
  if (!assembler_->complete()) return Status::Ok();  // chunks follow for the others
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
  auto m = store->add(client_ ? client_->name() : std::string(), "result of request " + id_, s.m, s.n, keep_evictable_,
                      std::move(data));
  std::lock_guard lock(mu_);
  result_handle_ = m->handle;
  return Status::Ok();
}

}  // namespace sgemm
