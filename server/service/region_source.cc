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
  job.a = bound_.a;
  job.lda = bound_.lda;
  job.b = bound_.b;
  job.ldb = bound_.ldb;
  if (bound_.out) {
    job.c = bound_.out;
    job.ldc = bound_.ld_out;
  }
  return Status::Ok();
}

void RegionSource::prepare_c(GemmJob& job, float* host_c) {
  const GemmShape& s = job.request.shape;
  if (bound_.out) {
    // C in place needs nothing; C from elsewhere is first copied where the result goes.
    if (bound_.c_in && !bound_.c_in_place())
      copy_matrix(bound_.out, bound_.ld_out, bound_.c_in, bound_.ldc_in, s.m, s.n);
    return;
  }
  if (bound_.c_in) copy_matrix(host_c, s.n, bound_.c_in, bound_.ldc_in, s.m, s.n);
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
