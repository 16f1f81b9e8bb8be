// StreamProtocol (client/multiply_stream.h): what a Multiply stream writes
// after its header, chunk by chunk with the last one marked, and what it makes
// of the server's messages. The driver itself runs against a real server in
// every e2e test (one-stream requests run on the caller's thread).
#include "client/multiply_stream.h"

#include <gtest/gtest.h>

#include <vector>

#include "tests/client/response_bytes.h"

namespace sgemm {
namespace {

namespace v1 = ::sgemm::v1;

v1::MultiplyRequest header() {
  v1::MultiplyRequest h;
  h.mutable_header()->set_m(3);
  return h;
}

using testing::serialize;

struct Written {
  int chunks = 0;
  std::vector<bool> last;
};

Written drain(StreamProtocol& p) {
  Written w;
  grpc::ByteBuffer* out = nullptr;
  bool last = false;
  while (p.next_write(&out, &last)) {
    ++w.chunks;
    w.last.push_back(last);
    p.write_done();
  }
  return w;
}

TEST(StreamProtocol, ChunksEveryInputInOrderMarksTheLastAndSkipsEmptyOnes) {
  std::vector<float> a(10, 1.0f), b(7, 2.0f);
  wire::SliceRefs refs;
  {
    StreamProtocol p(header(),
                     {{wire::WireMatrix::kB, b.data(), 0, 7},
                      {wire::WireMatrix::kC, b.data(), 3, 3},
                      {wire::WireMatrix::kA, a.data(), 2, 10}},
                     /*chunk_elems=*/4, nullptr, 0, nullptr, &refs);
    EXPECT_TRUE(p.has_input());
    const Written w = drain(p);
    EXPECT_EQ(w.chunks, 4) << "B in 4 + 3, the empty C skipped, A's 8 in 4 + 4";
    EXPECT_EQ(w.last, (std::vector<bool>{false, false, false, true}));
    EXPECT_EQ(p.bytes_sent(), (7 + 8) * 4);
    p.clear();
  }
  refs.wait_zero();
}

TEST(StreamProtocol, AHeaderWithNothingToUploadHasNoInput) {
  StreamProtocol none(header(), {}, 4, nullptr, 0, nullptr, nullptr);
  EXPECT_FALSE(none.has_input());
  std::vector<float> a(4);
  StreamProtocol empty(header(), {{wire::WireMatrix::kA, a.data(), 4, 4}}, 4, nullptr, 0, nullptr, nullptr);
  EXPECT_FALSE(empty.has_input()) << "every operand named by handle: only empty ranges";
  EXPECT_EQ(drain(empty).chunks, 0);
}

TEST(StreamProtocol, DecodesCSummaryAndGrantAndKeepsAProtocolError) {
  std::vector<float> c(6, 0.0f);
  std::vector<std::pair<int64_t, int64_t>> seen;
  StreamProtocol p(
      header(), {}, 4, c.data(), 6, [&](int64_t o, int64_t n) { seen.emplace_back(o, n); }, nullptr);
  v1::MultiplyResponse chunk;
  chunk.mutable_chunk()->set_matrix(v1::MATRIX_C);
  chunk.mutable_chunk()->set_offset(2);
  const float vals[3] = {1.5f, 2.5f, 3.5f};
  chunk.mutable_chunk()->set_data(vals, sizeof vals);
  grpc::ByteBuffer bb = serialize(chunk);
  ASSERT_TRUE(p.on_read(bb).ok());
  EXPECT_EQ(c[3], 2.5f);
  EXPECT_EQ(p.bytes_received(), 12);
  EXPECT_TRUE(p.first_c_before_upload_end()) << "the upload was not marked done";
  EXPECT_EQ(seen, (std::vector<std::pair<int64_t, int64_t>>{{2, 3}}));

  v1::MultiplyResponse grant;
  grant.mutable_stripe_grant()->set_token("t0k");
  grpc::ByteBuffer g = serialize(grant);
  ASSERT_TRUE(p.on_read(g).ok());
  EXPECT_TRUE(p.have_grant());
  EXPECT_EQ(p.grant_token(), "t0k");

  v1::MultiplyResponse sum;
  sum.mutable_summary()->set_request_id("7");
  grpc::ByteBuffer s = serialize(sum);
  ASSERT_TRUE(p.on_read(s).ok());
  EXPECT_TRUE(p.have_summary());
  EXPECT_EQ(p.summary().summary().request_id(), "7");

  v1::MultiplyResponse overrun;
  overrun.mutable_chunk()->set_matrix(v1::MATRIX_C);
  overrun.mutable_chunk()->set_offset(5);
  overrun.mutable_chunk()->set_data(vals, sizeof vals);
  grpc::ByteBuffer o = serialize(overrun);
  EXPECT_FALSE(p.on_read(o).ok());
  EXPECT_FALSE(p.protocol_error().ok());
  EXPECT_NE(p.protocol_error().message(), "");
}

}  // namespace
}  // namespace sgemm
