#include "server/service/client_auth.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace sgemm {

namespace {

// Compares without stopping at the first difference, so the time taken says
// nothing about how much of a guessed token was right.
bool same_secret(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const std::size_t n = std::max(a.size(), b.size());
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

}  // namespace

void AuthClient::release_request(int64_t bytes) {
  in_flight_.fetch_sub(1);
  bytes_in_flight_.fetch_sub(bytes);
}

void AuthClient::release_stream(int64_t streams) { open_streams_.fetch_sub(int(streams)); }

void AuthClient::release_resident(int64_t bytes) {
  std::lock_guard lock(resident_mu_);
  resident_charged_ -= bytes;
}

StatusOr<AuthClient::Lease> AuthClient::admit(int64_t bytes) {
  const ClientQuota& q = quota_;
  if (!q.multiply) return PermissionDenied("client '" + name_ + "' may not call Multiply (\"multiply\": false)");
  if (q.max_bytes_in_flight > 0 && bytes > q.max_bytes_in_flight)
    return PermissionDenied("the request needs " + std::to_string(bytes) + " bytes for A, B and C, more than client '" +
                            name_ + "''s quota of " + std::to_string(q.max_bytes_in_flight) +
                            " bytes in flight (max_bytes_in_flight)");
  const int requests = in_flight_.fetch_add(1) + 1;
  const int64_t held = bytes_in_flight_.fetch_add(bytes) + bytes;
  Lease lease(this, bytes);
  if (q.max_in_flight > 0 && requests > q.max_in_flight)
    return PermissionDenied("client '" + name_ + "' already has " + std::to_string(requests - 1) +
                            " requests in flight, its quota (max_in_flight " + std::to_string(q.max_in_flight) +
                            "); wait for one to finish");
  if (q.max_bytes_in_flight > 0 && held > q.max_bytes_in_flight)
    return PermissionDenied("client '" + name_ + "' already has " + std::to_string(held - bytes) +
                            " bytes in flight; this request's " + std::to_string(bytes) +
                            " would exceed its quota of " + std::to_string(q.max_bytes_in_flight) +
                            " (max_bytes_in_flight); wait for one to finish");
  return lease;
}

StatusOr<AuthClient::StreamLease> AuthClient::open_stream(int limit) {
  const int open = open_streams_.fetch_add(1) + 1;
  StreamLease lease(this, 1);
  if (limit > 0 && open > limit)
    return PermissionDenied("client '" + name_ + "' already has " + std::to_string(open - 1) +
                            " Multiply and PutMatrix streams open, its share of " + std::to_string(limit) +
                            " (max_open_streams, or --max-open-streams shared among the token file's clients); "
                            "finish some first");
  return lease;
}

int ClientAuth::stream_share(const AuthClient& client, int max_open_streams, int max_stripes) const {
  if (client.quota().max_open_streams > 0) return client.quota().max_open_streams;
  const int even = entries_.empty() ? max_open_streams : max_open_streams / int(entries_.size());
  return std::max(even, max_stripes);
}

Status AuthClient::resident_over(int64_t bytes, int64_t held_in_store, int64_t charged) const {
  const int64_t quota = quota_.max_resident_bytes;
  if (quota <= 0 || held_in_store + charged + bytes <= quota) return Status::Ok();
  return PermissionDenied("client '" + name_ + "' holds " + std::to_string(held_in_store) +
                          " bytes of resident matrices and is making " + std::to_string(charged) + " more; " +
                          std::to_string(bytes) + " more would exceed its quota of " + std::to_string(quota) +
                          " (max_resident_bytes): delete some first");
}

Status AuthClient::check_resident(int64_t bytes, int64_t held_in_store) const {
  std::lock_guard lock(resident_mu_);
  return resident_over(bytes, held_in_store, resident_charged_);
}

StatusOr<AuthClient::ResidentCharge> AuthClient::charge_resident(int64_t bytes,
                                                                 const std::function<int64_t()>& held_in_store) {
  if (quota_.max_resident_bytes <= 0) return ResidentCharge();
  std::lock_guard lock(resident_mu_);
  SGEMM_RETURN_IF_ERROR(resident_over(bytes, held_in_store(), resident_charged_));
  resident_charged_ += bytes;
  return ResidentCharge(this, bytes);
}

StatusOr<std::unique_ptr<ClientAuth>> ClientAuth::load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return InvalidArgument("--auth-tokens " + path + ": cannot be read");
  std::stringstream ss;
  ss << f.rdbuf();
  return parse(ss.str(), "--auth-tokens " + path);
}

StatusOr<std::unique_ptr<ClientAuth>> ClientAuth::parse(const std::string& text, const std::string& source) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("clients") || !j["clients"].is_array())
    return InvalidArgument(source + ": not JSON of the form {\"clients\": [{\"name\": ..., \"token\": ...}, ...]}");
  auto table = std::make_unique<ClientAuth>();
  std::set<std::string> names;
  int index = 0;
  for (const auto& c : j["clients"]) {
    const std::string where = source + ": clients[" + std::to_string(index++) + "]";
    if (!c.is_object()) return InvalidArgument(where + " is not an object");
    if (!c.contains("name") || !c["name"].is_string() || c["name"].get<std::string>().empty())
      return InvalidArgument(where + " needs a non-empty string \"name\"");
    const std::string name = c["name"].get<std::string>();
    const std::string who = where + " ('" + name + "')";
    if (!c.contains("token") || !c["token"].is_string() || c["token"].get<std::string>().size() < 16)
      return InvalidArgument(who + " needs a string \"token\" of at least 16 characters");
    if (!names.insert(name).second) return InvalidArgument(who + ": the name appears twice");
    ClientQuota q;
    for (const auto& [key, value] : c.items()) {
      if (key == "name" || key == "token") continue;
      if (key == "max_in_flight" && value.is_number_integer() && value.get<int64_t>() >= 0 &&
          value.get<int64_t>() < (int64_t{1} << 30)) {
        q.max_in_flight = int(value.get<int64_t>());
      } else if (key == "max_bytes_in_flight" && value.is_number_integer() && value.get<int64_t>() >= 0) {
        q.max_bytes_in_flight = value.get<int64_t>();
      } else if (key == "max_resident_bytes" && value.is_number_integer() && value.get<int64_t>() >= 0) {
        q.max_resident_bytes = value.get<int64_t>();
      } else if (key == "max_open_streams" && value.is_number_integer() && value.get<int64_t>() >= 0 &&
                 value.get<int64_t>() < (int64_t{1} << 30)) {
        q.max_open_streams = int(value.get<int64_t>());
      } else if (key == "max_region_bytes" && value.is_number_integer() && value.get<int64_t>() >= 0) {
        q.max_region_bytes = value.get<int64_t>();
      } else if (key == "multiply" && value.is_boolean()) {
        q.multiply = value.get<bool>();
      } else {
        return InvalidArgument(who + ": \"" + key +
                               "\" is not a known field with a valid value (max_in_flight, max_bytes_in_flight, "
                               "max_resident_bytes: integers >= 0, 0 = no limit; multiply: true or false)");
      }
    }
    const std::string token = c["token"].get<std::string>();
    for (const Entry& e : table->entries_)
      if (same_secret(e.token, token))
        return InvalidArgument(who + ": its token is also the token of '" + e.client->name() + "'");
    table->entries_.push_back({token, std::make_unique<AuthClient>(name, q)});
  }
  return table;
}

StatusOr<AuthClient*> ClientAuth::authenticate(std::string_view authorization) const {
  if (authorization.empty())
    return Unauthenticated(
        "this server requires a bearer token: send the metadata `authorization: Bearer <token>` (sgemm-client "
        "--token or SGEMM_TOKEN)");
  constexpr std::string_view kBearer = "Bearer ";
  if (authorization.size() <= kBearer.size() || authorization.substr(0, kBearer.size()) != kBearer)
    return Unauthenticated("the `authorization` metadata must be `Bearer <token>`");
  const std::string_view token = authorization.substr(kBearer.size());
  AuthClient* found = nullptr;
  for (const Entry& e : entries_)  // every entry is compared: the time does not depend on which one matches
    if (same_secret(e.token, token)) found = e.client.get();
  if (!found) return Unauthenticated("the bearer token is not one this server knows (--auth-tokens)");
  return found;
}

}  // namespace sgemm
