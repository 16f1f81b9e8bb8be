// The server's Unix-domain socket (--listen unix:PATH) and the table of its
// connections, which is how a region RPC learns who its caller is.
//
// gRPC 1.51 does not expose a connection's peer credentials, so the server
// accepts the Unix socket itself: UnixListener accepts, reads SO_PEERCRED
// from the new descriptor, records it in the ConnectionTable, and hands the
// descriptor to gRPC (grpc::AddInsecureChannelFromFd, done by the `adopt`
// callback main() gives). gRPC names such a connection's peer "fd:N" (N the
// descriptor), which is what ServerContext::peer() returns for its calls;
// ConnectionTable::find() maps that back to the credentials. TCP peers read
// "ipv4:..."/"ipv6:..." and are never found.
//
// Closing: the table keeps a dup() of each descriptor and polls the dups for
// POLLRDHUP/POLLHUP on one thread. When the client's end closes (exit, crash,
// kill -9: the kernel closes its socket), the entry goes and `on_closed(id)`
// runs (the region registry drops that connection's registrations). A new
// connection that gets the same descriptor number replaces the old entry
// first (dropping the old connection's registrations), so "fd:N" always
// resolves to the peer now behind N. A request of the old connection that is
// still running holds its regions by reference, not by name, and finishes.
//
// Threads: find() from any thread; the watcher thread runs on_closed; the
// listener's accept thread runs adopt.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "common/status.h"
#include "server/service/region_registry.h"

namespace sgemm {

class ConnectionTable {
 public:
  explicit ConnectionTable(std::function<void(uint64_t)> on_closed);
  ~ConnectionTable();  // stops the watcher; runs on_closed for the connections still open

  // Records the accepted descriptor `fd` with its peer's credentials; returns
  // the connection's id (never 0).
  StatusOr<uint64_t> add(int fd, const PeerCredentials& cred);
  // The caller behind a gRPC peer string ("fd:N"); unix_socket false for others.
  RegionCaller find(const std::string& peer) const;
  // Shuts the connection behind a gRPC peer string ("fd:N") down (our
  // duplicate of its descriptor: gRPC sees end-of-file and ends it); false
  // when the peer is not one of ours.
  bool shutdown(const std::string& peer) const;
  int size() const;

 private:
  struct Entry {
    uint64_t id = 0;
    int watch_fd = -1;  // our dup of the connection's descriptor
    PeerCredentials cred;
  };
  void watch();

  std::function<void(uint64_t)> on_closed_;
  mutable std::mutex mu_;
  std::map<int, Entry> by_fd_;  // guarded by mu_: gRPC's descriptor number -> the connection
  uint64_t next_id_ = 1;        // guarded by mu_
  int wake_[2] = {-1, -1};      // a pipe that wakes the watcher when the set changes
  std::atomic<bool> stopping_{false};
  std::thread watcher_;
};

class UnixListener {
 public:
  // Binds and listens on `path` (a stale socket file there is replaced),
  // mode 0666: anyone may connect; what they may touch is decided per region.
  static StatusOr<std::unique_ptr<UnixListener>> listen(const std::string& path);
  ~UnixListener();  // stops accepting, removes the socket file

  // Accepts on a thread: each connection's credentials go to `table`, then
  // `adopt(fd)` gives the descriptor to gRPC (which owns it from then on).
  void start(ConnectionTable& table, std::function<void(int fd)> adopt);
  void stop();
  const std::string& path() const { return path_; }

 private:
  UnixListener(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  void accept_loop();

  std::string path_;
  int fd_ = -1;
  int wake_[2] = {-1, -1};
  ConnectionTable* table_ = nullptr;
  std::function<void(int)> adopt_;
  std::thread thread_;
};

}  // namespace sgemm
