// The one translation between sgemm::Status and grpc::Status, shared by the
// service, the cluster's control plane and the client library. Every gRPC code
// has exactly one StatusCode and back; nothing else casts between the two.
#pragma once

#include <grpcpp/support/status.h>

#include "common/status.h"

namespace sgemm {

grpc::Status to_grpc(const Status& status);
Status from_grpc(const grpc::Status& status);

}  // namespace sgemm
