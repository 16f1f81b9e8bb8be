#include "server/service/status_mapping.h"

namespace sgemm {

grpc::Status to_grpc_status(const Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // StatusCode mirrors grpc::StatusCode value for value (common/status.h).
  return grpc::Status(static_cast<grpc::StatusCode>(static_cast<int>(status.code())), status.message());
}

}  // namespace sgemm
