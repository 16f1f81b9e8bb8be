#include "server/app/connection_guard.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <unordered_set>
#include <vector>

namespace sgemm {
namespace {

using Accept4Fn = int (*)(int, sockaddr*, socklen_t*, int);
using RecvmsgFn = ssize_t (*)(int, msghdr*, int);
using CloseFn = int (*)(int);
using SendmsgFn = ssize_t (*)(int, const msghdr*, int);

// The next definitions (libc's, or a sanitizer's interceptors), resolved when
// the program is loaded; a call made before that goes straight to the kernel.
Accept4Fn g_next_accept4 = nullptr;
RecvmsgFn g_next_recvmsg = nullptr;
CloseFn g_next_close = nullptr;
SendmsgFn g_next_sendmsg = nullptr;

__attribute__((constructor)) void resolve_next() {
  g_next_accept4 = reinterpret_cast<Accept4Fn>(dlsym(RTLD_NEXT, "accept4"));
  g_next_recvmsg = reinterpret_cast<RecvmsgFn>(dlsym(RTLD_NEXT, "recvmsg"));
  g_next_close = reinterpret_cast<CloseFn>(dlsym(RTLD_NEXT, "close"));
  g_next_sendmsg = reinterpret_cast<SendmsgFn>(dlsym(RTLD_NEXT, "sendmsg"));
}

int next_accept4(int fd, sockaddr* addr, socklen_t* len, int flags) {
  return g_next_accept4 ? g_next_accept4(fd, addr, len, flags) : int(syscall(SYS_accept4, fd, addr, len, flags));
}
ssize_t next_recvmsg(int fd, msghdr* msg, int flags) {
  return g_next_recvmsg ? g_next_recvmsg(fd, msg, flags) : syscall(SYS_recvmsg, fd, msg, flags);
}
int next_close(int fd) { return g_next_close ? g_next_close(fd) : int(syscall(SYS_close, fd)); }
ssize_t next_sendmsg(int fd, const msghdr* msg, int flags) {
  return g_next_sendmsg ? g_next_sendmsg(fd, msg, flags) : syscall(SYS_sendmsg, fd, msg, flags);
}

constexpr char kHttp2Preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
constexpr int kPrefaceBytes = sizeof kHttp2Preface - 1;
constexpr uint8_t kData = 0x0, kHeaders = 0x1, kRstStream = 0x3;
constexpr uint8_t kEndStream = 0x1;
// A connection from an address that is cooling down may reset this many times fewer streams.
constexpr int kCoolDownDivisor = 20;

enum Stage : uint8_t {
  kIdle = 0,     // not an accepted connection, or not HTTP/2 in the clear: not inspected
  kPreface = 1,  // accepted: its first bytes say whether it is plaintext HTTP/2
  kFrames = 2,   // reading frame headers
  kClosed = 3,   // closed by the guard: every read fails
};

// One accepted connection. `stage` is read without the lock (the fast path
// for connections not inspected); the rest is guarded by `lock`.
// Frame headers out of a byte stream that arrives in pieces.
struct FrameReader {
  uint8_t head[9] = {};
  int have = 0;
  uint32_t skip = 0;  // payload bytes of the current frame still to come

  // Calls on_frame(type, flags, stream id) for each frame header completed in [p, p + len).
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

struct FdState {
  std::atomic<uint8_t> stage{kIdle};
  std::atomic_flag lock;
  int matched = 0;  // preface bytes seen
  FrameReader in;   // what the client sends
  FrameReader out;  // what the server sends
  uint32_t last_client_stream = 0;
  std::unordered_set<uint32_t>* open = nullptr;  // the client's streams not yet ended (owned)
  int64_t window_start_ms = 0;
  int resets = 0;
  int max_resets = 0;  // this connection's bound: lower when its address is cooling down
  sockaddr_storage peer{};
};

// Descriptors past this are forwarded untouched (never inspected or counted).
constexpr int kTracked = 1 << 16;
FdState g_fds[kTracked];

class SpinLock {
 public:
  explicit SpinLock(std::atomic_flag& f) : f_(f) {
    while (f_.test_and_set(std::memory_order_acquire)) {
    }
  }
  ~SpinLock() { f_.clear(std::memory_order_release); }

 private:
  std::atomic_flag& f_;
};

struct CoolDown {
  sockaddr_storage address{};
  int closes = 0;
  int64_t first_close_ms = 0;
  int64_t refused_until_ms = 0;
};

struct Guard {
  std::atomic<bool> on{false};
  std::atomic<int> max_resets{0};
  std::atomic<int> max_streams{0};           // open HTTP/2 streams per connection before it is closed; 0 = not counted
  std::atomic<int> first_reserved{1 << 30};  // descriptors from here on are never handed out
  std::mutex mu;                             // guards what follows
  ConnectionGuardOptions options;
  int spare = -1;                 // kept open, closed to accept and drop a connection at EMFILE
  std::vector<CoolDown> cooling;  // addresses whose connections were closed for resets
  std::atomic<int> cooling_n{0};  // cooling.size(), read without the lock
  int64_t last_log_ms = -1000;    // the log says at most one line per second per kind...
  int64_t unlogged = 0;           // ... and how many it left out
  std::atomic<int64_t> dropped{0}, closed{0}, refused{0}, closed_for_streams{0};
};
// Never destroyed: gRPC's threads may still read and close connections while
// the process's static objects are being destroyed at exit.
Guard& guard() {
  static Guard* const g = new Guard();
  return *g;
}

int64_t now_ms() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return int64_t(t.tv_sec) * 1000 + t.tv_nsec / 1000000;
}

bool same_address(const sockaddr_storage& a, const sockaddr_storage& b) {
  if (a.ss_family != b.ss_family) return false;
  if (a.ss_family == AF_INET)
    return reinterpret_cast<const sockaddr_in&>(a).sin_addr.s_addr ==
           reinterpret_cast<const sockaddr_in&>(b).sin_addr.s_addr;
  if (a.ss_family == AF_INET6)
    return std::memcmp(&reinterpret_cast<const sockaddr_in6&>(a).sin6_addr,
                       &reinterpret_cast<const sockaddr_in6&>(b).sin6_addr, sizeof(in6_addr)) == 0;
  return false;  // Unix peers have no address to refuse: their connections are closed one by one
}

std::string address_text(const sockaddr_storage& a) {
  char buf[64] = "unix";
  if (a.ss_family == AF_INET) inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(a).sin_addr, buf, sizeof buf);
  if (a.ss_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(a).sin6_addr, buf, sizeof buf);
  return buf;
}

// A log line, at most one a second (the rest counted into the next one).
void log_line(const std::string& line) {
  std::function<void(const std::string&)> log;
  int64_t left_out = 0;
  {
    std::lock_guard lock(guard().mu);
    const int64_t now = now_ms();
    if (!guard().options.log || now - guard().last_log_ms < 1000) {
      ++guard().unlogged;
      return;
    }
    guard().last_log_ms = now;
    left_out = guard().unlogged;
    guard().unlogged = 0;
    log = guard().options.log;
  }
  log(left_out ? line + " (and " + std::to_string(left_out) + " such events not logged)" : line);
}

bool cooling_down(const sockaddr_storage& peer) {
  if (guard().cooling_n.load(std::memory_order_relaxed) == 0) return false;
  std::lock_guard lock(guard().mu);
  const int64_t now = now_ms();
  for (const CoolDown& c : guard().cooling)
    if (same_address(c.address, peer) && now < c.refused_until_ms) return true;
  return false;
}

// A connection from `peer` was closed for resets: counts toward its address's cool-down.
void closed_for_resets(const sockaddr_storage& peer) {
  std::lock_guard lock(guard().mu);
  const int64_t now = now_ms();
  const int64_t span = guard().options.cool_down.count();
  std::erase_if(guard().cooling,
                [&](const CoolDown& c) { return now >= c.refused_until_ms && now - c.first_close_ms >= span; });
  auto it = std::find_if(guard().cooling.begin(), guard().cooling.end(),
                         [&](const CoolDown& c) { return same_address(c.address, peer); });
  if (it == guard().cooling.end()) {
    if (peer.ss_family != AF_INET && peer.ss_family != AF_INET6) return;
    it = guard().cooling.insert(guard().cooling.end(), CoolDown{peer, 0, now, 0});
  }
  if (now - it->first_close_ms >= span) *it = CoolDown{peer, 0, now, 0};
  if (++it->closes >= guard().options.closes_before_cool_down) it->refused_until_ms = now + span;
  guard().cooling_n.store(int(guard().cooling.size()), std::memory_order_relaxed);
}

std::string reset_close_text(const sockaddr_storage& peer, int max_resets) {
  int closes = 0;
  int64_t cool_down_s = 0;
  {
    std::lock_guard lock(guard().mu);
    closes = guard().options.closes_before_cool_down;
    cool_down_s = guard().options.cool_down.count() / 1000;
  }
  return "connection from " + address_text(peer) + " reset more than " + std::to_string(max_resets) +
         " HTTP/2 streams within 1 s (rapid reset, --max-resets-per-second): closed; an address closed " +
         std::to_string(closes) + " times gets 1/" + std::to_string(kCoolDownDivisor) +
         " of the bound on its new connections for " + std::to_string(cool_down_s) + " s";
}

// EMFILE/ENFILE at accept: the spare descriptor makes room to take the
// waiting connection off the queue and close it. False when there was none.
bool drop_one_waiting(int listener) {
  std::lock_guard lock(guard().mu);
  if (guard().spare < 0) return false;
  next_close(guard().spare);
  const int c = next_accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  const int saved = errno;
  if (c >= 0) next_close(c);
  guard().spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
  errno = saved;
  return c >= 0;
}

// Why the guard closes a connection.
enum class Verdict { kKeep, kResets, kStreams };

void end_stream(FdState& s, uint32_t id) {
  if (s.open) s.open->erase(id);
}

// Parses what one read brought (the client's bytes).
Verdict inspect_in(FdState& s, const uint8_t* p, std::size_t len, int64_t now, int max_resets, int max_streams) {
  if (s.stage.load(std::memory_order_relaxed) == kPreface) {
    while (len > 0 && s.matched < kPrefaceBytes) {
      if (*p != uint8_t(kHttp2Preface[s.matched])) {
        s.stage.store(kIdle, std::memory_order_relaxed);  // TLS, or not HTTP/2: not ours to read
        return Verdict::kKeep;
      }
      ++p;
      --len;
      ++s.matched;
    }
    if (s.matched < kPrefaceBytes) return Verdict::kKeep;
    s.stage.store(kFrames, std::memory_order_relaxed);
  }
  Verdict v = Verdict::kKeep;
  s.in.read(p, len, [&](uint8_t type, uint8_t, uint32_t id) {
    if (type == kHeaders && id % 2 == 1 && id > s.last_client_stream) {  // a new stream
      s.last_client_stream = id;
      if (max_streams > 0) {
        if (!s.open) s.open = new std::unordered_set<uint32_t>();
        s.open->insert(id);
        if (int(s.open->size()) > max_streams) v = Verdict::kStreams;
      }
    } else if (type == kRstStream) {
      end_stream(s, id);
      if (max_resets > 0) {
        if (now - s.window_start_ms >= 1000) {
          s.window_start_ms = now;
          s.resets = 0;
        }
        if (++s.resets > max_resets) v = Verdict::kResets;
      }
    }
    return v == Verdict::kKeep;
  });
  return v;
}

// Follows what the server sends: the streams it ends.
void inspect_out(FdState& s, const uint8_t* p, std::size_t len) {
  s.out.read(p, len, [&](uint8_t type, uint8_t flags, uint32_t id) {
    if (type == kRstStream || ((type == kHeaders || type == kData) && (flags & kEndStream))) end_stream(s, id);
    return true;
  });
}

void forget(FdState& s) {
  delete s.open;
  s.open = nullptr;
}

}  // namespace

void install_connection_guard(ConnectionGuardOptions options) {
  rlimit r{};
  getrlimit(RLIMIT_NOFILE, &r);
  const int64_t limit = r.rlim_cur == RLIM_INFINITY ? (int64_t{1} << 30) : int64_t(r.rlim_cur);
  const int64_t reserve = std::max<int64_t>(options.reserve, limit / 16);
  {
    std::lock_guard lock(guard().mu);
    guard().options = std::move(options);
    if (guard().spare < 0) guard().spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
    guard().max_resets.store(guard().options.max_resets_per_second, std::memory_order_relaxed);
    guard().max_streams.store(guard().options.max_open_streams, std::memory_order_relaxed);
  }
  guard().first_reserved.store(int(std::clamp<int64_t>(limit - reserve, 16, int64_t{1} << 30)),
                               std::memory_order_relaxed);
  guard().on.store(true, std::memory_order_release);
}

ConnectionGuardCounts connection_guard_counts() {
  return {guard().dropped.load(), guard().closed.load(), guard().refused.load()};
}

}  // namespace sgemm

using sgemm::g_fds;
using sgemm::guard;

extern "C" int accept4(int listener, sockaddr* addr, socklen_t* addr_len, int flags) {
  if (!guard().on.load(std::memory_order_acquire)) return sgemm::next_accept4(listener, addr, addr_len, flags);
  for (;;) {
    sockaddr_storage peer{};
    socklen_t peer_len = sizeof peer;
    const int c = sgemm::next_accept4(listener, reinterpret_cast<sockaddr*>(&peer), &peer_len, flags);
    if (c < 0) {
      if ((errno == EMFILE || errno == ENFILE) && sgemm::drop_one_waiting(listener)) {
        guard().dropped.fetch_add(1, std::memory_order_relaxed);
        sgemm::log_line("out of descriptors (" + std::string(strerror(EMFILE)) +
                        "): a new connection was closed; the listener goes on");
        continue;
      }
      return -1;
    }
    if (c >= guard().first_reserved.load(std::memory_order_relaxed)) {
      sgemm::next_close(c);  // the reserve stays for the server's own work and the connections it serves
      guard().dropped.fetch_add(1, std::memory_order_relaxed);
      sgemm::log_line("descriptor reserve reached (descriptor " + std::to_string(c) +
                      " of the open-files limit): a new connection was closed; the listener goes on");
      continue;
    }
    int max_resets = guard().max_resets.load(std::memory_order_relaxed);
    if (max_resets > 0 && sgemm::cooling_down(peer)) {
      max_resets = std::max(1, max_resets / sgemm::kCoolDownDivisor);
      guard().refused.fetch_add(1, std::memory_order_relaxed);
    }
    if (c < sgemm::kTracked) {
      sgemm::FdState& s = g_fds[c];
      sgemm::SpinLock lock(s.lock);
      s.matched = 0;
      s.in = {};
      s.out = {};
      s.last_client_stream = 0;
      sgemm::forget(s);
      s.window_start_ms = 0;
      s.resets = 0;
      s.max_resets = max_resets;
      s.peer = peer;
      s.stage.store(sgemm::kPreface, std::memory_order_relaxed);
    }
    if (addr && addr_len) {
      std::memcpy(addr, &peer, std::min<std::size_t>(*addr_len, peer_len));
      *addr_len = peer_len;
    }
    return c;
  }
}

extern "C" ssize_t recvmsg(int fd, msghdr* msg, int flags) {
  if (fd >= 0 && fd < sgemm::kTracked && g_fds[fd].stage.load(std::memory_order_relaxed) == sgemm::kClosed) {
    errno = ECONNRESET;
    return -1;
  }
  const ssize_t n = sgemm::next_recvmsg(fd, msg, flags);
  if (n <= 0 || fd < 0 || fd >= sgemm::kTracked || (flags & (MSG_PEEK | MSG_ERRQUEUE))) return n;
  sgemm::FdState& s = g_fds[fd];
  const uint8_t stage = s.stage.load(std::memory_order_relaxed);
  if (stage != sgemm::kPreface && stage != sgemm::kFrames) return n;
  const int64_t now = sgemm::now_ms();
  const int max_streams = guard().max_streams.load(std::memory_order_relaxed);
  sgemm::Verdict v = sgemm::Verdict::kKeep;
  int max_resets = 0, open = 0;
  sockaddr_storage peer{};
  {
    sgemm::SpinLock lock(s.lock);
    max_resets = s.max_resets;
    std::size_t left = std::size_t(n);
    for (std::size_t i = 0; i < msg->msg_iovlen && left > 0 && v == sgemm::Verdict::kKeep; ++i) {
      const std::size_t k = std::min(left, msg->msg_iov[i].iov_len);
      v = sgemm::inspect_in(s, static_cast<const uint8_t*>(msg->msg_iov[i].iov_base), k, now, max_resets, max_streams);
      left -= k;
    }
    if (v != sgemm::Verdict::kKeep) {
      s.stage.store(sgemm::kClosed, std::memory_order_relaxed);
      peer = s.peer;
      open = s.open ? int(s.open->size()) : 0;
      sgemm::forget(s);
    }
  }
  if (v == sgemm::Verdict::kKeep) return n;
  shutdown(fd, SHUT_RDWR);
  if (v == sgemm::Verdict::kResets) {
    guard().closed.fetch_add(1, std::memory_order_relaxed);
    sgemm::closed_for_resets(peer);
    sgemm::log_line(sgemm::reset_close_text(peer, max_resets));
  } else {
    guard().closed_for_streams.fetch_add(1, std::memory_order_relaxed);
    sgemm::log_line("connection from " + sgemm::address_text(peer) + " opened " + std::to_string(open) +
                    " HTTP/2 streams at once, past twice --max-streams-per-connection (which it was told in "
                    "SETTINGS): closed");
  }
  errno = ECONNRESET;
  return -1;
}

extern "C" ssize_t sendmsg(int fd, const msghdr* msg, int flags) {
  const ssize_t n = sgemm::next_sendmsg(fd, msg, flags);
  if (n <= 0 || fd < 0 || fd >= sgemm::kTracked || g_fds[fd].stage.load(std::memory_order_relaxed) != sgemm::kFrames)
    return n;
  sgemm::FdState& s = g_fds[fd];
  sgemm::SpinLock lock(s.lock);
  if (s.stage.load(std::memory_order_relaxed) != sgemm::kFrames) return n;
  std::size_t left = std::size_t(n);
  for (std::size_t i = 0; i < msg->msg_iovlen && left > 0; ++i) {
    const std::size_t k = std::min(left, msg->msg_iov[i].iov_len);
    sgemm::inspect_out(s, static_cast<const uint8_t*>(msg->msg_iov[i].iov_base), k);
    left -= k;
  }
  return n;
}

extern "C" int close(int fd) {
  if (fd >= 0 && fd < sgemm::kTracked && g_fds[fd].stage.load(std::memory_order_relaxed) != sgemm::kIdle) {
    sgemm::SpinLock lock(g_fds[fd].lock);
    g_fds[fd].stage.store(sgemm::kIdle, std::memory_order_relaxed);
    sgemm::forget(g_fds[fd]);
  }
  return sgemm::next_close(fd);
}
