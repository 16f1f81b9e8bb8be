#include "server/app/tls_inspection.h"

#include <dlfcn.h>

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

// The state of `ssl`, made on its first read; nullptr while inspection is off.
TlsConn* conn_of(const ssl_st* ssl, bool make) {
  if (!g_inspecting.load(std::memory_order_acquire)) return nullptr;
  std::lock_guard lock(table().mu);
  auto it = table().conns.find(ssl);
  if (it != table().conns.end()) return it->second;
  if (!make) return nullptr;
  auto* c = new TlsConn();
  c->h2.start(guard().max_resets.load(std::memory_order_relaxed));
  table().conns.emplace(ssl, c);
  return c;
}

std::string tls_close_text(Http2Verdict v, int max_resets, int open) {
  if (v == Http2Verdict::kResets)
    return "a TLS connection reset more than " + std::to_string(max_resets) +
           " HTTP/2 streams within 1 s (rapid reset, --max-resets-per-second): closed";
  return "a TLS connection opened " + std::to_string(open) +
         " HTTP/2 streams at once, past twice --max-streams-per-connection (which it was told in SETTINGS): closed";
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
  int max_resets = 0, open = 0;
  {
    sgemm::SpinLock lock(c->lock);
    if (c->ignored) return n;
    v = c->h2.client_sent(static_cast<const uint8_t*>(buf), std::size_t(n), sgemm::now_ms(),
                          sgemm::guard().max_streams.load(std::memory_order_relaxed));
    if (!c->h2.inspecting()) {
      c->ignored = true;
      return n;
    }
    if (v == sgemm::Http2Verdict::kKeep) return n;
    max_resets = c->h2.max_resets();
    open = c->h2.open_streams();
    c->h2.forget();
    c->closed.store(true, std::memory_order_relaxed);
  }
  auto& counter = v == sgemm::Http2Verdict::kResets ? sgemm::guard().closed : sgemm::guard().closed_for_streams;
  counter.fetch_add(1, std::memory_order_relaxed);
  sgemm::guard_log(sgemm::tls_close_text(v, max_resets, open));
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
    c->h2.forget();
    delete c;
  }
  if (const auto next = sgemm::next_ssl(sgemm::g_ssl_free, "SSL_free")) next(ssl);
}
