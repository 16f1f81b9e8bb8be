#include "server/cluster/cluster_trust.h"

#include <fstream>
#include <sstream>

namespace sgemm {

namespace {

StatusOr<std::string> read_file(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return InvalidArgument(std::string(what) + " " + path + ": cannot be read");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Equal without an early exit: the time tells neither how much of a guess was
// right nor anything but the expected secret's length.
bool same_secret(const std::string& got, const std::string& want) {
  unsigned char diff = got.size() == want.size() ? 0 : 1;
  for (std::size_t i = 0; i < want.size(); ++i)
    diff |= static_cast<unsigned char>((i < got.size() ? got[i] : 0) ^ want[i]);
  return diff == 0;
}

bool printable(const std::string& s) {
  for (const char c : s)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) return false;
  return true;
}

}  // namespace

StatusOr<std::string> read_cluster_token(const std::string& path) {
  SGEMM_ASSIGN_OR_RETURN(std::string text, read_file(path, "--cluster-token-file"));
  std::string token = text.substr(0, text.find('\n'));
  while (!token.empty() && (token.back() == '\r' || token.back() == ' ' || token.back() == '\t')) token.pop_back();
  while (!token.empty() && (token.front() == ' ' || token.front() == '\t')) token.erase(0, 1);
  if (token.size() < 16 || !printable(token))
    return InvalidArgument("--cluster-token-file " + path +
                           ": the first line must be a token of at least 16 printable characters");
  return token;
}

Status check_cluster_token(const grpc::CallbackServerContext* ctx, const std::string& token) {
  if (token.empty()) return Status::Ok();
  const auto& md = ctx->client_metadata();
  auto it = md.find("authorization");
  const std::string got = it == md.end() ? std::string() : std::string(it->second.data(), it->second.size());
  if (same_secret(got, "Bearer " + token)) return Status::Ok();
  return Unauthenticated(it == md.end()
                             ? "this coordinator requires the cluster token (--cluster-token-file) with every Join"
                             : "the Join's cluster token is not this coordinator's (--cluster-token-file)");
}

Status check_hello(const v1::ClusterHello& hello) {
  const std::string& host = hello.host();
  if (host.size() > 64)
    return InvalidArgument("hello.host has " + std::to_string(host.size()) + " characters; at most 64");
  for (const char c : host) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == ':' || c == '-';
    if (!ok) return InvalidArgument("hello.host may hold only letters, digits and . _ : -");
  }
  if (hello.devices_size() < 1 || hello.devices_size() > kMaxMemberDevices)
    return InvalidArgument("hello.devices lists " + std::to_string(hello.devices_size()) + " GPUs; a member has 1 to " +
                           std::to_string(kMaxMemberDevices));
  for (const std::string& d : hello.devices())
    if (d.size() > 128 || !printable(d))
      return InvalidArgument("hello.devices: a device name must have at most 128 printable characters");
  return Status::Ok();
}

StatusOr<std::shared_ptr<grpc::ChannelCredentials>> cluster_channel_credentials(const ClusterOptions& o) {
  if (o.tls_ca_file.empty()) {
    if (!o.tls_cert_file.empty() || !o.tls_key_file.empty())
      return InvalidArgument(
          "a member's certificate (--tls-cert/--tls-key) needs --cluster-ca to reach its "
          "coordinator over TLS");
    return grpc::InsecureChannelCredentials();
  }
  grpc::SslCredentialsOptions ssl;
  SGEMM_ASSIGN_OR_RETURN(ssl.pem_root_certs, read_file(o.tls_ca_file, "--cluster-ca"));
  if (!o.tls_cert_file.empty() || !o.tls_key_file.empty()) {
    if (o.tls_cert_file.empty() || o.tls_key_file.empty())
      return InvalidArgument("a member's certificate needs both --tls-cert and --tls-key");
    SGEMM_ASSIGN_OR_RETURN(ssl.pem_cert_chain, read_file(o.tls_cert_file, "--tls-cert"));
    SGEMM_ASSIGN_OR_RETURN(ssl.pem_private_key, read_file(o.tls_key_file, "--tls-key"));
  }
  return grpc::SslCredentials(ssl);
}

}  // namespace sgemm
