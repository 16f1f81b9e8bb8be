#include "server/app/guard_state.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <time.h>

#include <algorithm>
#include <cstring>
#include <functional>

namespace sgemm {

GuardState& guard() {
  static GuardState* const g = new GuardState();
  return *g;
}

int64_t now_ms() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return int64_t(t.tv_sec) * 1000 + t.tv_nsec / 1000000;
}

namespace {

bool same_address(const sockaddr_storage& a, const sockaddr_storage& b) {
  if (a.ss_family != b.ss_family) return false;
  if (a.ss_family == AF_INET)
    return reinterpret_cast<const sockaddr_in&>(a).sin_addr.s_addr ==
           reinterpret_cast<const sockaddr_in&>(b).sin_addr.s_addr;
  if (a.ss_family == AF_INET6)
    return std::memcmp(&reinterpret_cast<const sockaddr_in6&>(a).sin6_addr,
                       &reinterpret_cast<const sockaddr_in6&>(b).sin6_addr, sizeof(in6_addr)) == 0;
  return false;
}

}  // namespace

std::string address_text(const sockaddr_storage& a) {
  char buf[64] = "unix";
  if (a.ss_family == AF_INET) inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(a).sin_addr, buf, sizeof buf);
  if (a.ss_family == AF_INET6) {
    const in6_addr& v6 = reinterpret_cast<const sockaddr_in6&>(a).sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&v6))  // an IPv4 client of a dual-stack listener: written as IPv4
      inet_ntop(AF_INET, &v6.s6_addr[12], buf, sizeof buf);
    else
      inet_ntop(AF_INET6, &v6, buf, sizeof buf);
  }
  return buf;
}

void guard_log(const std::string& line) {
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

namespace {
thread_local sockaddr_storage t_tls_peer{};
}  // namespace

void note_tls_read(const sockaddr_storage& peer) { t_tls_peer = peer; }
void forget_tls_read() { t_tls_peer.ss_family = AF_UNSPEC; }
sockaddr_storage last_tls_read() { return t_tls_peer; }

bool cooling_down(const sockaddr_storage& peer) {
  if (guard().cooling_n.load(std::memory_order_relaxed) == 0) return false;
  std::lock_guard lock(guard().mu);
  const int64_t now = now_ms();
  for (const CoolDown& c : guard().cooling)
    if (same_address(c.address, peer) && now < c.refused_until_ms) return true;
  return false;
}

void closed_by_guard(const sockaddr_storage& peer) {
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

namespace {

std::string cool_down_text() {
  int closes = 0;
  int64_t cool_down_s = 0;
  {
    std::lock_guard lock(guard().mu);
    closes = guard().options.closes_before_cool_down;
    cool_down_s = guard().options.cool_down.count() / 1000;
  }
  return "an address whose connections were closed " + std::to_string(closes) + " times within " +
         std::to_string(cool_down_s) + " s gets 1/" + std::to_string(kCoolDownDivisor) +
         " of the bounds on its new connections for " + std::to_string(cool_down_s) + " s";
}

}  // namespace

namespace {
std::string connection_text(const sockaddr_storage& peer, bool tls) {
  return std::string(tls ? "TLS connection from " : "connection from ") + address_text(peer);
}
}  // namespace

std::string reset_close_text(const sockaddr_storage& peer, int max_resets, bool tls) {
  return connection_text(peer, tls) + " reset more than " + std::to_string(max_resets) +
         " HTTP/2 streams within 1 s (rapid reset, --max-resets-per-second): closed; " + cool_down_text();
}

std::string streams_close_text(const sockaddr_storage& peer, int open, int max_streams, bool tls) {
  return connection_text(peer, tls) + " opened " + std::to_string(open) + " HTTP/2 streams at once, past " +
         std::to_string(max_streams) + " (twice --max-streams-per-connection, which it was told in SETTINGS, or 1/" +
         std::to_string(kCoolDownDivisor) + " of that while its address cools down): closed; " + cool_down_text();
}

}  // namespace sgemm
