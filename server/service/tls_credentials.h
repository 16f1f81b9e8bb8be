// TLS and mutual TLS for sgemm-server's TCP listeners (docs/security.md).
//
// The server's certificate, key and client CA come from PEM files. They are
// reloaded on SIGHUP, not whenever the files change: at start-up and on each
// reload() the files are checked and copied ("staged") into a private
// directory, and gRPC's FileWatcherCertificateProvider watches the staged
// copies (it rereads them every `refresh_interval_s`). So an operator can
// write new files in any order and then send SIGHUP; a half-written pair is
// never served. New handshakes get the new certificate within the refresh
// interval; connections already open keep their session, and requests in
// flight on them are not disturbed.
//
// Threads: create() at start-up; reload() from the signal-waiting thread
// (serialised by the caller); credentials() from main.
#pragma once

#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "common/status.h"

namespace sgemm {

struct TlsOptions {
  std::string cert_file;       // --tls-cert: the server's PEM certificate chain; "" = plaintext listener
  std::string key_file;        // --tls-key: its PEM private key (required with --tls-cert)
  std::string client_ca_file;  // --tls-client-ca: PEM CA(s); set = clients must present a certificate it signed
  int refresh_interval_s = 1;  // how often gRPC rereads the staged copies (so a reload shows within this)
  bool enabled() const { return !cert_file.empty() || !key_file.empty() || !client_ca_file.empty(); }
};

class TlsCredentials {
 public:
  // Checks the options and the files (readable PEM of the right kind), stages
  // them and builds the credentials. INVALID_ARGUMENT names the flag at fault.
  static StatusOr<std::unique_ptr<TlsCredentials>> create(const TlsOptions& options);
  ~TlsCredentials();  // removes the staging directory
  TlsCredentials(const TlsCredentials&) = delete;
  TlsCredentials& operator=(const TlsCredentials&) = delete;

  std::shared_ptr<grpc::ServerCredentials> credentials() const { return credentials_; }
  bool requires_client_certificate() const { return !options_.client_ca_file.empty(); }

  // SIGHUP: rereads the configured files; when they pass the checks, stages
  // them (the old ones stay in use otherwise, and the error says why).
  Status reload();

 private:
  explicit TlsCredentials(TlsOptions options) : options_(std::move(options)) {}
  Status stage();

  const TlsOptions options_;
  std::string dir_;  // private staging directory; `dir_/current` is a link to the live generation
  int generation_ = 0;
  std::shared_ptr<grpc::ServerCredentials> credentials_;
};

// The credentials a listener at `address` gets: plaintext for Unix sockets
// ("unix:..."; the socket's file permissions guard them), `tls` (when not
// null) for every TCP listener, else plaintext.
std::shared_ptr<grpc::ServerCredentials> listener_credentials(const std::string& address, const TlsCredentials* tls);

}  // namespace sgemm
