// The transport guard on TLS connections (connection_guard.h).
//
// A TLS connection's bytes are ciphertext at recvmsg(), so the guard reads
// them where gRPC 1.51's TLS (its TSI frame protector over the system
// OpenSSL, libssl.so.3) turns them into HTTP/2 and back: sgemm-server defines
// SSL_read() and SSL_write() itself, forwarding to libssl's, and inspects the
// plaintext with the same Http2Inspector as a plaintext connection: the
// client's RST_STREAM frames a second (rapid reset) and the streams it holds
// open (health Watch and reflection included). A connection over either
// bound is closed: that SSL_read() and every later one fails, so gRPC's
// frame protector reports a protocol failure and the transport drops the
// connection. SSL_free() forgets it.
//
// Which SSL objects: every one whose first plaintext from the peer is the
// HTTP/2 client preface, i.e. the server side of connections gRPC accepted
// (the service's and the cluster listener's); the process's own TLS clients
// (a cluster member's connection to its coordinator) read the server's
// SETTINGS first and are left alone.
//
// What it cannot do: tell addresses apart. An SSL object carries no
// descriptor (gRPC feeds it through memory BIOs), so a closed TLS connection
// does not cool its address down; each new one costs the client a full
// handshake, and gets the whole bound again.
//
// Threads: the hooks run on gRPC's threads; a table from SSL object to its
// state under one mutex, each state under its own spin lock (gRPC reads and
// writes one connection's protector under its own lock anyway).
#pragma once

namespace sgemm {

// Resolves libssl's SSL_read, SSL_write and SSL_free and turns inspection on
// (guard_state.h's options decide the bounds). Called by install_connection_guard().
void enable_tls_inspection();

}  // namespace sgemm
