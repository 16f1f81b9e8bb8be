// The transport guard's HTTP/2 counts of one connection, on bytes built here
// (no socket, no TLS): the preface decides whether a connection is read, new
// streams and resets are counted from frame headers cut anywhere, and the
// server's END_STREAM and RST_STREAM end streams.
#include "server/app/http2_inspector.h"

#include <gtest/gtest.h>

#include <string>

namespace sgemm {
namespace {

std::string frame(uint8_t type, uint8_t flags, uint32_t stream, const std::string& payload = "") {
  const uint32_t len = uint32_t(payload.size());
  const char head[9] = {char(len >> 16),    char(len >> 8),     char(len),         char(type),         char(flags),
                        char(stream >> 24), char(stream >> 16), char(stream >> 8), char(stream & 0xff)};
  return std::string(head, 9) + payload;
}

Http2Verdict feed(Http2Inspector& h, const std::string& bytes, int64_t now_ms, int max_streams, std::size_t piece) {
  Http2Verdict v = Http2Verdict::kKeep;
  for (std::size_t at = 0; at < bytes.size() && v == Http2Verdict::kKeep; at += piece)
    v = h.client_sent(reinterpret_cast<const uint8_t*>(bytes.data()) + at, std::min(piece, bytes.size() - at), now_ms,
                      max_streams);
  return v;
}

TEST(Http2Inspector, OnlyConnectionsOpeningWithThePrefaceAreRead) {
  Http2Inspector tls;
  tls.start(10);
  const std::string hello = "\x16\x03\x01\x02\x00";  // a TLS ClientHello's record header
  EXPECT_EQ(feed(tls, hello, 0, 0, 64), Http2Verdict::kKeep);
  EXPECT_FALSE(tls.inspecting());
  std::string resets;
  for (uint32_t id = 1; id < 100; id += 2) resets += frame(kHttp2RstStream, 0, id, std::string(4, '\0'));
  EXPECT_EQ(feed(tls, resets, 0, 0, 64), Http2Verdict::kKeep) << "a connection that is not ours is never closed";

  Http2Inspector h2;
  h2.start(10);
  EXPECT_EQ(feed(h2, std::string(kHttp2Preface, 10), 0, 0, 3), Http2Verdict::kKeep);
  EXPECT_TRUE(h2.inspecting());
  EXPECT_FALSE(h2.past_preface());
  EXPECT_EQ(feed(h2, std::string(kHttp2Preface + 10, kHttp2PrefaceBytes - 10), 0, 0, 5), Http2Verdict::kKeep);
  EXPECT_TRUE(h2.past_preface());
}

TEST(Http2Inspector, ResetsPastTheBoundWithinASecondCloseTheConnection) {
  for (const std::size_t piece : {std::size_t(1), std::size_t(7), std::size_t(4096)}) {
    Http2Inspector h;
    h.start(10);
    std::string storm(kHttp2Preface, kHttp2PrefaceBytes);
    for (uint32_t id = 1; id <= 19; id += 2)  // 10 streams opened and reset: at the bound
      storm +=
          frame(kHttp2Headers, 0x4, id, std::string(20, 'h')) + frame(kHttp2RstStream, 0, id, std::string(4, '\0'));
    EXPECT_EQ(feed(h, storm, 1000, 0, piece), Http2Verdict::kKeep) << "piece " << piece;
    // A second later the count starts again; the 11th within it closes.
    std::string more;
    for (uint32_t id = 21; id <= 39; id += 2) more += frame(kHttp2RstStream, 0, id, std::string(4, '\0'));
    EXPECT_EQ(feed(h, more, 2000, 0, piece), Http2Verdict::kKeep) << "piece " << piece;
    EXPECT_EQ(feed(h, frame(kHttp2RstStream, 0, 41, std::string(4, '\0')), 2500, 0, piece), Http2Verdict::kResets);
  }
}

TEST(Http2Inspector, OpenStreamsAreCountedUntilEitherSideEndsThem) {
  Http2Inspector h;
  h.start(0);  // resets not counted
  std::string bytes(kHttp2Preface, kHttp2PrefaceBytes);
  for (uint32_t id = 1; id <= 9; id += 2) bytes += frame(kHttp2Headers, 0x4, id);  // 5 streams
  bytes += frame(kHttp2Data, 0, 1, std::string(100, 'd'));  // data on an open stream opens nothing
  ASSERT_EQ(feed(h, bytes, 0, 5, 4096), Http2Verdict::kKeep);
  EXPECT_EQ(h.open_streams(), 5);
  // The server ends stream 1 (trailers with END_STREAM) and resets 3; the client resets 5.
  const std::string out = frame(kHttp2Headers, kHttp2EndStream | 0x4, 1) + frame(kHttp2RstStream, 0, 3, "....");
  h.server_sent(reinterpret_cast<const uint8_t*>(out.data()), out.size());
  ASSERT_EQ(feed(h, frame(kHttp2RstStream, 0, 5, "...."), 0, 5, 4096), Http2Verdict::kKeep);
  EXPECT_EQ(h.open_streams(), 2);
  std::string three;
  for (uint32_t id = 11; id <= 15; id += 2) three += frame(kHttp2Headers, 0x4, id);
  ASSERT_EQ(feed(h, three.substr(0, 2 * 9), 0, 5, 4096), Http2Verdict::kKeep);  // 4 open
  EXPECT_EQ(feed(h, three.substr(2 * 9) + frame(kHttp2Headers, 0x4, 17), 0, 5, 4096), Http2Verdict::kStreams);
  h.forget();
  EXPECT_EQ(h.open_streams(), 0);
}

}  // namespace
}  // namespace sgemm
