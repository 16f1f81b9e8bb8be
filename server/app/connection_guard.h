// The transport guard: what gRPC 1.51 leaves every listener open to, guarded
// where the server's connections are accepted and read (docs/security.md).
//
// gRPC 1.51 gives a server no hook on its connections, so the guard sits at
// the libc calls gRPC's listeners and endpoints make: sgemm-server defines
// accept4(), recvmsg(), sendmsg() and close() itself (the executable's symbols
// come before libc's; each forwards to the next definition, libc's or a
// sanitizer's). Everything else passes through untouched.
//
// Files: connection_guard.cc (the hooks), tls_inspection.h, descriptor_reserve.h,
// http2_inspector.h (one connection's HTTP/2 counts, over
// http2_frame_reader.h), guard_state.h (options, figures, log, cool-down),
// libc_next.h (the forwarding).
//
// Descriptor reserve (descriptor_reserve.h): a new connection never gets the
// last descriptors below RLIMIT_NOFILE, and a spare descriptor takes a
// waiting connection off the queue at EMFILE, so no listener ever sees the
// failure that stops gRPC 1.51's for good.
//
// HTTP/2 rapid reset (CVE-2023-44487). On every accepted connection whose
// client opens with the HTTP/2 preface in the clear (plaintext TCP and the
// Unix socket), the guard reads the frame headers of what gRPC receives and
// sends, in place, and counts RST_STREAM frames. TLS connections are
// ciphertext at recvmsg(): the guard reads their plaintext at SSL_read() and
// SSL_write() instead, under the same bounds (tls_inspection.h). A connection that sends more than
// `max_resets_per_second` within a second is closed: that recvmsg() fails
// with ECONNRESET (gRPC drops the connection without parsing the batch) and
// the socket is shut down. An address whose connections were closed so three
// times within `cool_down` is cooling down for the rest of it: its new
// connections may reset 1/20 of the bound before they are closed, so a storm
// that reconnects costs a few calls per connection, while the address's
// callers that do not reset streams are served as before (one host may run
// an attacker and honest clients alike).
//
// Open streams. gRPC 1.51 holds a client to SETTINGS_MAX_CONCURRENT_STREAMS
// only once the client has acknowledged the SETTINGS frame; the service
// counts its own streams (server/service/stream_admission.h), but not those of
// gRPC's health and reflection services. So the guard counts, per plaintext
// connection, the streams the client opened and neither side has ended yet
// (HEADERS on a new stream; END_STREAM from the server, RST_STREAM from
// either), and closes a connection that holds more than `max_open_streams`
// (sgemm-server: twice --max-streams-per-connection, the limit the client
// was told) open at once. A health Watch stream a client never ends counts.
// Such closes count toward the address's cool-down like closes for resets:
// while it cools down, a new connection from it is closed past
// 1/kCoolDownDivisor of that bound too, so a client that floods streams
// gRPC serves itself (health Watch) and reconnects has far fewer of them
// started per connection.
//
// Threads: the hooks run on whichever thread calls them; per-descriptor state
// is atomics (gRPC reads one descriptor from one thread at a time); the
// cool-down table has a mutex taken only when a connection is closed, or
// accepted while some address is cooling down.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace sgemm {

struct ConnectionGuardOptions {
  int max_resets_per_second = 200;  // RST_STREAM frames per connection a second; 0 = not counted
  // HTTP/2 streams one connection may hold open (opened by the
  // client, not yet ended by either side), every method counted (health
  // Watch and reflection too); past it the connection is closed. 0 = not counted.
  int max_open_streams = 512;
  std::chrono::milliseconds cool_down{10000};
  int closes_before_cool_down = 3;  // an address's connections closed this often (resets or streams) within cool_down
  // Descriptors never handed to a new connection: the last `reserve` below
  // the soft RLIMIT_NOFILE (or 1/16 of it, whichever is larger).
  int reserve = 32;
  // One line for the server's log (a closed connection, a refused address,
  // a dropped connection); called on the thread that saw it, rate-limited.
  std::function<void(const std::string&)> log;
};

// Figures for GetInfo-like reporting and tests.
struct ConnectionGuardCounts {
  int64_t dropped_for_descriptors = 0;  // connections closed at accept: the descriptor reserve
  int64_t closed_for_resets = 0;        // connections closed for resetting streams too fast
  int64_t accepted_cooling_down = 0;    // connections accepted with the lower bound: their address was cooling down
  int64_t closed_for_streams = 0;       // connections closed for holding too many streams open
};

// Turns the guard on (or changes its options). Until then the hooks only
// forward. Call before the listeners start; later calls replace the options.
void install_connection_guard(ConnectionGuardOptions options);
ConnectionGuardCounts connection_guard_counts();

}  // namespace sgemm
