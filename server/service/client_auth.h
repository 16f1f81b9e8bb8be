// Bearer tokens and per-client quotas (docs/security.md).
//
// `--auth-tokens FILE` names a JSON file:
//
//   {"clients": [
//     {"name": "batch", "token": "<secret>", "max_in_flight": 2,
//      "max_bytes_in_flight": 1073741824, "multiply": true}
//   ]}
//
// Every Multiply and GetInfo call is authenticated in one place,
// ClientAuth::authenticate(), from the `authorization: Bearer <token>`
// metadata: UNAUTHENTICATED when it is missing, malformed or unknown. A
// known client gets an AuthClient whose quotas the service charges as requests go:
// a request holds one of `max_in_flight` places and its footprint (A, B, C)
// of `max_bytes_in_flight` from its header until it is answered; a request
// over either, or a Multiply from a client without the `multiply` right, is
// PERMISSION_DENIED. Messages name the client and the quota, never a token.
// Health checks and reflection stay open (probes carry no token).
//
// Threads: authenticate() and the AuthClient's admit()/Lease are thread-safe;
// the table does not change after load().
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace sgemm {

struct ClientQuota {
  int max_in_flight = 0;            // requests open at once (header received, not yet answered); 0 = no limit
  int64_t max_bytes_in_flight = 0;  // sum of those requests' A+B+C bytes; 0 = no limit
  bool multiply = true;             // may call Multiply (false: GetInfo only)
  // Resident matrices it may own at once (docs/resident.md): the sum of their
  // rows x cols x 4, put or kept, checked at each put and keep_result; 0 = no limit.
  int64_t max_resident_bytes = 0;
  // Multiply and PutMatrix streams it may have open and unanswered at once;
  // 0 = its share of --max-open-streams (ClientAuth::stream_share).
  int max_open_streams = 0;
  // Shared-memory regions it may have registered at once (bytes, all its
  // Unix connections together); 0 = no limit beyond --region-bytes.
  int64_t max_region_bytes = 0;
};

// One client of the token file, with what it holds right now.
class AuthClient {
 public:
  AuthClient(std::string name, ClientQuota quota) : name_(std::move(name)), quota_(quota) {}
  const std::string& name() const { return name_; }
  const ClientQuota& quota() const { return quota_; }
  int in_flight() const { return in_flight_.load(); }
  int64_t bytes_in_flight() const { return bytes_in_flight_.load(); }

  // What a call holds against one of its client's quotas: `amount` (a
  // request place and its bytes, an open stream, resident bytes) handed back
  // by Release when reset or destroyed. Move-only; one type per quota.
  template <void (AuthClient::*Release)(int64_t amount)>
  class Claim {
   public:
    Claim() = default;
    Claim(AuthClient* client, int64_t amount) : client_(client), amount_(amount) {}
    Claim(Claim&& o) noexcept : client_(std::exchange(o.client_, nullptr)), amount_(o.amount_) {}
    Claim& operator=(Claim&& o) noexcept {
      if (this != &o) {
        reset();
        client_ = std::exchange(o.client_, nullptr);
        amount_ = o.amount_;
      }
      return *this;
    }
    Claim(const Claim&) = delete;
    Claim& operator=(const Claim&) = delete;
    ~Claim() { reset(); }
    void reset() {
      if (client_) (client_->*Release)(amount_);
      client_ = nullptr;
    }

   private:
    AuthClient* client_ = nullptr;
    int64_t amount_ = 0;
  };

 private:
  void release_request(int64_t bytes);
  void release_stream(int64_t streams);
  void release_resident(int64_t bytes);

 public:
  // One request place and its bytes (A, B and C) against max_in_flight and
  // max_bytes_in_flight, from admission until the request is done.
  using Lease = Claim<&AuthClient::release_request>;
  // One open stream (Multiply or PutMatrix) against the client's stream
  // quota, from the call's start until it is answered.
  using StreamLease = Claim<&AuthClient::release_stream>;
  // Resident bytes charged to max_resident_bytes for a matrix being made (a
  // put, a kept C) from the moment its room is reserved until it is in the
  // store (then the store counts it) or its call fails.
  using ResidentCharge = Claim<&AuthClient::release_resident>;

  // Takes one request place and `bytes` against the quotas, or
  // PERMISSION_DENIED naming the quota that is full.
  StatusOr<Lease> admit(int64_t bytes);

  // Takes one of at most `limit` open streams, or PERMISSION_DENIED naming
  // the client and the limit (`limit` from ClientAuth::stream_share).
  StatusOr<StreamLease> open_stream(int limit);
  int open_streams() const { return open_streams_.load(); }

  // Charges `bytes` against max_resident_bytes, counting the client's
  // matrices in the store (`held_in_store()`, read under the lock that
  // releases charges: a matrix moving from its charge into the store is
  // counted once or twice, never not at all) and the charges of other calls.
  // PERMISSION_DENIED naming the client and the numbers when over; an empty
  // charge without the quota. So concurrent puts cannot together pass it.
  StatusOr<ResidentCharge> charge_resident(int64_t bytes, const std::function<int64_t()>& held_in_store);
  // The same test without charging (a put's header: an early refusal).
  Status check_resident(int64_t bytes, int64_t held_in_store) const;

 private:
  Status resident_over(int64_t bytes, int64_t held_in_store, int64_t charged) const;

  const std::string name_;
  const ClientQuota quota_;
  std::atomic<int> in_flight_{0};
  std::atomic<int64_t> bytes_in_flight_{0};
  std::atomic<int> open_streams_{0};
  mutable std::mutex resident_mu_;
  int64_t resident_charged_ = 0;  // guarded by resident_mu_
};

class ClientAuth {
 public:
  // Reads and checks a token file (INVALID_ARGUMENT naming the entry at fault,
  // never its token).
  static StatusOr<std::unique_ptr<ClientAuth>> load(const std::string& path);
  static StatusOr<std::unique_ptr<ClientAuth>> parse(const std::string& json_text, const std::string& source);

  // `authorization` is the call's metadata value ("" when absent). Returns
  // the client (owned by this table), or UNAUTHENTICATED.
  StatusOr<AuthClient*> authenticate(std::string_view authorization) const;

  std::size_t size() const { return entries_.size(); }

  // The open streams `client` may hold: its max_open_streams, or else an even
  // share of the server's `max_open_streams` among the file's clients, but
  // never under `max_stripes` (one striped request must fit). So no client
  // can take every stream from the others.
  int stream_share(const AuthClient& client, int max_open_streams, int max_stripes) const;

 private:
  struct Entry {
    std::string token;
    std::unique_ptr<AuthClient> client;
  };
  std::vector<Entry> entries_;
};

}  // namespace sgemm
