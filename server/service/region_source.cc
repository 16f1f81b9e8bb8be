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

Status RegionSource::check_after_run() const {
  for (const auto& region : bound_.held) SGEMM_RETURN_IF_ERROR(region->check_intact());
  return Status::Ok();
}

void RegionSource::release() {
  // An UnregisterRegion waiting on these regions may answer now.
  std::vector<std::shared_ptr<const MappedRegion>>().swap(bound_.held);
}

}  // namespace sgemm
