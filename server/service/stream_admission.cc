#include "server/service/stream_admission.h"

#include <algorithm>

namespace sgemm {

std::string peer_address(const std::string& peer) {
  const auto colon = peer.rfind(':');
  const auto scheme = peer.find(':');
  if (colon == std::string::npos || colon == scheme) return peer;
  const std::string port = peer.substr(colon + 1);
  if (port.empty() || !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; })) return peer;
  return peer.substr(0, colon);
}

StreamAdmission::StreamAdmission(StreamLimits limits, const ClientAuth* auth,
                                 std::function<void(const std::string&)> close_connection,
                                 std::function<void(const std::string&)> log)
    : limits_(limits), auth_(auth), close_connection_(std::move(close_connection)), log_(std::move(log)) {}

StreamAdmission::Ticket& StreamAdmission::Ticket::operator=(Ticket&& o) noexcept {
  if (this != &o) {
    reset();
    owner_ = o.owner_;
    peer_ = std::move(o.peer_);
    by_address_ = o.by_address_;
    lease_ = std::move(o.lease_);
    o.owner_ = nullptr;
  }
  return *this;
}

void StreamAdmission::Ticket::reset() {
  if (!owner_) return;
  owner_->release(*this);
  lease_.reset();
  owner_ = nullptr;
}

StatusOr<StreamAdmission::Ticket> StreamAdmission::open(const StreamPeer& peer, AuthClient* client) {
  const auto now = Clock::now();
  Status refuse;
  bool close = false;
  Ticket t;
  {
    std::lock_guard lock(mu_);
    int& on_connection = by_connection_[peer.connection];
    if (open_ >= limits_.max_open_streams) {
      refuse =
          Unavailable("too many open Multiply and PutMatrix streams: " + std::to_string(open_) +
                      " (--max-open-streams " + std::to_string(limits_.max_open_streams) + "); retry with backoff");
    } else if (on_connection >= limits_.max_per_connection) {
      refuse = ResourceExhausted("this connection already has " + std::to_string(on_connection) +
                                 " Multiply and PutMatrix streams open (--max-streams-per-connection " +
                                 std::to_string(limits_.max_per_connection) + "); finish some first");
    } else if (client && auth_) {
      auto lease = client->open_stream(auth_->stream_share(*client, limits_.max_open_streams, limits_.max_stripes));
      if (lease.ok())
        t.lease_ = std::move(lease).value();
      else
        refuse = lease.status();
    } else if (int& on_address = by_address_[peer.address];
               limits_.max_per_address > 0 && on_address >= limits_.max_per_address) {
      refuse = ResourceExhausted("this address (" + peer.address + ") already has " + std::to_string(on_address) +
                                 " Multiply and PutMatrix streams open (--max-streams-per-address " +
                                 std::to_string(limits_.max_per_address) + "); finish some first");
    } else {
      ++on_address;
      t.by_address_ = true;
    }
    if (refuse.ok()) {
      ++open_;
      ++on_connection;
      t.owner_ = this;
      t.peer_ = peer;
    } else {
      if (on_connection == 0) by_connection_.erase(peer.connection);
      if (auto it = by_address_.find(peer.address); it != by_address_.end() && it->second == 0) by_address_.erase(it);
      close = refused(peer, now);
    }
  }
  if (close) {
    if (log_)
      log_("connection " + peer.connection + " opened more than " + std::to_string(limits_.max_per_connection) +
           " streams within 1 s that were refused (--max-streams-per-connection): closed");
    if (close_connection_) close_connection_(peer.connection);
  }
  if (!refuse.ok()) return refuse;
  return t;
}

bool StreamAdmission::refused(const StreamPeer& peer, Clock::time_point now) {
  RefusalWindow& w = refusals_[peer.connection];
  if (now - w.start >= std::chrono::seconds(1)) w = RefusalWindow{now, 0};
  if (++w.count <= limits_.max_per_connection) return false;
  w = RefusalWindow{now, 0};
  return true;
}

void StreamAdmission::release(const Ticket& t) {
  std::lock_guard lock(mu_);
  --open_;
  if (auto it = by_connection_.find(t.peer_.connection); it != by_connection_.end() && --it->second <= 0)
    by_connection_.erase(it);
  if (t.by_address_)
    if (auto it = by_address_.find(t.peer_.address); it != by_address_.end() && --it->second <= 0)
      by_address_.erase(it);
}

int StreamAdmission::open_streams() const {
  std::lock_guard lock(mu_);
  return open_;
}

void StreamAdmission::purge(Clock::time_point now) {
  std::lock_guard lock(mu_);
  for (auto it = refusals_.begin(); it != refusals_.end();)
    it = now - it->second.start >= std::chrono::seconds(1) ? refusals_.erase(it) : std::next(it);
}

}  // namespace sgemm
