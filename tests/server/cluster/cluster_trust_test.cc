// The cluster listener under the same trust as the service (cluster_trust.h):
// a member without the cluster token, or one that is not over TLS to a TLS
// coordinator, never joins; a hello that breaks the rules is refused; the
// members that do belong join and run jobs as before. Real gRPC on 127.0.0.1,
// fake data planes (fake_plane.h); certificates made with the openssl CLI.
#include "server/cluster/cluster_trust.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "server/cluster/coordinator.h"
#include "server/cluster/member.h"
#include "sgemm/v1/cluster.grpc.pb.h"
#include "tests/server/cluster/cluster_fixture.h"

namespace sgemm {
namespace {

using testing::ClusterFixture;
using testing::eventually;
using testing::LogLines;
using testing::test_cluster_options;
using namespace std::chrono_literals;

const std::string kToken = "cluster-secret-0123456789abcdef";

class ClusterTrust : public ClusterFixture {
 protected:
  // A raw Join with `hello`: the status the coordinator ends it with.
  grpc::Status raw_join(const v1::ClusterHello& hello, const std::string& token) {
    auto stub = v1::Cluster::NewStub(grpc::CreateChannel(address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
    auto stream = stub->Join(&ctx);
    v1::ClusterMemberMessage m;
    *m.mutable_hello() = hello;
    stream->Write(m);
    v1::ClusterCoordinatorMessage in;
    while (stream->Read(&in)) {
      if (in.has_welcome()) ctx.TryCancel();  // joined: leave
    }
    return stream->Finish();
  }

  // Logs outlive the coordinator and the members that write to them (TearDown stops those first).
  LogLines coord_log, stranger_log, wrong_log, plain_log;
};

TEST_F(ClusterTrust, AMemberWithoutTheTokenNeverJoinsAndOneWithItDoes) {
  ClusterOptions co = test_cluster_options("coordinator", &coord_log);
  co.token = kToken;
  start(co);
  add_member(test_cluster_options("stranger", &stranger_log));  // no token
  ClusterOptions wrong = test_cluster_options("wrong", &wrong_log);
  wrong.token = "not-the-secret-0123456789abcdef";
  add_member(wrong);
  ASSERT_TRUE(eventually([&] { return stranger_log.has("requires the cluster token"); })) << stranger_log.all();
  ASSERT_TRUE(eventually([&] { return wrong_log.has("is not this coordinator's"); }));
  EXPECT_TRUE(coord_log.has("refused a Join from"));
  EXPECT_EQ(coord_->member_count(), 0);
  ClusterOptions member = test_cluster_options("member", nullptr);
  member.token = kToken;
  add_member(member);
  ASSERT_TRUE(eventually([&] { return coord_->member_count() == 1; }));
  MutexLock lock(coord_->job_mutex());
  auto view = coord_->prepare();
  ASSERT_TRUE(view.ok()) << view.status().to_string();
  EXPECT_EQ(view->ranks.size(), 2u);  // the coordinator's GPU and the member's: the strangers have none
  EXPECT_EQ(coord_->member_count(), 1);
}

TEST_F(ClusterTrust, HellosThatBreakTheRulesAreRefused) {
  start(test_cluster_options("coordinator", &coord_log));
  v1::ClusterHello ok;
  ok.set_host("gpu-node-1.example:7");
  ok.add_devices("NVIDIA H100 80GB HBM3");
  v1::ClusterHello forged = ok;
  forged.set_host("node\n[2026-01-01] [sgemm] [info] forged");
  EXPECT_EQ(raw_join(forged, "").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::ClusterHello many = ok;
  for (int i = 0; i < kMaxMemberDevices; ++i) many.add_devices("GPU");
  EXPECT_EQ(raw_join(many, "").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::ClusterHello none = ok;
  none.clear_devices();
  EXPECT_EQ(raw_join(none, "").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::ClusterHello long_name = ok;
  long_name.set_devices(0, std::string(200, 'x'));
  EXPECT_EQ(raw_join(long_name, "").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(check_hello(ok).ok());
  EXPECT_EQ(coord_->member_count(), 0);
  std::lock_guard lock(coord_log.mu);
  for (const auto& l : coord_log.lines) EXPECT_EQ(l.find('\n'), std::string::npos) << l;
}

// A member that joined but never answers `ready` holds the request that
// builds the communicator until connect_timeout_ms, then is dropped and kept
// out: the next request builds over the rest at once.
TEST_F(ClusterTrust, AMemberThatNeverAnswersReadyIsDroppedAndKeptOut) {
  ClusterOptions co = test_cluster_options("coordinator", &coord_log);
  // Long enough that a build which waited for the dropped member is told
  // apart from a quick one on a loaded machine; short enough to wait once.
  co.connect_timeout_ms = 2000;
  start(co);
  add_member(test_cluster_options("steady", nullptr));
  ClusterOptions silent = test_cluster_options("silent", &stranger_log);
  add_member(silent);
  planes_.back()->set_hang_connect(true);
  ASSERT_TRUE(eventually([&] { return coord_->member_count() == 2; }));
  {
    MutexLock lock(coord_->job_mutex());
    auto view = coord_->prepare();
    EXPECT_EQ(view.status().code(), StatusCode::kUnavailable) << view.status().to_string();
    EXPECT_NE(view.status().message().find("'silent'"), std::string::npos) << view.status().to_string();
  }
  EXPECT_TRUE(coord_log.has("member 'silent' did not answer ready"));
  // It tries to join again and is refused, saying for how long.
  ASSERT_TRUE(eventually([&] { return stranger_log.has("may join again in"); }));
  ASSERT_TRUE(eventually([&] { return coord_->member_count() == 1; }));
  const auto t0 = std::chrono::steady_clock::now();
  MutexLock lock(coord_->job_mutex());
  auto view = coord_->prepare();
  ASSERT_TRUE(view.ok()) << view.status().to_string();
  EXPECT_EQ(view->members, 1);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(co.connect_timeout_ms))
      << "the next build waited for the dropped member";
}

TEST(ClusterToken, TokenFilesNeedALongPrintableFirstLine) {
  const std::string dir = std::filesystem::temp_directory_path() / ("sgemm-token-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/good") << "  " << kToken << "  \nignored\n";
  std::ofstream(dir + "/short") << "tiny-secret\n";
  auto good = read_cluster_token(dir + "/good");
  ASSERT_TRUE(good.ok()) << good.status().to_string();
  EXPECT_EQ(*good, kToken);
  auto bad = read_cluster_token(dir + "/short");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message().find("tiny-secret"), std::string::npos)
      << "the message shows the token: " << bad.status().message();
  EXPECT_EQ(read_cluster_token(dir + "/missing").status().code(), StatusCode::kInvalidArgument);
  std::filesystem::remove_all(dir);
}

// A CA and a certificate for 127.0.0.1 it signed, made with the openssl CLI.
bool make_pki(const std::string& dir) {
  const std::string cmd =
      "cd '" + dir +
      "' && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -keyout ca.key -out "
      "ca.pem -subj /CN=ca && openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "
      "coord.key -out coord.csr -subj /CN=coord && printf 'subjectAltName=IP:127.0.0.1\\n' > coord.ext && "
      "openssl x509 -req -in coord.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -out coord.pem -extfile "
      "coord.ext >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  return {std::istreambuf_iterator<char>(f), {}};
}

TEST_F(ClusterTrust, OverTlsOnlyAMemberThatTrustsTheCoordinatorsCaJoins) {
  const std::string dir = std::filesystem::temp_directory_path() / ("sgemm-cluster-tls-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(make_pki(dir)) << "openssl failed";
  grpc::SslServerCredentialsOptions ssl;
  ssl.pem_key_cert_pairs.push_back({slurp(dir + "/coord.key"), slurp(dir + "/coord.pem")});
  ClusterOptions co = test_cluster_options("coordinator", nullptr);
  co.token = kToken;
  start(co, grpc::SslServerCredentials(ssl));
  ClusterOptions plain = test_cluster_options("plaintext", &plain_log);
  plain.token = kToken;
  add_member(plain);
  ClusterOptions tls = test_cluster_options("tls", nullptr);
  tls.token = kToken;
  tls.tls_ca_file = dir + "/ca.pem";
  ASSERT_TRUE(cluster_channel_credentials(tls).ok());
  add_member(tls);
  ASSERT_TRUE(eventually([&] { return coord_->member_count() == 1; }));
  ASSERT_TRUE(eventually([&] { return plain_log.has("lost the coordinator"); }));
  EXPECT_EQ(coord_->member_count(), 1);
  ClusterOptions missing = tls;
  missing.tls_ca_file = dir + "/nope.pem";
  EXPECT_EQ(cluster_channel_credentials(missing).status().code(), StatusCode::kInvalidArgument);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sgemm
