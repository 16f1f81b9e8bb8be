#include "proto/grpc_status.h"

#include <gtest/gtest.h>

namespace sgemm {
namespace {

// Every gRPC code, 0 to 16, maps to exactly one of ours and back unchanged.
TEST(GrpcStatus, EveryGrpcCodeRoundTripsWithItsMessage) {
  for (int code = 1; code <= 16; ++code) {
    grpc::Status theirs(static_cast<grpc::StatusCode>(code), "why " + std::to_string(code));
    Status ours = from_grpc(theirs);
    EXPECT_EQ(static_cast<int>(ours.code()), code);
    EXPECT_EQ(ours.message(), theirs.error_message());
    EXPECT_NE(status_code_name(ours.code()), "") << code;
    grpc::Status back = to_grpc(ours);
    EXPECT_EQ(back.error_code(), theirs.error_code());
    EXPECT_EQ(back.error_message(), theirs.error_message());
  }
  EXPECT_TRUE(to_grpc(Status::Ok()).ok());
  EXPECT_TRUE(from_grpc(grpc::Status::OK).ok());
}

TEST(GrpcStatus, OurNamedCodesKeepTheirMeaning) {
  EXPECT_EQ(to_grpc(InvalidArgument("m")).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(to_grpc(ResourceExhausted("m")).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(to_grpc(Unavailable("m")).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(to_grpc(Unauthenticated("m")).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(status_code_name(StatusCode::kUnknown), "UNKNOWN");
  EXPECT_EQ(status_code_name(StatusCode::kDataLoss), "DATA_LOSS");
}

// A peer may send a code outside the standard set: it becomes UNKNOWN, with
// the number kept in the message, never an enum value we do not define.
TEST(GrpcStatus, ACodeOutsideTheStandardSetBecomesUnknown) {
  Status ours = from_grpc(grpc::Status(static_cast<grpc::StatusCode>(42), "odd"));
  EXPECT_EQ(ours.code(), StatusCode::kUnknown);
  EXPECT_NE(ours.message().find("42"), std::string::npos);
  EXPECT_NE(ours.message().find("odd"), std::string::npos);
}

}  // namespace
}  // namespace sgemm
