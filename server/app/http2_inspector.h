// What the transport guard counts on one HTTP/2 connection, from the bytes
// each side sends in the clear (connection_guard.h says why and which
// connections): whether the client opened with the HTTP/2 preface, the
// streams it holds open, and the RST_STREAM frames it sends per second.
// The bytes come from wherever the guard reads them (recvmsg/sendmsg on a
// plaintext socket); the inspector knows nothing of descriptors.
//
// Threads: one connection's inspector is used under that connection's lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_set>

#include "server/app/http2_frame_reader.h"

namespace sgemm {

// Why the guard closes a connection.
enum class Http2Verdict { kKeep, kResets, kStreams };

class Http2Inspector {
 public:
  // A new connection whose client may reset `max_resets` streams a second
  // (0 = not counted).
  void start(int max_resets);

  // False once the client's first bytes were not the HTTP/2 preface (TLS, or
  // not HTTP/2): such a connection is not inspected any further.
  bool inspecting() const { return !not_http2_; }
  bool past_preface() const { return matched_ == kHttp2PrefaceBytes; }

  // The client's bytes. `max_streams`: open streams before the connection is
  // closed (0 = not counted); `now_ms` a monotonic clock.
  Http2Verdict client_sent(const uint8_t* p, std::size_t len, int64_t now_ms, int max_streams);
  // The server's bytes: the streams it ends.
  void server_sent(const uint8_t* p, std::size_t len);

  int max_resets() const { return max_resets_; }
  int open_streams() const { return open_ ? int(open_->size()) : 0; }
  // Frees the open-stream set (the connection is closed or forgotten).
  void forget() {
    delete open_;
    open_ = nullptr;
  }

 private:
  void end_stream(uint32_t id) {
    if (open_) open_->erase(id);
  }

  int matched_ = 0;  // preface bytes seen
  bool not_http2_ = false;
  Http2FrameReader in_;   // what the client sends
  Http2FrameReader out_;  // what the server sends
  uint32_t last_client_stream_ = 0;
  // The client's streams neither side has ended; owned, freed by forget().
  // A plain pointer keeps the inspector trivially destructible: the guard's
  // table of them is never destroyed (gRPC's threads read and close
  // connections while the process's static objects go at exit).
  std::unordered_set<uint32_t>* open_ = nullptr;
  int64_t window_start_ms_ = 0;
  int resets_ = 0;      // RST_STREAM frames from the client since window_start_ms_
  int max_resets_ = 0;  // this connection's bound: lower when its address is cooling down
};

}  // namespace sgemm
