#include "proto/grpc_status.h"

namespace sgemm {
namespace {

struct CodePair {
  StatusCode ours;
  grpc::StatusCode theirs;
};

// The table both directions read. A code added to StatusCode without a row
// here fails the round-trip test (tests/proto/grpc_status_test.cc).
constexpr CodePair kCodes[] = {
    {StatusCode::kOk, grpc::StatusCode::OK},
    {StatusCode::kCancelled, grpc::StatusCode::CANCELLED},
    {StatusCode::kUnknown, grpc::StatusCode::UNKNOWN},
    {StatusCode::kInvalidArgument, grpc::StatusCode::INVALID_ARGUMENT},
    {StatusCode::kDeadlineExceeded, grpc::StatusCode::DEADLINE_EXCEEDED},
    {StatusCode::kNotFound, grpc::StatusCode::NOT_FOUND},
    {StatusCode::kAlreadyExists, grpc::StatusCode::ALREADY_EXISTS},
    {StatusCode::kPermissionDenied, grpc::StatusCode::PERMISSION_DENIED},
    {StatusCode::kResourceExhausted, grpc::StatusCode::RESOURCE_EXHAUSTED},
    {StatusCode::kFailedPrecondition, grpc::StatusCode::FAILED_PRECONDITION},
    {StatusCode::kAborted, grpc::StatusCode::ABORTED},
    {StatusCode::kOutOfRange, grpc::StatusCode::OUT_OF_RANGE},
    {StatusCode::kUnimplemented, grpc::StatusCode::UNIMPLEMENTED},
    {StatusCode::kInternal, grpc::StatusCode::INTERNAL},
    {StatusCode::kUnavailable, grpc::StatusCode::UNAVAILABLE},
    {StatusCode::kDataLoss, grpc::StatusCode::DATA_LOSS},
    {StatusCode::kUnauthenticated, grpc::StatusCode::UNAUTHENTICATED},
};

}  // namespace

grpc::Status to_grpc(const Status& status) {
  if (status.ok()) return grpc::Status::OK;
  for (const CodePair& p : kCodes) {
    if (p.ours == status.code()) return grpc::Status(p.theirs, status.message());
  }
  // Unreachable while kCodes covers StatusCode; an unlisted code is our bug.
  return grpc::Status(grpc::StatusCode::INTERNAL, "unmapped status code: " + status.message());
}

Status from_grpc(const grpc::Status& status) {
  if (status.ok()) return Status::Ok();
  for (const CodePair& p : kCodes) {
    if (p.theirs == status.error_code()) return Status(p.ours, status.error_message());
  }
  // A peer may send a code outside the standard set.
  return Status(StatusCode::kUnknown,
                "gRPC code " + std::to_string(static_cast<int>(status.error_code())) + ": " + status.error_message());
}

}  // namespace sgemm
