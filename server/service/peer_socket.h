// Closing one TCP connection that gRPC owns, found by its peer string.
//
// gRPC 1.51 gives a server no handle on a connection: a call knows only its
// peer ("ipv4:10.0.0.5:41234"). To close a connection that abuses the server
// (StreamAdmission: HTTP/2 rapid reset) the service finds the socket among
// the process's descriptors whose remote end is that address and port, and
// shuts it down (shutdown(2), never close(2): the descriptor stays gRPC's,
// which sees end-of-file, ends the connection's calls and closes it).
// Unix-socket connections ("fd:N") are the ConnectionTable's
// (unix_connections.h), which keeps its own duplicate of each.
//
// Threads: any; it reads /proc/self/fd and takes no lock.
#pragma once

#include <string>

namespace sgemm {

// Shuts down the socket whose peer is `peer` (gRPC's "ipv4:A.B.C.D:PORT" or
// "ipv6:[ADDR]:PORT"); false when the string is not one or no socket has
// that peer (the connection has gone already).
bool shutdown_peer_socket(const std::string& peer);

}  // namespace sgemm
