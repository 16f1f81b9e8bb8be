// The descriptor reserve of the transport guard (connection_guard.h).
//
// gRPC 1.51's listener stops accepting for good after one failed accept4
// (EMFILE: "Failed accept4" once, then the port is dead while the process
// looks healthy). So the guard never hands out the last `reserve`
// descriptors below RLIMIT_NOFILE: a connection accepted into them is closed
// at once (the kernel gives the lowest free descriptor, so its number says
// how many are left). Should the server's own work take the reserve too, one
// spare descriptor is kept open: when accept4 fails with EMFILE or ENFILE,
// the spare is closed, the waiting connection accepted and closed, and the
// spare opened again. The caller (gRPC, or the Unix-socket listener) sees
// only connections it can serve, or EAGAIN; the listener lives.
//
// Threads: accept_within_reserve() runs on the listeners' threads; the spare
// is guarded by guard().mu.
#pragma once

#include <sys/socket.h>

namespace sgemm {

// Sets the reserve from the soft RLIMIT_NOFILE (max(reserve, limit / 16))
// and opens the spare descriptor. Called under guard().mu.
void set_descriptor_reserve(int reserve);

// accept4() that keeps the reserve: a descriptor below it, or -1 with errno
// from the listener (EAGAIN once the queue holds nothing it may serve).
int accept_within_reserve(int listener, sockaddr_storage* peer, socklen_t* peer_len, int flags);

}  // namespace sgemm
