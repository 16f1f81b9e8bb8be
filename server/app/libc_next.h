// The libc calls the transport guard defines itself (connection_guard.h),
// forwarded to the next definition: libc's, or a sanitizer's interceptor,
// resolved with dlsym(RTLD_NEXT) when the program is loaded; a call made
// before that goes straight to the kernel.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

namespace sgemm {

int next_accept4(int fd, sockaddr* addr, socklen_t* len, int flags);
ssize_t next_recvmsg(int fd, msghdr* msg, int flags);
ssize_t next_sendmsg(int fd, const msghdr* msg, int flags);
int next_close(int fd);

}  // namespace sgemm
