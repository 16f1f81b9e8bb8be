// The Prometheus endpoint as the tests read it: a plain HTTP GET of /metrics
// over loopback and the exposition format's samples (metrics_port() in
// server_process.h finds the port a server logged).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <sstream>
#include <string>

namespace sgemm::testing {

// GET /metrics on 127.0.0.1:port; the body, or "" on failure.
inline std::string scrape(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    const std::string req = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (write(fd, req.data(), req.size()) == ssize_t(req.size())) {
      char buf[65536];
      for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) out.append(buf, size_t(n));
    }
  }
  close(fd);
  const auto body = out.find("\r\n\r\n");
  return body == std::string::npos ? "" : out.substr(body + 4);
}

// Samples of the exposition format: "name{labels}" -> value.
inline std::map<std::string, double> samples(const std::string& text) {
  std::map<std::string, double> m;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const auto sp = line.rfind(' ');
    if (sp != std::string::npos) m[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
  }
  return m;
}

// The sample's value, 0 when absent (a counter not yet moved).
inline double value(const std::map<std::string, double>& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? 0.0 : it->second;
}

// The first sample whose name starts with `prefix` ("" if none).
inline std::string first_key(const std::map<std::string, double>& m, const std::string& prefix) {
  for (const auto& [k, v] : m)
    if (k.rfind(prefix, 0) == 0) return k;
  return "";
}

}  // namespace sgemm::testing
