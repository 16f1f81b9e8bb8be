#include "server/service/status_mapping.h"

#include <gtest/gtest.h>

namespace sgemm {
namespace {

TEST(StatusMapping, EveryCodeMapsToTheSameGrpcCodeWithItsMessage) {
  const std::pair<StatusCode, grpc::StatusCode> pairs[] = {
      {StatusCode::kInvalidArgument, grpc::StatusCode::INVALID_ARGUMENT},
      {StatusCode::kResourceExhausted, grpc::StatusCode::RESOURCE_EXHAUSTED},
      {StatusCode::kUnavailable, grpc::StatusCode::UNAVAILABLE},
      {StatusCode::kDeadlineExceeded, grpc::StatusCode::DEADLINE_EXCEEDED},
      {StatusCode::kCancelled, grpc::StatusCode::CANCELLED},
      {StatusCode::kFailedPrecondition, grpc::StatusCode::FAILED_PRECONDITION},
      {StatusCode::kInternal, grpc::StatusCode::INTERNAL},
      {StatusCode::kUnimplemented, grpc::StatusCode::UNIMPLEMENTED},
  };
  for (auto [ours, theirs] : pairs) {
    grpc::Status g = to_grpc_status(Status(ours, "why"));
    EXPECT_EQ(g.error_code(), theirs);
    EXPECT_EQ(g.error_message(), "why");
  }
  EXPECT_TRUE(to_grpc_status(Status::Ok()).ok());
}

}  // namespace
}  // namespace sgemm
