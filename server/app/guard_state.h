// The transport guard's process-wide state (connection_guard.h): its options,
// its figures, its rate-limited log, and the addresses cooling down after
// their connections were closed (for rapid reset or for open streams).
//
// Never destroyed: gRPC's threads may still read and close connections while
// the process's static objects are being destroyed at exit.
//
// Threads: the atomics are read on every hooked call without a lock; `mu`
// guards the rest and is taken only when a connection is closed, accepted
// while some address is cooling down, or logged.
#pragma once

#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "server/app/connection_guard.h"

namespace sgemm {

// A connection from an address that is cooling down may reset, and hold open,
// this many times fewer streams.
inline constexpr int kCoolDownDivisor = 20;

struct CoolDown {
  sockaddr_storage address{};
  int closes = 0;
  int64_t first_close_ms = 0;
  int64_t refused_until_ms = 0;
};

struct GuardState {
  std::atomic<bool> on{false};
  std::atomic<int> max_resets{0};
  std::atomic<int> max_streams{0};           // open HTTP/2 streams per connection before it is closed; 0 = not counted
  std::atomic<int> first_reserved{1 << 30};  // descriptors from here on are never handed out
  std::mutex mu;                             // guards what follows
  ConnectionGuardOptions options;
  int spare = -1;                 // kept open, closed to accept and drop a connection at EMFILE
  std::vector<CoolDown> cooling;  // addresses whose connections the guard closed
  std::atomic<int> cooling_n{0};  // cooling.size(), read without the lock
  int64_t last_log_ms = -1000;    // the log says at most one line per second...
  int64_t unlogged = 0;           // ... and how many it left out
  std::atomic<int64_t> dropped{0}, closed{0}, refused{0}, closed_for_streams{0};
};

GuardState& guard();

int64_t now_ms();  // CLOCK_MONOTONIC

// A spin lock over a connection's atomic_flag: held for the few microseconds
// of reading one batch's frame headers.
class SpinLock {
 public:
  explicit SpinLock(std::atomic_flag& f) : f_(f) {
    while (f_.test_and_set(std::memory_order_acquire)) {
    }
  }
  ~SpinLock() { f_.clear(std::memory_order_release); }
  SpinLock(const SpinLock&) = delete;
  SpinLock& operator=(const SpinLock&) = delete;

 private:
  std::atomic_flag& f_;
};

std::string address_text(const sockaddr_storage& a);  // "127.0.0.1" (also when IPv4-mapped), "::1", or "unix"

// A line for the server's log, at most one a second (the rest are counted
// into the next one); called on the thread that saw the event.
void guard_log(const std::string& line);

// Whether `peer`'s address is cooling down (its new connections get
// 1/kCoolDownDivisor of the reset bound and of the open-stream bound).
bool cooling_down(const sockaddr_storage& peer);
// The peer of the accepted TLS connection this thread last read from
// (recvmsg), for the TLS hooks: gRPC 1.51 decrypts what a read brought on the
// thread that read it, before that thread reads another connection, so the
// first SSL_read() of a connection follows its own recvmsg(). Set by
// note_tls_read(); AF_UNSPEC when this thread's last read was not from such a
// connection.
void note_tls_read(const sockaddr_storage& peer);
void forget_tls_read();
sockaddr_storage last_tls_read();

// A connection from `peer` was closed for resets or for open streams: counts
// toward its address's cool-down. Unix peers (and peers unknown to the guard)
// have no address to refuse: their connections are closed one by one.
void closed_by_guard(const sockaddr_storage& peer);

// The log lines for a connection (`tls`: a TLS connection) closed for resets
// or for open streams.
std::string reset_close_text(const sockaddr_storage& peer, int max_resets, bool tls = false);
std::string streams_close_text(const sockaddr_storage& peer, int open, int max_streams, bool tls = false);

}  // namespace sgemm
