#include "server/service/peer_socket.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdlib>
#include <cstring>

namespace sgemm {

namespace {

// gRPC writes an IPv6 peer's brackets URI-escaped in some versions.
std::string unescape_brackets(std::string s) {
  for (const auto& [from, to] : {std::pair<const char*, const char*>{"%5B", "["}, {"%5D", "]"}})
    for (auto at = s.find(from); at != std::string::npos; at = s.find(from)) s.replace(at, 3, to);
  return s;
}

bool parse_peer(const std::string& peer, sockaddr_storage* out) {
  std::memset(out, 0, sizeof *out);
  const auto colon = peer.rfind(':');
  if (colon == std::string::npos) return false;
  const int port = std::atoi(peer.c_str() + colon + 1);
  if (port <= 0 || port > 65535) return false;
  if (peer.rfind("ipv4:", 0) == 0) {
    auto* a = reinterpret_cast<sockaddr_in*>(out);
    a->sin_family = AF_INET;
    a->sin_port = htons(uint16_t(port));
    return inet_pton(AF_INET, peer.substr(5, colon - 5).c_str(), &a->sin_addr) == 1;
  }
  if (peer.rfind("ipv6:", 0) == 0) {
    std::string host = unescape_brackets(peer.substr(5, colon - 5));
    if (host.size() < 2 || host.front() != '[' || host.back() != ']') return false;
    host = host.substr(1, host.size() - 2);
    if (const auto zone = host.find('%'); zone != std::string::npos) host.resize(zone);
    auto* a = reinterpret_cast<sockaddr_in6*>(out);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(uint16_t(port));
    return inet_pton(AF_INET6, host.c_str(), &a->sin6_addr) == 1;
  }
  return false;
}

bool same_peer(const sockaddr_storage& want, const sockaddr_storage& got) {
  if (want.ss_family != got.ss_family) return false;
  if (want.ss_family == AF_INET) {
    const auto& w = reinterpret_cast<const sockaddr_in&>(want);
    const auto& g = reinterpret_cast<const sockaddr_in&>(got);
    return w.sin_port == g.sin_port && w.sin_addr.s_addr == g.sin_addr.s_addr;
  }
  const auto& w = reinterpret_cast<const sockaddr_in6&>(want);
  const auto& g = reinterpret_cast<const sockaddr_in6&>(got);
  return w.sin6_port == g.sin6_port && std::memcmp(&w.sin6_addr, &g.sin6_addr, sizeof w.sin6_addr) == 0;
}

}  // namespace

bool shutdown_peer_socket(const std::string& grpc_peer) {
  sockaddr_storage want{};
  if (!parse_peer(unescape_brackets(grpc_peer), &want)) return false;
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return false;
  bool found = false;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    sockaddr_storage got{};
    socklen_t len = sizeof got;
    if (getpeername(int(fd), reinterpret_cast<sockaddr*>(&got), &len) != 0 || !same_peer(want, got)) continue;
    shutdown(int(fd), SHUT_RDWR);
    found = true;
    break;
  }
  closedir(dir);
  return found;
}

}  // namespace sgemm
