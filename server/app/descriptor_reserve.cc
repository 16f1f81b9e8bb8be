#include "server/app/descriptor_reserve.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "server/app/guard_state.h"
#include "server/app/libc_next.h"

namespace sgemm {
namespace {

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

}  // namespace

void set_descriptor_reserve(int reserve) {
  rlimit r{};
  getrlimit(RLIMIT_NOFILE, &r);
  const int64_t limit = r.rlim_cur == RLIM_INFINITY ? (int64_t{1} << 30) : int64_t(r.rlim_cur);
  const int64_t keep = std::max<int64_t>(reserve, limit / 16);
  if (guard().spare < 0) guard().spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
  guard().first_reserved.store(int(std::clamp<int64_t>(limit - keep, 16, int64_t{1} << 30)), std::memory_order_relaxed);
}

int accept_within_reserve(int listener, sockaddr_storage* peer, socklen_t* peer_len, int flags) {
  for (;;) {
    *peer_len = sizeof *peer;
    const int c = next_accept4(listener, reinterpret_cast<sockaddr*>(peer), peer_len, flags);
    if (c < 0) {
      if ((errno == EMFILE || errno == ENFILE) && drop_one_waiting(listener)) {
        guard().dropped.fetch_add(1, std::memory_order_relaxed);
        guard_log("out of descriptors (" + std::string(strerror(EMFILE)) +
                  "): a new connection was closed; the listener goes on");
        continue;
      }
      return -1;
    }
    if (c >= guard().first_reserved.load(std::memory_order_relaxed)) {
      next_close(c);  // the reserve stays for the server's own work and the connections it serves
      guard().dropped.fetch_add(1, std::memory_order_relaxed);
      guard_log("descriptor reserve reached (descriptor " + std::to_string(c) +
                " of the open-files limit): a new connection was closed; the listener goes on");
      continue;
    }
    return c;
  }
}

}  // namespace sgemm
