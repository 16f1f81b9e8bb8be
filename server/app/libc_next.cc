#include "server/app/libc_next.h"

#include <dlfcn.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace sgemm {
namespace {

using Accept4Fn = int (*)(int, sockaddr*, socklen_t*, int);
using RecvmsgFn = ssize_t (*)(int, msghdr*, int);
using SendmsgFn = ssize_t (*)(int, const msghdr*, int);
using CloseFn = int (*)(int);

Accept4Fn g_accept4 = nullptr;
RecvmsgFn g_recvmsg = nullptr;
SendmsgFn g_sendmsg = nullptr;
CloseFn g_close = nullptr;

__attribute__((constructor)) void resolve_next() {
  g_accept4 = reinterpret_cast<Accept4Fn>(dlsym(RTLD_NEXT, "accept4"));
  g_recvmsg = reinterpret_cast<RecvmsgFn>(dlsym(RTLD_NEXT, "recvmsg"));
  g_sendmsg = reinterpret_cast<SendmsgFn>(dlsym(RTLD_NEXT, "sendmsg"));
  g_close = reinterpret_cast<CloseFn>(dlsym(RTLD_NEXT, "close"));
}

}  // namespace

int next_accept4(int fd, sockaddr* addr, socklen_t* len, int flags) {
  return g_accept4 ? g_accept4(fd, addr, len, flags) : int(syscall(SYS_accept4, fd, addr, len, flags));
}
ssize_t next_recvmsg(int fd, msghdr* msg, int flags) {
  return g_recvmsg ? g_recvmsg(fd, msg, flags) : syscall(SYS_recvmsg, fd, msg, flags);
}
ssize_t next_sendmsg(int fd, const msghdr* msg, int flags) {
  return g_sendmsg ? g_sendmsg(fd, msg, flags) : syscall(SYS_sendmsg, fd, msg, flags);
}
int next_close(int fd) { return g_close ? g_close(fd) : int(syscall(SYS_close, fd)); }

}  // namespace sgemm
