#include "server/service/tls_credentials.h"

#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace sgemm {

namespace fs = std::filesystem;

namespace {

constexpr const char* kCertName = "cert.pem";
constexpr const char* kKeyName = "key.pem";
constexpr const char* kCaName = "client-ca.pem";

// Reads `path` and checks it holds a PEM block whose label ends in `label`
// ("CERTIFICATE", "PRIVATE KEY"). `flag` names the option in errors.
StatusOr<std::string> read_pem(const std::string& path, const std::string& label, const std::string& flag) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return InvalidArgument(flag + " " + path + ": cannot be read");
  std::stringstream ss;
  ss << f.rdbuf();
  std::string text = ss.str();
  const auto begin = text.find("-----BEGIN ");
  if (begin == std::string::npos || text.find(label + "-----", begin) == std::string::npos)
    return InvalidArgument(flag + " " + path + ": not a PEM file holding a " + label);
  return text;
}

Status write_file(const fs::path& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  f.close();
  if (!f) return Internal("cannot write " + path.string());
  fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write);
  return Status::Ok();
}

}  // namespace

StatusOr<std::unique_ptr<TlsCredentials>> TlsCredentials::create(const TlsOptions& options) {
  if (options.cert_file.empty() || options.key_file.empty())
    return InvalidArgument("TLS needs both --tls-cert and --tls-key (--tls-client-ca adds client certificates)");
  std::unique_ptr<TlsCredentials> tls(new TlsCredentials(options));
  std::string tmpl = (fs::temp_directory_path() / "sgemm-tls-XXXXXX").string();
  if (!mkdtemp(tmpl.data())) return Internal("cannot create a directory for the staged TLS files");
  tls->dir_ = tmpl;
  SGEMM_RETURN_IF_ERROR(tls->stage());

  const fs::path cur = fs::path(tls->dir_) / "current";
  const unsigned refresh = unsigned(std::max(1, options.refresh_interval_s));
  std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider;
  if (tls->requires_client_certificate()) {
    provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
        (cur / kKeyName).string(), (cur / kCertName).string(), (cur / kCaName).string(), refresh);
  } else {
    provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
        (cur / kKeyName).string(), (cur / kCertName).string(), refresh);
  }
  grpc::experimental::TlsServerCredentialsOptions topt(provider);
  topt.watch_identity_key_cert_pairs();
  if (tls->requires_client_certificate()) {
    topt.watch_root_certs();
    topt.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    topt.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  tls->credentials_ = grpc::experimental::TlsServerCredentials(topt);
  if (!tls->credentials_) return Internal("gRPC refused the TLS server credentials");
  return tls;
}

TlsCredentials::~TlsCredentials() {
  std::error_code ec;
  if (!dir_.empty()) fs::remove_all(dir_, ec);
}

Status TlsCredentials::reload() { return stage(); }

Status TlsCredentials::stage() {
  // Everything is read and checked before anything is staged.
  SGEMM_ASSIGN_OR_RETURN(std::string cert, read_pem(options_.cert_file, "CERTIFICATE", "--tls-cert"));
  SGEMM_ASSIGN_OR_RETURN(std::string key, read_pem(options_.key_file, "PRIVATE KEY", "--tls-key"));
  std::string ca;
  if (requires_client_certificate()) {
    SGEMM_ASSIGN_OR_RETURN(ca, read_pem(options_.client_ca_file, "CERTIFICATE", "--tls-client-ca"));
  }

  // A new generation directory, then `current` is switched to it with one
  // rename: the watcher sees the old set or the new one, never a mix.
  const fs::path gen = fs::path(dir_) / ("gen-" + std::to_string(++generation_));
  std::error_code ec;
  fs::create_directory(gen, ec);
  if (ec) return Internal("cannot create " + gen.string() + ": " + ec.message());
  SGEMM_RETURN_IF_ERROR(write_file(gen / kCertName, cert));
  SGEMM_RETURN_IF_ERROR(write_file(gen / kKeyName, key));
  if (requires_client_certificate()) SGEMM_RETURN_IF_ERROR(write_file(gen / kCaName, ca));
  const fs::path link_tmp = fs::path(dir_) / "current.tmp";
  fs::remove(link_tmp, ec);
  fs::create_directory_symlink(gen.filename(), link_tmp, ec);
  if (ec) return Internal("cannot link the staged TLS files: " + ec.message());
  fs::rename(link_tmp, fs::path(dir_) / "current", ec);
  if (ec) return Internal("cannot switch to the staged TLS files: " + ec.message());
  // The generation before last is no longer read by anyone.
  if (generation_ > 2) fs::remove_all(fs::path(dir_) / ("gen-" + std::to_string(generation_ - 2)), ec);
  return Status::Ok();
}

std::shared_ptr<grpc::ServerCredentials> listener_credentials(const std::string& address, const TlsCredentials* tls) {
  if (address.rfind("unix:", 0) == 0 || address.rfind("unix-abstract:", 0) == 0 || !tls)
    return grpc::InsecureServerCredentials();
  return tls->credentials();
}

}  // namespace sgemm
