#include "server/service/stripe_group.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>

namespace sgemm {

StripeGroup::StripeGroup(std::string token, int stripes, int64_t stripe_rows, const GemmRequest& request,
                         const AuthClient* owner, MultiplyCall* primary, std::function<void()> release_primary)
    : token_(std::move(token)),
      stripes_(stripes),
      stripe_rows_(stripe_rows),
      request_(request),
      owner_(owner),
      primary_(primary),
      release_primary_(std::move(release_primary)),
      members_(std::size_t(stripes), nullptr),
      mail_(std::size_t(stripes)) {}

StripeGroup::~StripeGroup() {
  if (release_primary_) release_primary_();
}

Status StripeGroup::attach(int stripe, const AuthClient* client, MultiplyCall* member) {
  std::lock_guard lock(mu_);
  if (closed_)
    return NotFound(
        "the request this stripe token names has ended (or has every stripe's data); attach stripes "
        "while the request is uploading");
  if (client != owner_)
    return PermissionDenied(
        "the stripe token belongs to another client's request; attach with the token of the "
        "client that sent the header");
  if (stripe < 1 || stripe >= stripes_)
    return InvalidArgument("attach.stripe " + std::to_string(stripe) + " is out of range: the request has " +
                           std::to_string(stripes_) + " stripes, so streams attach as stripes 1 to " +
                           std::to_string(stripes_ - 1) + " (stripe 0 is the header's stream)");
  if (members_[std::size_t(stripe)])
    return InvalidArgument("stripe " + std::to_string(stripe) + " of " + std::to_string(stripes_) +
                           " is already attached; each stripe attaches once");
  members_[std::size_t(stripe)] = member;
  return Status::Ok();
}

MultiplyCall* StripeGroup::member(int stripe) const {
  std::lock_guard lock(mu_);
  if (closed_ || stripe < 0 || stripe >= stripes_) return nullptr;
  return members_[std::size_t(stripe)];
}

int StripeGroup::first_missing() const {
  std::lock_guard lock(mu_);
  for (int s = 1; s < stripes_; ++s)
    if (!members_[std::size_t(s)]) return s;
  return -1;
}

std::vector<MultiplyCall*> StripeGroup::close() {
  std::lock_guard lock(mu_);
  if (closed_) return {};
  closed_ = true;
  return members_;
}

void StripeGroup::post_rows(int stripe, Rows rows) {
  std::lock_guard lock(mu_);
  mail_[std::size_t(stripe)].rows.push_back(std::move(rows));
}

void StripeGroup::post_end(int stripe, const Status& end) {
  std::lock_guard lock(mu_);
  auto& mail = mail_[std::size_t(stripe)];
  if (!mail.end) mail.end = end;
}

StripeGroup::Mail StripeGroup::take_mail(int stripe) {
  std::lock_guard lock(mu_);
  Mail& mail = mail_[std::size_t(stripe)];
  Mail out;
  out.rows.swap(mail.rows);
  out.end = mail.end;
  return out;
}

std::optional<Status> StripeGroup::end_of(int stripe) const {
  std::lock_guard lock(mu_);
  const Mail& mail = mail_[std::size_t(stripe)];
  if (!mail.rows.empty()) return std::nullopt;
  return mail.end;
}

StatusOr<std::shared_ptr<StripeGroup>> StripeRegistry::create(int stripes, int64_t stripe_rows,
                                                              const GemmRequest& request, const AuthClient* owner,
                                                              MultiplyCall* primary,
                                                              std::function<void()> release_primary) {
  std::string token(16, '\0');
  std::size_t got = 0;
  while (got < token.size()) {
    const ssize_t n = getrandom(token.data() + got, token.size() - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Internal(std::string("getrandom for a stripe token: ") + std::strerror(errno));
    got += std::size_t(n);
  }
  auto group =
      std::make_shared<StripeGroup>(token, stripes, stripe_rows, request, owner, primary, std::move(release_primary));
  std::lock_guard lock(mu_);
  if (!groups_.emplace(token, group).second) return Internal("stripe token collision");
  return group;
}

StatusOr<std::shared_ptr<StripeGroup>> StripeRegistry::find(const std::string& token) const {
  std::lock_guard lock(mu_);
  auto it = groups_.find(token);
  if (it == groups_.end())
    return NotFound("unknown or expired stripe token (" + std::to_string(token.size()) +
                    " bytes): no request under way has it; it is valid from stripe 0's StripeGrant until the "
                    "request ends");
  return it->second;
}

void StripeRegistry::remove(const std::string& token) {
  std::shared_ptr<StripeGroup> keep;  // released after the lock: its destructor may run the primary's release
  std::lock_guard lock(mu_);
  auto it = groups_.find(token);
  if (it == groups_.end()) return;
  keep = std::move(it->second);
  groups_.erase(it);
}

std::size_t StripeRegistry::size() const {
  std::lock_guard lock(mu_);
  return groups_.size();
}

}  // namespace sgemm
