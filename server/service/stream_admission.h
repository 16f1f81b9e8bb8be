// Which streams the service lets open (Multiply and PutMatrix, a striped
// request's every stream), counted by the service itself from the first
// moment gRPC hands it a call until the call is answered (docs/security.md).
//
// gRPC 1.51 enforces HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS (the
// --max-streams-per-connection channel argument) only once the client has
// acknowledged the server's SETTINGS frame; a client that never does opens
// as many streams as it likes. So every bound here is the service's own:
//
//   all callers together    --max-open-streams         UNAVAILABLE (retry with backoff)
//   one connection          --max-streams-per-connection  RESOURCE_EXHAUSTED
//   one client (a token)    its max_open_streams, or an even share of
//                           --max-open-streams (ClientAuth::stream_share)  PERMISSION_DENIED
//   one address (no token)  --max-streams-per-address  RESOURCE_EXHAUSTED
//
// Without tokens the service knows a caller only by where it connects from:
// its remote IP (TCP) or its Unix user (the socket's peer credentials). So no
// address holds every stream, and the others still get theirs.
//
// A refused stream still costs the server a call until its client ends it,
// and a client that never acknowledged SETTINGS may go on opening streams
// after each refusal. So a connection whose streams are refused more than
// --max-streams-per-connection times within a second is closed (its socket
// shut down: close_connection). HTTP/2 rapid reset (streams opened and reset
// at once, which gRPC 1.51 drops before any service sees them) is the
// transport guard's (server/app/connection_guard.h).
//
// Threads: every method is thread-safe (one mutex, held briefly; the
// close_connection callback and the log run with it released).
#pragma once

#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>

#include "common/status.h"
#include "server/service/client_auth.h"

namespace sgemm {

struct StreamLimits {
  int max_open_streams = 1024;   // all callers together (--max-open-streams)
  int max_per_connection = 256;  // one connection, whatever SETTINGS it acknowledged
  int max_per_address = 256;     // one remote address or Unix user without a token; 0 = no bound
  int max_stripes = 16;          // a client's share never goes below one striped request
};

// Where a call comes from.
struct StreamPeer {
  std::string connection;  // gRPC's peer string, one per connection ("ipv4:10.0.0.5:41234", "fd:17")
  std::string address;     // the caller without a token: "ipv4:10.0.0.5", or "uid:1000" on the Unix socket
};

class StreamAdmission {
 public:
  using Clock = std::chrono::steady_clock;

  // `auth` (may be null: no tokens) must outlive this. `close_connection(peer)`
  // shuts the connection with that gRPC peer string down; `log` writes one
  // line of the server's log.
  StreamAdmission(StreamLimits limits, const ClientAuth* auth, std::function<void(const std::string&)> close_connection,
                  std::function<void(const std::string&)> log);

  // One open stream: held from the call's start until it is answered;
  // move-only, released when reset or destroyed.
  class Ticket {
   public:
    Ticket() = default;
    Ticket(Ticket&& o) noexcept { *this = std::move(o); }
    Ticket& operator=(Ticket&& o) noexcept;
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    ~Ticket() { reset(); }
    void reset();
    explicit operator bool() const { return owner_ != nullptr; }

   private:
    friend class StreamAdmission;
    StreamAdmission* owner_ = nullptr;
    StreamPeer peer_;
    bool by_address_ = false;  // counted against the address's share (no token)
    AuthClient::StreamLease lease_;
  };

  // A place for one more stream from `peer` (with `client`'s token, or null),
  // or the status of the first bound it would pass, naming its flag.
  StatusOr<Ticket> open(const StreamPeer& peer, AuthClient* client);

  int open_streams() const;
  // Forgets refusal counts older than a second (the watchdog, each tick).
  void purge(Clock::time_point now);
  const StreamLimits& limits() const { return limits_; }

 private:
  void release(const Ticket& t);
  // Counts a refusal against `peer`'s connection; true when it is over the bound.
  bool refused(const StreamPeer& peer, Clock::time_point now);

  struct RefusalWindow {
    Clock::time_point start;
    int count = 0;
  };

  const StreamLimits limits_;
  const ClientAuth* const auth_;
  const std::function<void(const std::string&)> close_connection_;
  const std::function<void(const std::string&)> log_;
  mutable std::mutex mu_;
  int open_ = 0;                                             // guarded by mu_
  std::unordered_map<std::string, int> by_connection_;       // guarded by mu_: open streams
  std::unordered_map<std::string, int> by_address_;          // guarded by mu_: open streams without a token
  std::unordered_map<std::string, RefusalWindow> refusals_;  // guarded by mu_: by connection
};

// The address part of a gRPC peer string: "ipv4:10.0.0.5:41234" -> "ipv4:10.0.0.5",
// "ipv6:[::1]:5000" -> "ipv6:[::1]"; a string without a port comes back whole.
std::string peer_address(const std::string& peer);

}  // namespace sgemm
