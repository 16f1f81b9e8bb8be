// SgemmService's shared-memory region RPCs, and OpenRing, which opens a
// request ring in a region (docs/transport.md). The caller is the Unix
// connection behind ctx->peer() (unix_connections.h); over TCP every one of
// them is FAILED_PRECONDITION. UnregisterRegion answers when the last
// request using the region lets go of it, from that request's thread.
#include "proto/grpc_status.h"
#include "server/service/region_registry.h"
#include "server/service/ring_call.h"
#include "server/service/sgemm_service.h"
#include "server/service/unix_connections.h"

namespace sgemm {

StatusOr<RegionCaller> SgemmService::region_caller(const grpc::CallbackServerContext* ctx) const {
  // Tokens first (as for Multiply), then the Unix connection's credentials.
  SGEMM_ASSIGN_OR_RETURN(AuthClient * client, authenticate(ctx));
  RegionCaller caller = connections_->find(ctx->peer());
  if (client) {
    caller.client = client->name();
    caller.max_region_bytes = client->quota().max_region_bytes;
    caller.may_register = client->quota().multiply;
  }
  return caller;
}

grpc::ServerWriteReactor<v1::RingEvent>* SgemmService::OpenRing(grpc::CallbackServerContext* ctx,
                                                                const v1::OpenRingRequest* req) {
  const HandlerScope scope(*this);
  RingCall::Caller who{ctx->peer(), 0, stream_peer(ctx), nullptr};
  std::shared_ptr<const MappedRegion> region;
  Status refuse;
  auto caller = region_caller(ctx);  // the token first, then the Unix connection
  if (caller.ok()) {
    auto got = regions_->acquire(*caller, req->region());
    refuse = got.status();
    if (got.ok()) region = *std::move(got);
    who.connection = caller->connection;
    who.client = *authenticate(ctx);
  } else {
    refuse = caller.status();
  }
  return new RingCall(*shared_, *req, std::move(region), std::move(who), refuse);
}

grpc::ServerUnaryReactor* SgemmService::RegisterRegion(grpc::CallbackServerContext* ctx,
                                                       const v1::RegisterRegionRequest* req,
                                                       v1::RegisterRegionResponse* resp) {
  const HandlerScope scope(*this);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  auto caller = region_caller(ctx);
  if (!caller.ok()) {
    reactor->Finish(to_grpc(caller.status()));
    return reactor;
  }
  auto r = regions_->register_region(*caller, req->name(), req->shm_name(), req->byte_size());
  if (r.ok()) resp->set_byte_size(*r);
  reactor->Finish(to_grpc(r.status()));
  return reactor;
}

grpc::ServerUnaryReactor* SgemmService::UnregisterRegion(grpc::CallbackServerContext* ctx,
                                                         const v1::UnregisterRegionRequest* req,
                                                         v1::UnregisterRegionResponse* resp) {
  const HandlerScope scope(*this);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  auto caller = region_caller(ctx);
  if (!caller.ok()) {
    reactor->Finish(to_grpc(caller.status()));
    return reactor;
  }
  const Status st = regions_->unregister_region(*caller, req->name(), [reactor, resp](int waited) {
    resp->set_waited_requests(waited);
    reactor->Finish(grpc::Status::OK);
  });
  if (!st.ok()) reactor->Finish(to_grpc(st));
  return reactor;
}

grpc::ServerUnaryReactor* SgemmService::ListRegions(grpc::CallbackServerContext* ctx, const v1::ListRegionsRequest*,
                                                    v1::ListRegionsResponse* resp) {
  const HandlerScope scope(*this);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  auto found = region_caller(ctx);
  if (!found.ok()) {
    reactor->Finish(to_grpc(found.status()));
    return reactor;
  }
  const RegionCaller& caller = *found;
  if (!caller.unix_socket) {
    reactor->Finish(to_grpc(regions_need_unix_socket("ListRegions")));
    return reactor;
  }
  for (const RegionRow& row : regions_->list(caller)) {
    v1::RegionInfo* info = resp->add_regions();
    info->set_name(row.name);
    info->set_shm_name(row.shm_name);
    info->set_byte_size(row.bytes);
    info->set_requests_using(row.requests_using);
    info->set_this_connection(row.this_connection);
  }
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace sgemm
