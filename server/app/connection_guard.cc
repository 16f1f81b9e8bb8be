// The transport guard's hooks: accept4(), recvmsg(), sendmsg() and close()
// defined by the executable, each forwarding to libc's (libc_next.h). The
// rules they apply live beside them: the descriptor reserve
// (descriptor_reserve.h), the HTTP/2 counts of one connection
// (http2_inspector.h), the process-wide state and the cool-down
// (guard_state.h).
#include "server/app/connection_guard.h"

#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <type_traits>

#include "server/app/descriptor_reserve.h"
#include "server/app/guard_state.h"
#include "server/app/http2_inspector.h"
#include "server/app/libc_next.h"
#include "server/app/tls_inspection.h"

namespace sgemm {
namespace {

enum Stage : uint8_t {
  kIdle = 0,     // not an accepted connection, or not HTTP/2 in the clear: not inspected
  kPreface = 1,  // accepted: its first bytes say whether it is plaintext HTTP/2
  kFrames = 2,   // reading frame headers
  kClosed = 3,   // closed by the guard: every read fails
  kOpaque = 4,   // accepted, not HTTP/2 in the clear (TLS): read at SSL_read() (tls_inspection.h), which
                 // learns its peer from the recvmsg() before it
};

// One accepted connection. `stage` is read without the lock (the fast path
// for connections not inspected); the rest is guarded by `lock`.
// Trivially destructible, like the table: never destroyed (guard_state.h).
struct FdState {
  std::atomic<uint8_t> stage{kIdle};
  std::atomic_flag lock;
  Http2Inspector h2;
  sockaddr_storage peer{};
  int max_streams = 0;  // this connection's bound on open streams: lower while its address cools down
};

// Descriptors past this are forwarded untouched (never inspected or counted).
constexpr int kTracked = 1 << 16;
FdState g_fds[kTracked];
static_assert(std::is_trivially_destructible_v<FdState>, "the table outlives static destruction");

bool tracked(int fd) { return fd >= 0 && fd < kTracked; }

// A connection just accepted into `fd` from `peer`.
void track(int fd, const sockaddr_storage& peer) {
  int max_resets = guard().max_resets.load(std::memory_order_relaxed);
  int max_streams = guard().max_streams.load(std::memory_order_relaxed);
  if ((max_resets > 0 || max_streams > 0) && cooling_down(peer)) {
    if (max_resets > 0) max_resets = std::max(1, max_resets / kCoolDownDivisor);
    if (max_streams > 0) max_streams = std::max(1, max_streams / kCoolDownDivisor);
    guard().refused.fetch_add(1, std::memory_order_relaxed);
  }
  if (!tracked(fd)) return;
  FdState& s = g_fds[fd];
  SpinLock lock(s.lock);
  s.h2.start(max_resets);
  s.max_streams = max_streams;
  s.peer = peer;
  s.stage.store(kPreface, std::memory_order_relaxed);
}

// The client's bytes that one recvmsg() brought; the verdict on the connection.
Http2Verdict inspect_read(FdState& s, const msghdr* msg, std::size_t n, sockaddr_storage* peer, int* open,
                          int* max_resets, int* max_streams) {
  const int64_t now = now_ms();
  SpinLock lock(s.lock);
  Http2Verdict v = Http2Verdict::kKeep;
  for (std::size_t i = 0; i < msg->msg_iovlen && n > 0 && v == Http2Verdict::kKeep; ++i) {
    const std::size_t k = std::min(n, msg->msg_iov[i].iov_len);
    v = s.h2.client_sent(static_cast<const uint8_t*>(msg->msg_iov[i].iov_base), k, now, s.max_streams);
    n -= k;
  }
  if (!s.h2.inspecting()) {
    s.stage.store(kOpaque, std::memory_order_relaxed);  // TLS, or not HTTP/2: not ours to read
    note_tls_read(s.peer);
  } else if (v != Http2Verdict::kKeep) {
    s.stage.store(kClosed, std::memory_order_relaxed);
    *peer = s.peer;
    *open = s.h2.open_streams();
    *max_resets = s.h2.max_resets();
    *max_streams = s.max_streams;
    s.h2.forget();
  } else if (s.h2.past_preface()) {
    s.stage.store(kFrames, std::memory_order_relaxed);
  }
  return v;
}

}  // namespace

void install_connection_guard(ConnectionGuardOptions options) {
  {
    std::lock_guard lock(guard().mu);
    const int reserve = options.reserve;
    guard().options = std::move(options);
    guard().max_resets.store(guard().options.max_resets_per_second, std::memory_order_relaxed);
    guard().max_streams.store(guard().options.max_open_streams, std::memory_order_relaxed);
    set_descriptor_reserve(reserve);
  }
  enable_tls_inspection();
  guard().on.store(true, std::memory_order_release);
}

ConnectionGuardCounts connection_guard_counts() {
  return {guard().dropped.load(), guard().closed.load(), guard().refused.load(), guard().closed_for_streams.load()};
}

}  // namespace sgemm

using sgemm::g_fds;
using sgemm::guard;

extern "C" int accept4(int listener, sockaddr* addr, socklen_t* addr_len, int flags) {
  if (!guard().on.load(std::memory_order_acquire)) return sgemm::next_accept4(listener, addr, addr_len, flags);
  sockaddr_storage peer{};
  socklen_t peer_len = sizeof peer;
  const int c = sgemm::accept_within_reserve(listener, &peer, &peer_len, flags);
  if (c < 0) return -1;
  sgemm::track(c, peer);
  if (addr && addr_len) {
    std::memcpy(addr, &peer, std::min<std::size_t>(*addr_len, peer_len));
    *addr_len = peer_len;
  }
  return c;
}

extern "C" ssize_t recvmsg(int fd, msghdr* msg, int flags) {
  if (sgemm::tracked(fd) && g_fds[fd].stage.load(std::memory_order_relaxed) == sgemm::kClosed) {
    errno = ECONNRESET;
    return -1;
  }
  const ssize_t n = sgemm::next_recvmsg(fd, msg, flags);
  if (n <= 0 || !sgemm::tracked(fd) || (flags & (MSG_PEEK | MSG_ERRQUEUE))) return n;
  sgemm::FdState& s = g_fds[fd];
  const uint8_t stage = s.stage.load(std::memory_order_relaxed);
  if (stage == sgemm::kOpaque) {
    sgemm::SpinLock lock(s.lock);
    sgemm::note_tls_read(s.peer);
    return n;
  }
  sgemm::forget_tls_read();
  if (stage != sgemm::kPreface && stage != sgemm::kFrames) return n;
  sockaddr_storage peer{};
  int open = 0, max_resets = 0, max_streams = 0;
  const sgemm::Http2Verdict v = sgemm::inspect_read(s, msg, std::size_t(n), &peer, &open, &max_resets, &max_streams);
  if (v == sgemm::Http2Verdict::kKeep) return n;
  // Counted toward the address's cool-down before the client can see the
  // close, so that its next connection is already held to the lower bounds.
  sgemm::closed_by_guard(peer);
  shutdown(fd, SHUT_RDWR);
  if (v == sgemm::Http2Verdict::kResets) {
    guard().closed.fetch_add(1, std::memory_order_relaxed);
    sgemm::guard_log(sgemm::reset_close_text(peer, max_resets));
  } else {
    guard().closed_for_streams.fetch_add(1, std::memory_order_relaxed);
    sgemm::guard_log(sgemm::streams_close_text(peer, open, max_streams));
  }
  errno = ECONNRESET;
  return -1;
}

extern "C" ssize_t sendmsg(int fd, const msghdr* msg, int flags) {
  const ssize_t n = sgemm::next_sendmsg(fd, msg, flags);
  if (n <= 0 || !sgemm::tracked(fd) || g_fds[fd].stage.load(std::memory_order_relaxed) != sgemm::kFrames) return n;
  sgemm::FdState& s = g_fds[fd];
  sgemm::SpinLock lock(s.lock);
  if (s.stage.load(std::memory_order_relaxed) != sgemm::kFrames) return n;
  std::size_t left = std::size_t(n);
  for (std::size_t i = 0; i < msg->msg_iovlen && left > 0; ++i) {
    const std::size_t k = std::min(left, msg->msg_iov[i].iov_len);
    s.h2.server_sent(static_cast<const uint8_t*>(msg->msg_iov[i].iov_base), k);
    left -= k;
  }
  return n;
}

extern "C" int close(int fd) {
  if (sgemm::tracked(fd) && g_fds[fd].stage.load(std::memory_order_relaxed) != sgemm::kIdle) {
    sgemm::SpinLock lock(g_fds[fd].lock);
    g_fds[fd].stage.store(sgemm::kIdle, std::memory_order_relaxed);
    g_fds[fd].h2.forget();
  }
  return sgemm::next_close(fd);
}
