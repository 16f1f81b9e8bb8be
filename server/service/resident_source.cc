#include "server/service/input_source.h"
#include "server/service/sgemm_service.h"

namespace sgemm {

namespace {

// The operand is the rows x cols block at `at` of `m` (the whole matrix when
// no offset was given, which must then be exactly that shape).
Status check_block(const ResidentMatrix& m, const char* field, const char* at_field, const std::string& what,
                   const std::optional<MatrixOffset>& at, int64_t rows, int64_t cols) {
  const std::string shape = std::to_string(m.rows) + " x " + std::to_string(m.cols);
  const std::string need = what + " = " + std::to_string(rows) + " x " + std::to_string(cols);
  if (!at) {
    if (m.rows == rows && m.cols == cols) return Status::Ok();
    return InvalidArgument(std::string("header.") + field + " '" + m.handle + "' is " + shape + "; it must be " + need +
                           " (or name a block of it with header." + at_field + ")");
  }
  if (at->row < 0 || at->col < 0)
    return InvalidArgument(std::string("header.") + at_field + " (" + std::to_string(at->row) + ", " +
                           std::to_string(at->col) + ") is negative");
  // Both sides are at most 2^63 - 1 and the subtraction cannot overflow: m's dimensions are >= 1.
  if (at->row > m.rows - rows || at->col > m.cols - cols)
    return InvalidArgument(std::string("header.") + at_field + ": the " + need + " block at (" +
                           std::to_string(at->row) + ", " + std::to_string(at->col) + ") overruns header." + field +
                           " '" + m.handle + "' of " + shape);
  return Status::Ok();
}

}  // namespace

Status ResidentSource::bind(const SourceContext& ctx, GemmJob& job) {
  ResidentStore* store = ctx.shared.engine.resident_store();
  if (!store) return FailedPrecondition("this server's backend keeps no resident matrices (header names handles)");
  const std::string owner = ctx.client ? ctx.client->name() : std::string();
  const GemmRequest& r = ctx.header;
  const MatrixDims a = r.a_dims(), b = r.b_dims();
  const std::string a_what = r.op_a == Op::kN ? "A (stored m x k)" : "A (stored k x m, op_a = t)";
  const std::string b_what = r.op_b == Op::kN ? "B (stored k x n)" : "B (stored n x k, op_b = t)";
  struct Named {
    const std::string& handle;
    const std::optional<MatrixOffset>& at;
    const char* field;
    const char* at_field;
    std::string what;
    int64_t rows, cols;
  };
  const Named named[3] = {{handles_.a, handles_.a_at, "a_handle", "a_at", a_what, a.rows, a.cols},
                          {handles_.b, handles_.b_at, "b_handle", "b_at", b_what, b.rows, b.cols},
                          {handles_.c, handles_.c_at, "c_handle", "c_at", "C (m x n)", r.shape.m, r.shape.n}};
  MatrixOffset* offsets[3] = {&job.a_at, &job.b_at, &job.c_at};
  for (int i = 0; i < 3; ++i) {
    if (named[i].handle.empty()) continue;
    auto lease = store->acquire(named[i].handle, owner);
    if (!lease.ok()) return lease.status().with_context(std::string("header.") + named[i].field);
    leases_[i] = std::move(lease).value();
    SGEMM_RETURN_IF_ERROR(check_block(*leases_[i].get(), named[i].field, named[i].at_field, named[i].what, named[i].at,
                                      named[i].rows, named[i].cols));
    *offsets[i] = named[i].at.value_or(MatrixOffset{});
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
