// One Multiply request spread over several streams (GemmHeader.stripes,
// docs/transport.md "One request over several connections"): the group that
// stripe 0's call (the primary, which owns the request) makes at its header,
// the token the other stripes' streams attach with, and which have attached.
//
// Ownership: the primary and every attached secondary hold the group
// (shared_ptr), and the registry holds it until the primary closes it (the
// request has ended or has all it needs). The group holds one reference on
// the primary call, released by `release_primary` when the group goes; so a
// secondary may call into the primary for as long as it holds the group.
//
// The group is also each stripe's mailbox: the primary posts the rows of C a
// stripe is to send and the request's end under the group's lock, and the
// stripe's call takes them under its own; so no call ever takes another
// call's lock, and what one stripe receives keeps the order it was posted in.
//
// Threads: any; all state is guarded by mu_, a leaf lock (nothing is called
// with it held).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "server/engine/engine.h"

namespace sgemm {

class MultiplyCall;
class AuthClient;

class StripeGroup {
 public:
  // `release_primary` runs once, from the destructor.
  StripeGroup(std::string token, int stripes, int64_t stripe_rows, const GemmRequest& request, const AuthClient* owner,
              MultiplyCall* primary, std::function<void()> release_primary);
  ~StripeGroup();
  StripeGroup(const StripeGroup&) = delete;
  StripeGroup& operator=(const StripeGroup&) = delete;

  const std::string& token() const { return token_; }
  int stripes() const { return stripes_; }
  int64_t stripe_rows() const { return stripe_rows_; }
  const GemmRequest& request() const { return request_; }
  MultiplyCall* primary() const { return primary_; }
  // The stripe that owns row `row` of A and C (block row / stripe_rows, round robin).
  int owner_of_row(int64_t row) const { return int((row / stripe_rows_) % stripes_); }

  // Stripe `stripe` (1 .. stripes-1) joins with `member`: INVALID_ARGUMENT out
  // of range or already attached, PERMISSION_DENIED for another client's
  // request, NOT_FOUND once closed.
  Status attach(int stripe, const AuthClient* client, MultiplyCall* member);
  // The member of `stripe` (null if not attached or closed).
  MultiplyCall* member(int stripe) const;
  // The lowest stripe not attached yet; -1 when all are.
  int first_missing() const;
  // No attach after this; returns the attached members (index = stripe, null where none; [0] is null).
  std::vector<MultiplyCall*> close();

  // Rows [begin, end) of C, final; `c` is C and `keep` owns it.
  struct Rows {
    int64_t begin = 0, end = 0;
    const float* c = nullptr;
    std::shared_ptr<HostBuffer> keep;
  };
  // What was posted to a stripe and not taken yet: rows in order, and the
  // request's end (posted after every row; kept once posted).
  struct Mail {
    std::vector<Rows> rows;
    std::optional<Status> end;
  };
  void post_rows(int stripe, Rows rows);
  void post_end(int stripe, const Status& end);
  Mail take_mail(int stripe);
  // The request's end as posted to `stripe`, once every row posted before it
  // has been taken; none until then.
  std::optional<Status> end_of(int stripe) const;

 private:
  const std::string token_;
  const int stripes_;
  const int64_t stripe_rows_;
  const GemmRequest request_;
  const AuthClient* const owner_;  // null without --auth-tokens
  MultiplyCall* const primary_;
  const std::function<void()> release_primary_;
  mutable std::mutex mu_;
  std::vector<MultiplyCall*> members_;  // guarded by mu_
  std::vector<Mail> mail_;              // guarded by mu_: per stripe
  bool closed_ = false;                 // guarded by mu_
};

// The open groups by token. Thread-safe.
class StripeRegistry {
 public:
  // A new group under a fresh 128-bit token from the kernel's CSPRNG (getrandom).
  StatusOr<std::shared_ptr<StripeGroup>> create(int stripes, int64_t stripe_rows, const GemmRequest& request,
                                                const AuthClient* owner, MultiplyCall* primary,
                                                std::function<void()> release_primary);
  // NOT_FOUND for a token no open request has.
  StatusOr<std::shared_ptr<StripeGroup>> find(const std::string& token) const;
  void remove(const std::string& token);
  std::size_t size() const;

 private:
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<StripeGroup>> groups_;  // guarded by mu_
};

}  // namespace sgemm
