#include "server/service/device_handles.h"
#include "server/service/input_source.h"
#include "server/service/sgemm_service.h"
#include "server/service/unix_connections.h"

namespace sgemm {

Status DeviceSource::bind(const SourceContext& ctx, GemmJob& job) {
  ServiceShared& shared = ctx.shared;
  const RegionCaller who = shared.connections ? shared.connections->find(ctx.peer) : RegionCaller{};
  // Over TCP the caller may be on another host, where its handles mean nothing.
  if (!who.unix_socket) return device_buffers_need_unix_socket("header.a_device");
  if (!shared.device_handles || !shared.engine.device_memory()) return device_buffers_need_cuda("header.a_device");
  DeviceCaller caller;
  caller.unix_socket = true;
  caller.connection = who.connection;
  caller.uid = who.cred.uid;
  if (ctx.client) caller.client = ctx.client->name();  // with tokens, allocations belong to their client
  shared_ = &shared;
  client_ = caller.client;
  connection_ = caller.connection;
  uid_ = caller.uid;
  SGEMM_ASSIGN_OR_RETURN(ops_, bind_device_operands(*shared.device_handles, caller, ctx.header, refs_,
                                                    shared.engine.max_leading_dimension()));
  job.device = &ops_;
  return Status::Ok();
}

void DeviceSource::prepare_c(GemmJob& job, float* host_c) {
  // The engine copies an input C into the output on the GPU; without an
  // output buffer C lands in the request's host buffer, dense.
  if (!refs_.out) {
    job.c = host_c;
    job.ldc = 0;
  }
}

void DeviceSource::release() {
  ops_ = DeviceOperands{};  // the request's references on the mappings
  if (!shared_ || !shared_->device_handles) return;
  const DeviceCaller caller{true, connection_, uid_, client_};
  for (const auto* ref : {&refs_.a, &refs_.b, &refs_.c, &refs_.out})
    if (*ref && (*ref)->release) shared_->device_handles->release(caller, **ref);
  shared_ = nullptr;  // released once
}

}  // namespace sgemm
