// A MultiplyResponse as gRPC hands it to the client, for the tests of the
// client's decoders (wire_codec_test.cc, multiply_stream_test.cc).
#pragma once

#include <grpcpp/impl/codegen/proto_utils.h>
#include <gtest/gtest.h>

#include "sgemm/v1/sgemm.pb.h"

namespace sgemm::testing {

inline grpc::ByteBuffer serialize(const ::sgemm::v1::MultiplyResponse& msg) {
  grpc::ByteBuffer bb;
  bool own = false;
  EXPECT_TRUE(grpc::SerializationTraits<::sgemm::v1::MultiplyResponse>::Serialize(msg, &bb, &own).ok());
  return bb;
}

}  // namespace sgemm::testing
