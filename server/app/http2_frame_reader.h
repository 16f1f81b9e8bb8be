// HTTP/2 frame headers read in place from a byte stream that arrives in
// pieces (RFC 9113 section 4.1: 3 bytes length, 1 type, 1 flags, 4 stream id).
// Payloads are skipped, never copied: the transport guard only needs to know
// which frames pass, not what they carry.
//
// Threads: one reader per direction of a connection, used under that
// connection's lock.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace sgemm {

// What a client sends first on an HTTP/2 connection without TLS negotiation.
inline constexpr char kHttp2Preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
inline constexpr int kHttp2PrefaceBytes = sizeof kHttp2Preface - 1;

inline constexpr uint8_t kHttp2Data = 0x0, kHttp2Headers = 0x1, kHttp2RstStream = 0x3;
inline constexpr uint8_t kHttp2EndStream = 0x1;  // flag of DATA and HEADERS

struct Http2FrameReader {
  uint8_t head[9] = {};
  int have = 0;       // bytes of the current frame header seen
  uint32_t skip = 0;  // payload bytes of the current frame still to come

  // Calls on_frame(type, flags, stream id) for each frame header completed in
  // [p, p + len); stops (returning false) when on_frame returns false.
  template <typename F>
  bool read(const uint8_t* p, std::size_t len, F on_frame) {
    while (len > 0) {
      if (skip > 0) {
        const std::size_t k = std::min<std::size_t>(skip, len);
        skip -= uint32_t(k);
        p += k;
        len -= k;
        continue;
      }
      head[have++] = *p++;
      --len;
      if (have < 9) continue;
      have = 0;
      skip = uint32_t(head[0]) << 16 | uint32_t(head[1]) << 8 | head[2];
      const uint32_t id =
          (uint32_t(head[5]) << 24 | uint32_t(head[6]) << 16 | uint32_t(head[7]) << 8 | head[8]) & 0x7fffffffu;
      if (!on_frame(head[3], head[4], id)) return false;
    }
    return true;
  }
};

}  // namespace sgemm
