#include "server/service/input_source.h"
#include "server/service/sgemm_service.h"
#include "server/service/unix_connections.h"

namespace sgemm {

Status RegionSource::bind(const SourceContext& ctx, GemmJob& job) {
  ServiceShared& shared = ctx.shared;
  RegionCaller caller = shared.connections ? shared.connections->find(ctx.peer) : RegionCaller{};
  if (ctx.client) caller.client = ctx.client->name();  // with tokens, regions belong to their client
  if (!shared.regions || !caller.unix_socket)
    return regions_need_unix_socket("a Multiply naming shared-memory regions");
  SGEMM_ASSIGN_OR_RETURN(
      bound_, bind_region_operands(*shared.regions, caller, ctx.header, refs_, shared.engine.max_leading_dimension()));
  // A batch's operands are dense (its engine path takes no ld).
  const bool batch = bool(ctx.header.batch);
  job.a = bound_.a;
  job.lda = batch ? 0 : bound_.lda;
  job.b = bound_.b;
  job.ldb = batch ? 0 : bound_.ldb;
  if (bound_.out) {
    job.c = bound_.out;
    job.ldc = batch ? 0 : bound_.ld_out;
  }
  return Status::Ok();
}

void RegionSource::prepare_c(GemmJob& job, float* host_c) {
  // C's extent: m x n, or a batch's concatenated C as one row.
  const int64_t rows = bound_.c_rows, cols = bound_.c_cols;
  if (bound_.out) {
    // C in place needs nothing; C from elsewhere is first copied where the result goes.
    if (bound_.c_in && !bound_.c_in_place())
      copy_matrix(bound_.out, bound_.ld_out, bound_.c_in, bound_.ldc_in, rows, cols);
    return;
  }
  if (bound_.c_in) copy_matrix(host_c, cols, bound_.c_in, bound_.ldc_in, rows, cols);
  job.c = host_c;
  job.ldc = 0;
}

Status RegionSource::check_after_run() const {
  for (const auto& region : bound_.held) SGEMM_RETURN_IF_ERROR(region->check_intact());
  return Status::Ok();
}

void RegionSource::release() {
  // An UnregisterRegion waiting on these regions may answer now.
  std::vector<std::shared_ptr<const MappedRegion>>().swap(bound_.held);
}

}  // namespace sgemm
