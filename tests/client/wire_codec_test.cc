#include "client/wire_codec.h"

#include <gtest/gtest.h>

#include <vector>

#include "sgemm/v1/sgemm.pb.h"
#include "tests/client/response_bytes.h"

namespace sgemm::wire {
namespace {

namespace v1 = ::sgemm::v1;

std::string flatten(grpc::ByteBuffer& bb) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(bb.Dump(&slices).ok());
  std::string out;
  for (const auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

using testing::serialize;

TEST(WireCodec, RequestChunkIsByteExactWithProtobufAndReleasesTheCallersMemory) {
  std::vector<float> data(300000);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = float(i) * 0.5f - 3.0f;
  SliceRefs refs;
  for (WireMatrix m : {WireMatrix::kA, WireMatrix::kB, WireMatrix::kC}) {
    for (int64_t offset : {int64_t{0}, int64_t{1}, int64_t{127}, int64_t{128}, int64_t{20000}}) {
      for (int64_t count : {int64_t{1}, int64_t{31}, int64_t{32}, int64_t{262144}}) {
        v1::MultiplyRequest want;
        want.mutable_chunk()->set_matrix(static_cast<v1::Matrix>(int(m)));
        want.mutable_chunk()->set_offset(offset);
        want.mutable_chunk()->set_data(data.data() + offset, std::size_t(count) * sizeof(float));
        grpc::ByteBuffer bb = encode_chunk(m, data.data(), offset, count, &refs);
        EXPECT_EQ(flatten(bb), want.SerializeAsString()) << "matrix " << int(m) << " offset " << offset;
      }
    }
  }
  refs.wait_zero();  // every buffer above is gone: gRPC would have released the caller's memory
}

TEST(WireCodec, DecodesChunksIntoTheCallersCAndSummariesThroughProtobuf) {
  std::vector<float> src(1000), c(1000, -1.0f);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = float(i) + 0.5f;
  for (int64_t offset : {int64_t{0}, int64_t{1}, int64_t{999}}) {
    v1::MultiplyResponse msg;
    msg.mutable_chunk()->set_matrix(v1::MATRIX_C);
    msg.mutable_chunk()->set_offset(offset);
    const int64_t count = int64_t(src.size()) - offset;
    msg.mutable_chunk()->set_data(src.data() + offset, std::size_t(count) * sizeof(float));
    grpc::ByteBuffer bb = serialize(msg);
    v1::MultiplyResponse summary;
    auto r = decode_response(bb, c.data(), int64_t(c.size()), &summary);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->kind, Response::Kind::kChunk);
    EXPECT_EQ(r->offset, offset);
    EXPECT_EQ(r->count, count);
    EXPECT_EQ(c[std::size_t(offset)], src[std::size_t(offset)]);
    EXPECT_EQ(c.back(), src.back());
  }
  v1::MultiplyResponse sum;
  sum.mutable_summary()->set_request_id("42");
  sum.mutable_summary()->set_backend("cpu");
  grpc::ByteBuffer bb = serialize(sum);
  v1::MultiplyResponse out;
  auto r = decode_response(bb, c.data(), int64_t(c.size()), &out);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->kind, Response::Kind::kSummary);
  EXPECT_EQ(out.summary().request_id(), "42");
}

TEST(WireCodec, MalformedChunksAreRefused) {
  std::vector<float> c(100);
  v1::MultiplyResponse summary;
  v1::MultiplyResponse overrun;
  overrun.mutable_chunk()->set_matrix(v1::MATRIX_C);
  overrun.mutable_chunk()->set_offset(90);
  overrun.mutable_chunk()->set_data(std::string(11 * 4, '\0'));
  grpc::ByteBuffer a = serialize(overrun);
  EXPECT_FALSE(decode_response(a, c.data(), 100, &summary).ok());
  v1::MultiplyResponse wrong;
  wrong.mutable_chunk()->set_matrix(v1::MATRIX_A);
  wrong.mutable_chunk()->set_data(std::string(8, '\0'));
  grpc::ByteBuffer b = serialize(wrong);
  EXPECT_FALSE(decode_response(b, c.data(), 100, &summary).ok());
  v1::MultiplyResponse odd;
  odd.mutable_chunk()->set_matrix(v1::MATRIX_C);
  odd.mutable_chunk()->set_data(std::string(7, '\0'));
  grpc::ByteBuffer d = serialize(odd);
  EXPECT_FALSE(decode_response(d, c.data(), 100, &summary).ok());
}

}  // namespace
}  // namespace sgemm::wire
