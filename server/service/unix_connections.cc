#include "server/service/unix_connections.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace sgemm {

namespace {

void wake(const int pipe_fds[2]) {
  const char b = 1;
  [[maybe_unused]] ssize_t n = write(pipe_fds[1], &b, 1);
}

void drain(int fd) {
  char buf[64];
  while (read(fd, buf, sizeof buf) > 0) {
  }
}

bool make_pipe(int fds[2]) { return pipe2(fds, O_CLOEXEC | O_NONBLOCK) == 0; }

}  // namespace

// ---- ConnectionTable --------------------------------------------------------

ConnectionTable::ConnectionTable(std::function<void(uint64_t)> on_closed) : on_closed_(std::move(on_closed)) {
  if (make_pipe(wake_)) watcher_ = std::thread([this] { watch(); });
}

ConnectionTable::~ConnectionTable() {
  stopping_ = true;
  if (watcher_.joinable()) {
    wake(wake_);
    watcher_.join();
  }
  std::map<int, Entry> left;
  {
    std::lock_guard lock(mu_);
    left.swap(by_fd_);
  }
  for (auto& [fd, e] : left) {
    close(e.watch_fd);
    if (on_closed_) on_closed_(e.id);
  }
  if (wake_[0] >= 0) close(wake_[0]);
  if (wake_[1] >= 0) close(wake_[1]);
}

StatusOr<uint64_t> ConnectionTable::add(int fd, const PeerCredentials& cred) {
  const int dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (dup_fd < 0) return Internal(std::string("dup of an accepted Unix connection: ") + strerror(errno));
  Entry old;
  uint64_t id;
  {
    std::lock_guard lock(mu_);
    if (auto it = by_fd_.find(fd); it != by_fd_.end()) old = it->second;  // gRPC closed it; we had not noticed yet
    id = next_id_++;
    by_fd_[fd] = Entry{id, dup_fd, cred};
  }
  if (old.id) {
    close(old.watch_fd);
    if (on_closed_) on_closed_(old.id);
  }
  wake(wake_);
  return id;
}

RegionCaller ConnectionTable::find(const std::string& peer) const {
  RegionCaller c;
  if (peer.rfind("fd:", 0) != 0) return c;
  int fd = -1;
  try {
    fd = std::stoi(peer.substr(3));
  } catch (const std::exception&) {
    return c;
  }
  std::lock_guard lock(mu_);
  auto it = by_fd_.find(fd);
  if (it == by_fd_.end()) return c;
  c.unix_socket = true;
  c.connection = it->second.id;
  c.cred = it->second.cred;
  return c;
}

bool ConnectionTable::shutdown(const std::string& peer) const {
  if (peer.rfind("fd:", 0) != 0) return false;
  const int fd = std::atoi(peer.c_str() + 3);
  std::lock_guard lock(mu_);
  auto it = by_fd_.find(fd);
  if (it == by_fd_.end()) return false;
  ::shutdown(it->second.watch_fd, SHUT_RDWR);
  return true;
}

int ConnectionTable::size() const {
  std::lock_guard lock(mu_);
  return int(by_fd_.size());
}

void ConnectionTable::watch() {
  std::vector<pollfd> fds;
  std::vector<std::pair<int, uint64_t>> keys;  // (gRPC's fd, id) per entry of fds after the first
  while (!stopping_) {
    fds.clear();
    keys.clear();
    fds.push_back({wake_[0], POLLIN, 0});
    {
      std::lock_guard lock(mu_);
      for (const auto& [fd, e] : by_fd_) {
        fds.push_back({e.watch_fd, POLLRDHUP, 0});  // POLLHUP and POLLERR are always reported
        keys.emplace_back(fd, e.id);
      }
    }
    const int n = poll(fds.data(), fds.size(), -1);
    if (n < 0 && errno != EINTR) break;
    if (fds[0].revents) drain(wake_[0]);
    for (std::size_t i = 1; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))) continue;
      const auto [fd, id] = keys[i - 1];
      int watch_fd = -1;
      {
        std::lock_guard lock(mu_);
        auto it = by_fd_.find(fd);
        if (it == by_fd_.end() || it->second.id != id) continue;  // replaced meanwhile
        watch_fd = it->second.watch_fd;
        by_fd_.erase(it);
      }
      close(watch_fd);
      if (on_closed_) on_closed_(id);
    }
  }
}

// ---- UnixListener -----------------------------------------------------------

StatusOr<std::unique_ptr<UnixListener>> UnixListener::listen(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path)
    return InvalidArgument("unix socket path '" + path + "' is empty or longer than " +
                           std::to_string(sizeof addr.sun_path - 1) + " bytes");
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) return InvalidArgument("'" + path + "' exists and is not a socket");
    unlink(path.c_str());  // a stale socket from an earlier run
  }
  // Non-blocking: the accept loop polls, and an accept that finds nothing (a
  // connection the descriptor guard dropped) must not block its thread.
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return Internal(std::string("socket(AF_UNIX): ") + strerror(errno));
  if (bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 || chmod(path.c_str(), 0666) != 0 ||
      ::listen(fd, 128) != 0) {
    const int e = errno;
    close(fd);
    return Unavailable("cannot listen on unix:" + path + ": " + strerror(e));
  }
  auto l = std::unique_ptr<UnixListener>(new UnixListener(path, fd));
  if (!make_pipe(l->wake_)) return Internal("pipe for the unix listener");
  return l;
}

UnixListener::~UnixListener() {
  stop();
  if (fd_ >= 0) close(fd_);
  if (wake_[0] >= 0) close(wake_[0]);
  if (wake_[1] >= 0) close(wake_[1]);
  unlink(path_.c_str());
}

void UnixListener::start(ConnectionTable& table, std::function<void(int)> adopt) {
  table_ = &table;
  adopt_ = std::move(adopt);
  thread_ = std::thread([this] { accept_loop(); });
}

void UnixListener::stop() {
  if (!thread_.joinable()) return;
  wake(wake_);
  thread_.join();
}

void UnixListener::accept_loop() {
  for (;;) {
    pollfd fds[2] = {{fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents) return;
    if (!(fds[0].revents & POLLIN)) continue;
    const int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (c < 0) continue;  // EAGAIN, ECONNABORTED: try again at the next readiness (EMFILE: connection_guard.h)
    ucred cred{};
    socklen_t len = sizeof cred;
    if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
        !table_->add(c, {cred.uid, cred.gid, cred.pid}).ok()) {
      close(c);
      continue;
    }
    adopt_(c);
  }
}

}  // namespace sgemm
