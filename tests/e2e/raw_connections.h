// Raw TCP connections for the transport attacks (docs/security.md), shared by
// the e2e tests and sgemm-attack-bench: connections from a chosen loopback
// address that send nothing (descriptor exhaustion), and metrics connections
// that send a request one byte at a time (slowloris). No GoogleTest here.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace sgemm::testing {

// A TCP connection to 127.0.0.1:`port` from `source` (a loopback address the
// server tells apart, e.g. "127.0.0.2"; nullptr: the system's choice); -1
// when it fails.
inline int connect_tcp(int port, const char* source = nullptr) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in from{}, to{};
  from.sin_family = to.sin_family = AF_INET;
  to.sin_port = htons(uint16_t(port));
  inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  if (source) inet_pton(AF_INET, source, &from.sin_addr);
  if ((source && bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0) ||
      connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Up to `n` connections from `source` that send nothing, held open (the
// caller closes them).
inline std::vector<int> hold_connections(int port, int n, const char* source = "127.0.0.2") {
  std::vector<int> fds;
  for (int i = 0; i < n; ++i)
    if (const int fd = connect_tcp(port, source); fd >= 0) fds.push_back(fd);
  return fds;
}

// Slowloris against the metrics endpoint on `port`: `connections` connections,
// each sending one byte of a request every 200 ms, a connection the server
// closed opened anew, until `stop`. Returns the bytes sent.
inline int64_t metrics_slowloris(int port, int connections, const std::atomic<bool>& stop) {
  const std::string req = "GET /metrics HTTP/1.0\r\n";
  std::vector<int> fds;
  int64_t bytes = 0;
  for (std::size_t sent = 0; !stop; ++sent) {
    while (int(fds.size()) < connections) fds.push_back(connect_tcp(port));
    for (int& fd : fds) {
      if (fd >= 0 && send(fd, req.data() + sent % req.size(), 1, MSG_NOSIGNAL) == 1) {
        ++bytes;
        continue;
      }
      if (fd >= 0) close(fd);
      fd = connect_tcp(port);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  for (int fd : fds)
    if (fd >= 0) close(fd);
  return bytes;
}

}  // namespace sgemm::testing
