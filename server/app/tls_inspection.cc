#include "server/app/tls_inspection.h"

#include <dlfcn.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>
#include <unordered_map>

#include "server/app/guard_state.h"
#include "server/app/http2_inspector.h"

// OpenSSL's connection type, declared rather than included: the server does
// not link libssl itself; gRPC does.
struct ssl_st;

namespace sgemm {
namespace {

using SslReadFn = int (*)(ssl_st*, void*, int);
using SslWriteFn = int (*)(ssl_st*, const void*, int);
using SslFreeFn = void (*)(ssl_st*);

std::atomic<SslReadFn> g_ssl_read{nullptr};
std::atomic<SslWriteFn> g_ssl_write{nullptr};
std::atomic<SslFreeFn> g_ssl_free{nullptr};
std::atomic<bool> g_inspecting{false};

template <typename Fn>
Fn next_ssl(std::atomic<Fn>& slot, const char* name) {
  Fn f = slot.load(std::memory_order_acquire);
  if (!f) {
    f = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
    slot.store(f, std::memory_order_release);
  }
  return f;
}

// One TLS connection. Trivially destructible members only; freed at SSL_free.
struct TlsConn {
  std::atomic_flag lock;
  std::atomic<bool> closed{false};
  bool ignored = false;  // its peer did not open with the HTTP/2 preface: not ours
  Http2Inspector h2;
  sockaddr_storage peer{};  // AF_UNSPEC when unknown (then no address cools down)
  int max_streams = 0;      // this connection's bound on open streams: lower while its address cools down
};

struct TlsTable {
  std::mutex mu;
  std::unordered_map<const ssl_st*, TlsConn*> conns;  // guarded by mu
};
// Never destroyed, like the rest of the guard (guard_state.h).
TlsTable& table() {
  static TlsTable* const t = new TlsTable();
  return *t;
}

// The state of `ssl`, made on its first read (which follows the recvmsg() of
// its connection on this thread: guard_state.h, last_tls_read()) with its
// peer's address and the bounds for it, lower while that address cools down
// (connection_guard.h); nullptr while inspection is off.
TlsConn* conn_of(const ssl_st* ssl, bool make) {
  if (!g_inspecting.load(std::memory_order_acquire)) return nullptr;
  {
    std::lock_guard lock(table().mu);
    auto it = table().conns.find(ssl);
    if (it != table().conns.end()) return it->second;
  }
  if (!make) return nullptr;
  auto* c = new TlsConn();
  c->peer = last_tls_read();
  int max_resets = guard().max_resets.load(std::memory_order_relaxed);
  c->max_streams = guard().max_streams.load(std::memory_order_relaxed);
  if ((max_resets > 0 || c->max_streams > 0) && cooling_down(c->peer)) {
    if (max_resets > 0) max_resets = std::max(1, max_resets / kCoolDownDivisor);
    if (c->max_streams > 0) c->max_streams = std::max(1, c->max_streams / kCoolDownDivisor);
    guard().refused.fetch_add(1, std::memory_order_relaxed);
  }
  c->h2.start(max_resets);
  std::lock_guard lock(table().mu);
  auto [it, made] = table().conns.emplace(ssl, c);
  if (!made) {  // gRPC reads one connection on one thread at a time: not expected, but harmless
    c->h2.forget();
    delete c;
  }
  return it->second;
}

}  // namespace

void enable_tls_inspection() {
  next_ssl(g_ssl_read, "SSL_read");
  next_ssl(g_ssl_write, "SSL_write");
  next_ssl(g_ssl_free, "SSL_free");
  g_inspecting.store(true, std::memory_order_release);
}

}  // namespace sgemm

extern "C" int SSL_read(ssl_st* ssl, void* buf, int num) {
  const auto next = sgemm::next_ssl(sgemm::g_ssl_read, "SSL_read");
  if (!next) return -1;
  sgemm::TlsConn* c = sgemm::conn_of(ssl, true);
  if (c && c->closed.load(std::memory_order_relaxed)) return -1;
  const int n = next(ssl, buf, num);
  if (n <= 0 || !c) return n;
  sgemm::Http2Verdict v = sgemm::Http2Verdict::kKeep;
  int max_resets = 0, open = 0, max_streams = 0;
  sockaddr_storage peer{};
  {
    sgemm::SpinLock lock(c->lock);
    if (c->ignored) return n;
    v = c->h2.client_sent(static_cast<const uint8_t*>(buf), std::size_t(n), sgemm::now_ms(), c->max_streams);
    if (!c->h2.inspecting()) {
      c->ignored = true;
      return n;
    }
    if (v == sgemm::Http2Verdict::kKeep) return n;
    max_resets = c->h2.max_resets();
    open = c->h2.open_streams();
    max_streams = c->max_streams;
    peer = c->peer;
    c->h2.forget();
    c->closed.store(true, std::memory_order_relaxed);
  }
  // Counted toward the address's cool-down before the client can see the
  // close, as for a plaintext connection (connection_guard.cc).
  sgemm::closed_by_guard(peer);
  if (v == sgemm::Http2Verdict::kResets) {
    sgemm::guard().closed.fetch_add(1, std::memory_order_relaxed);
    sgemm::guard_log(sgemm::reset_close_text(peer, max_resets, true));
  } else {
    sgemm::guard().closed_for_streams.fetch_add(1, std::memory_order_relaxed);
    sgemm::guard_log(sgemm::streams_close_text(peer, open, max_streams, true));
  }
  return -1;  // SSL_get_error says SSL_ERROR_SYSCALL: gRPC fails the read and drops the connection
}

extern "C" int SSL_write(ssl_st* ssl, const void* buf, int num) {
  const auto next = sgemm::next_ssl(sgemm::g_ssl_write, "SSL_write");
  if (!next) return -1;
  const int n = next(ssl, buf, num);
  if (n <= 0) return n;
  if (sgemm::TlsConn* c = sgemm::conn_of(ssl, false)) {
    sgemm::SpinLock lock(c->lock);
    if (!c->ignored) c->h2.server_sent(static_cast<const uint8_t*>(buf), std::size_t(n));
  }
  return n;
}

extern "C" void SSL_free(ssl_st* ssl) {
  sgemm::TlsConn* c = nullptr;
  {
    std::lock_guard lock(sgemm::table().mu);
    auto it = sgemm::table().conns.find(ssl);
    if (it != sgemm::table().conns.end()) {
      c = it->second;
      sgemm::table().conns.erase(it);
    }
  }
  if (c) {
    {
      // The last SSL_read or SSL_write on another thread released this lock:
      // taking it orders their updates before the state goes.
      sgemm::SpinLock lock(c->lock);
      c->h2.forget();
    }
    delete c;
  }
  if (const auto next = sgemm::next_ssl(sgemm::g_ssl_free, "SSL_free")) next(ssl);
}
