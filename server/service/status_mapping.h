// The one place where sgemm::Status becomes grpc::Status.
#pragma once

#include <grpcpp/support/status.h>

#include "common/status.h"

namespace sgemm {

grpc::Status to_grpc_status(const Status& status);

}  // namespace sgemm
