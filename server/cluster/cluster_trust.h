// The cluster listener under the same trust as the service (docs/security.md):
// a member proves it belongs with a shared token and may reach the
// coordinator over TLS; the coordinator takes nothing in a hello on faith.
//
//   token   --cluster-token-file on every process of the cluster: a member
//           sends `authorization: Bearer <token>` with its Join, and the
//           coordinator refuses a Join without it (UNAUTHENTICATED), compared
//           in constant time. Without a token anyone who reaches
//           --cluster-listen joins and receives every job's description.
//   TLS     the coordinator's --cluster-listen uses the server's --tls-cert /
//           --tls-key (and --tls-client-ca: members then present a
//           certificate, their own --tls-cert); a member trusts the CA in
//           --cluster-ca (ClusterOptions::tls_ca_file).
//   hello   a host name of 1-64 characters from [A-Za-z0-9._:-], 1-64
//           devices with names of at most 128 printable characters; at most
//           kMaxClusterMembers members at once. INVALID_ARGUMENT /
//           RESOURCE_EXHAUSTED otherwise.
//
// Threads: pure functions.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "common/status.h"
#include "server/cluster/cluster_options.h"
#include "sgemm/v1/cluster.pb.h"

namespace sgemm {

inline constexpr int kMaxClusterMembers = 64;
inline constexpr int kMaxMemberDevices = 64;

// Reads a token file: its first line, at least 16 characters after trimming
// (INVALID_ARGUMENT naming the file otherwise, never the token).
StatusOr<std::string> read_cluster_token(const std::string& path);

// Whether a Join carries `token` (OK when `token` is empty); UNAUTHENTICATED otherwise.
Status check_cluster_token(const grpc::CallbackServerContext* ctx, const std::string& token);

// The hello's rules above.
Status check_hello(const v1::ClusterHello& hello);

// What a member connects to its coordinator with: TLS when options.tls_ca_file
// is set (and its own certificate when tls_cert_file is), plaintext otherwise.
// INVALID_ARGUMENT naming a file that cannot be read.
StatusOr<std::shared_ptr<grpc::ChannelCredentials>> cluster_channel_credentials(const ClusterOptions& options);

}  // namespace sgemm
