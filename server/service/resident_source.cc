#include "server/service/input_source.h"
#include "server/service/sgemm_service.h"

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

Status ResidentSource::bind(const SourceContext& ctx, GemmJob& job) {
  ResidentStore* store = ctx.shared.engine.resident_store();
  if (!store) return FailedPrecondition("this server's backend keeps no resident matrices (header names handles)");
  const std::string owner = ctx.client ? ctx.client->name() : std::string();
  const GemmShape& s = ctx.header.shape;
  struct Named {
    const std::string& handle;
    const char* field;
    const char* name;
    const char* dims;
    int64_t rows, cols;
  };
  const Named named[3] = {{handles_.a, "a_handle", "A", "m x k", s.m, s.k},
                          {handles_.b, "b_handle", "B", "k x n", s.k, s.n},
                          {handles_.c, "c_handle", "C", "m x n", s.m, s.n}};
  for (int i = 0; i < 3; ++i) {
    if (named[i].handle.empty()) continue;
    SGEMM_ASSIGN_OR_RETURN(leases_[i], store->acquire(named[i].handle, owner));
    SGEMM_RETURN_IF_ERROR(
        check_shape(*leases_[i].get(), named[i].field, named[i].name, named[i].dims, named[i].rows, named[i].cols));
  }
  job.a_resident = leases_[0].get();
  job.b_resident = leases_[1].get();
  job.c_resident = leases_[2].get();
  return Status::Ok();
}

void ResidentSource::release() {
  for (auto& lease : leases_) lease.reset();  // a matrix deleted while pinned is freed here
}

}  // namespace sgemm
