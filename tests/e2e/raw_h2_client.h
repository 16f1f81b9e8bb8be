// A raw HTTP/2 client for the transport attack tests: it speaks just enough
// HTTP/2 to open gRPC streams (HEADERS, no DATA) and reset them (RST_STREAM),
// and never acknowledges the server's SETTINGS, so gRPC 1.51 does not hold it
// to SETTINGS_MAX_CONCURRENT_STREAMS. It connects from a loopback address of
// its own (127.0.0.2, ...), so the server tells it apart from the test's
// normal client on 127.0.0.1. What the server sends is read, its frames
// noted (the streams it reset, the DATA it sent) and dropped. It can also
// send a unary call whose answer it never takes (open_unary): it never sends
// WINDOW_UPDATE, so the server may send no more than HTTP/2's initial window.
// connect_tls() speaks the same over TLS (ALPN h2, the server's certificate
// not verified: the attacker needs no trust).
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>

namespace sgemm::testing {

class RawH2Client {
 public:
  RawH2Client() = default;
  RawH2Client(const RawH2Client&) = delete;
  RawH2Client& operator=(const RawH2Client&) = delete;
  ~RawH2Client() { close_now(); }

  // Connects to 127.0.0.1:`port` from `source` and sends the connection
  // preface and an empty SETTINGS frame. False when the server is not there.
  bool connect(int port, const char* source) { return open(port, source, false); }
  // The same over TLS.
  bool connect_tls(int port, const char* source) { return open(port, source, true); }

 private:
  // An OpenSSL client context for every TLS connection of the process.
  static SSL_CTX* tls_context() {
    static SSL_CTX* const ctx = [] {
      OPENSSL_init_ssl(OPENSSL_INIT_NO_ATEXIT, nullptr);  // gRPC's threads may still use OpenSSL at exit
      signal(SIGPIPE, SIG_IGN);  // OpenSSL writes with write(): a connection the server closed must not end the test
      SSL_CTX* c = SSL_CTX_new(TLS_client_method());
      SSL_CTX_set_verify(c, SSL_VERIFY_NONE, nullptr);
      static const unsigned char kH2[] = {2, 'h', '2'};
      SSL_CTX_set_alpn_protos(c, kH2, sizeof kH2);
      SSL_CTX_set_mode(c, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
      return c;
    }();
    return ctx;
  }

  bool open(int port, const char* source, bool tls) {
    close_now();
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) return false;
    sockaddr_in from{};
    from.sin_family = AF_INET;
    inet_pton(AF_INET, source, &from.sin_addr);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(uint16_t(port));
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    const int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    const timeval t{2, 0};  // a write the server never takes fails instead of hanging the test
    setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &t, sizeof t);
    if (bind(fd_, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0 ||
        ::connect(fd_, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
      close_now();
      return false;
    }
    if (tls) {
      ssl_ = SSL_new(tls_context());
      SSL_set_fd(ssl_, fd_);
      if (SSL_connect(ssl_) != 1) {
        close_now();
        return false;
      }
      fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK);  // reads and writes wait in poll()
    }
    next_id_ = 1;
    in_.clear();
    resets_.clear();
    data_bytes_.clear();
    headers_.clear();
    std::string out = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    frame(&out, 0x4, 0, 0, "");  // SETTINGS, empty; the server's are never acknowledged
    return send_all(out);
  }

 public:
  // Opens `n` streams on `path` (HEADERS with END_HEADERS) and, with
  // `reset`, resets each at once (RST_STREAM CANCEL), in one write. With
  // `empty_message`, each stream carries one empty gRPC message (a health
  // Watch request) and stays open. False once the connection is gone.
  bool open_streams(const std::string& path, int n, bool reset, bool empty_message = false) {
    const std::string block = header_block(path);
    std::string out;
    for (int i = 0; i < n; ++i) {
      const uint32_t id = next_id_;
      next_id_ += 2;
      frame(&out, 0x1, 0x4, id, block);
      if (empty_message) frame(&out, 0x0, 0, id, std::string(5, '\0'));
      if (reset) frame(&out, 0x3, 0, id, std::string("\0\0\0\x8", 4));  // CANCEL
    }
    return send_all(out) && !closed_by_server();
  }

  // Opens one stream on `path` carrying `message` (a serialized protobuf) as
  // its one gRPC message, as a unary call's client does: HEADERS, then DATA
  // that ends the stream. The message must fit HTTP/2's initial window
  // (65,535 bytes), which the server grants before its own SETTINGS. The
  // answer is never taken: no WINDOW_UPDATE is sent. Returns the stream's id;
  // 0 once the connection is gone.
  uint32_t open_unary(const std::string& path, const std::string& message) {
    const uint32_t id = next_id_;
    next_id_ += 2;
    std::string grpc_message(5, '\0');  // uncompressed, then the length (big-endian)
    const uint32_t len = uint32_t(message.size());
    for (int i = 0; i < 4; ++i) grpc_message[std::size_t(1 + i)] = char(len >> (24 - 8 * i));
    grpc_message += message;
    data_bytes_[id] = 0;  // its frames are noted from now on
    std::string out;
    frame(&out, 0x1, 0x4, id, header_block(path));  // END_HEADERS
    constexpr std::size_t kMaxFrame = 16384;        // SETTINGS_MAX_FRAME_SIZE's initial value
    for (std::size_t at = 0; at < grpc_message.size(); at += kMaxFrame) {
      const bool last = at + kMaxFrame >= grpc_message.size();
      frame(&out, 0x0, last ? 0x1 : 0x0, id, grpc_message.substr(at, kMaxFrame));  // END_STREAM on the last
    }
    return send_all(out) && !closed_by_server() ? id : 0;
  }

  // Waits up to `ms` for the server to reset `stream` (RST_STREAM): its error
  // code (0: NO_ERROR, 8: CANCEL, ...), or -1 when it did not (or closed the
  // connection).
  int64_t wait_reset(uint32_t stream, int ms) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    for (;;) {
      const bool closed = closed_by_server();
      if (auto it = resets_.find(stream); it != resets_.end()) return it->second;
      if (closed || std::chrono::steady_clock::now() >= give_up) return -1;
      pollfd p{fd_, POLLIN | POLLRDHUP, 0};
      poll(&p, 1, 10);
    }
  }
  // The header blocks (HPACK) the server sent on `stream`, as read so far.
  const std::string& headers(uint32_t stream) { return headers_[stream]; }
  // Bytes of DATA payload the server sent on `stream`, as read so far.
  int64_t data_bytes(uint32_t stream) const {
    const auto it = data_bytes_.find(stream);
    return it == data_bytes_.end() ? 0 : it->second;
  }

  // Reads and drops what the server sent; true once it closed the connection.
  bool closed_by_server() {
    if (fd_ < 0) return true;
    char buf[16384];
    if (ssl_) {
      for (;;) {
        ERR_clear_error();  // SSL_get_error reads the thread's queue: another connection's error is not ours
        const int n = SSL_read(ssl_, buf, sizeof buf);
        if (n > 0) {
          note_frames(buf, std::size_t(n));
          continue;
        }
        const int e = SSL_get_error(ssl_, n);
        return e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE;
      }
    }
    for (;;) {
      const ssize_t n = recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) {
        note_frames(buf, std::size_t(n));
        continue;
      }
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return true;
      return false;
    }
  }

  // Waits up to `ms` for the server to close the connection.
  bool wait_closed(int ms) {
    for (int waited = 0; waited < ms; waited += 10) {
      if (closed_by_server()) return true;
      pollfd p{fd_, POLLIN | POLLRDHUP, 0};
      poll(&p, 1, 10);
    }
    return closed_by_server();
  }

  void close_now() {
    if (ssl_) SSL_free(ssl_);
    ssl_ = nullptr;
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }
  bool connected() const { return fd_ >= 0; }

 private:
  static void frame(std::string* out, uint8_t type, uint8_t flags, uint32_t stream, const std::string& payload) {
    const uint32_t len = uint32_t(payload.size());
    const char head[9] = {char(len >> 16),    char(len >> 8),     char(len),         char(type),         char(flags),
                          char(stream >> 24), char(stream >> 16), char(stream >> 8), char(stream & 0xff)};
    out->append(head, 9);
    out->append(payload);
  }
  // HPACK: every field a literal without indexing, with a new name, no Huffman.
  static std::string header_block(const std::string& path) {
    std::string b;
    const std::pair<std::string, std::string> fields[] = {{":method", "POST"},
                                                          {":scheme", "http"},
                                                          {":path", path},
                                                          {":authority", "127.0.0.1"},
                                                          {"content-type", "application/grpc"},
                                                          {"te", "trailers"}};
    for (const auto& [name, value] : fields) {
      b.push_back('\0');
      b.push_back(char(name.size()));
      b += name;
      b.push_back(char(value.size()));
      b += value;
    }
    return b;
  }
  bool send_all(const std::string& s) {
    if (ssl_) return send_all_tls(s);
    for (std::size_t sent = 0; sent < s.size();) {
      if (fd_ < 0) return false;
      const ssize_t n = send(fd_, s.data() + sent, s.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) {
        if (n < 0 && errno == EINTR) continue;
        return false;
      }
      sent += std::size_t(n);
      closed_by_server();  // keep the server's writes flowing: read what it sent so far
    }
    return true;
  }

  // SSL_write on the non-blocking socket: waits up to 2 s whenever TLS wants
  // the socket, as the plaintext path's SO_SNDTIMEO does.
  bool send_all_tls(const std::string& s) {
    for (std::size_t sent = 0; sent < s.size();) {
      if (fd_ < 0) return false;
      ERR_clear_error();
      const int n = SSL_write(ssl_, s.data() + sent, int(std::min<std::size_t>(s.size() - sent, 1 << 20)));
      if (n > 0) {
        sent += std::size_t(n);
        if (closed_by_server()) return false;
        continue;
      }
      const int e = SSL_get_error(ssl_, n);
      if (e != SSL_ERROR_WANT_WRITE && e != SSL_ERROR_WANT_READ) return false;
      if (e == SSL_ERROR_WANT_READ && closed_by_server()) return false;
      pollfd p{fd_, short(e == SSL_ERROR_WANT_WRITE ? POLLOUT : POLLIN), 0};
      if (poll(&p, 1, 2000) <= 0) return false;
    }
    return true;
  }

  // The server's frames as they arrive: the RST_STREAM and the DATA of a
  // stream open_unary() opened are noted (a storm's streams are not, so
  // that a long one costs no memory); the rest is dropped.
  void note_frames(const char* data, std::size_t n) {
    in_.append(data, n);
    std::size_t at = 0;
    while (in_.size() - at >= 9) {
      const auto* h = reinterpret_cast<const unsigned char*>(in_.data() + at);
      const std::size_t len = (std::size_t(h[0]) << 16) | (std::size_t(h[1]) << 8) | h[2];
      if (in_.size() - at < 9 + len) break;
      const uint32_t stream = ((uint32_t(h[5]) & 0x7f) << 24) | (uint32_t(h[6]) << 16) | (uint32_t(h[7]) << 8) | h[8];
      if (const auto it = data_bytes_.find(stream); it != data_bytes_.end()) {
        if (h[3] == 0x0) it->second += int64_t(len);
        if (h[3] == 0x1) headers_[stream].append(in_, at + 9, len);
        if (h[3] == 0x3 && len == 4)
          resets_[stream] = (int64_t(h[9]) << 24) | (int64_t(h[10]) << 16) | (int64_t(h[11]) << 8) | h[12];
      }
      at += 9 + len;
    }
    in_.erase(0, at);
  }

  int fd_ = -1;
  SSL* ssl_ = nullptr;
  uint32_t next_id_ = 1;
  std::string in_;                           // the start of a frame not yet read whole
  std::map<uint32_t, int64_t> data_bytes_;   // open_unary()'s streams -> DATA payload bytes
  std::map<uint32_t, int64_t> resets_;       // those of them reset -> the RST_STREAM's error code
  std::map<uint32_t, std::string> headers_;  // those of them -> their HEADERS' blocks, one after the other
};

}  // namespace sgemm::testing
