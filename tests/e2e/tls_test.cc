// TLS and mutual TLS against the real server, with certificates generated at
// test time by the openssl CLI: TLS serves, plaintext is refused, mutual TLS
// refuses a client without a certificate (or with one from another CA) and
// serves one with a certificate, and SIGHUP swaps the certificate while a
// request is in flight: that request completes, new connections see the new
// certificate.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <openssl/crypto.h>
#include <signal.h>

#include <cstring>
#include <filesystem>

#include "sgemm/v1/sgemm.grpc.pb.h"
#include "tests/e2e/trust_helpers.h"

namespace sgemm {
namespace {

namespace v1 = ::sgemm::v1;
namespace fs = std::filesystem;

// A channel refused by the server (another CA, no client certificate) keeps
// reconnecting on gRPC's own threads until the process exits; OpenSSL's atexit
// handler would free its error tables under a handshake still in progress (a
// crash at exit under ThreadSanitizer, after every test had passed). The
// process keeps libcrypto until it ends instead.
[[maybe_unused]] const bool kOpenSslStaysUntilExit = OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr) == 1;
using testing::multiply_verified;
using testing::ServerProcess;
using testing::TestPki;

class TlsE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    pki_ = new TestPki{testing::make_temp_dir()};
    std::string err;
    ok_ = pki_->make_ca("ca1", &err) && pki_->make_leaf("ca1", "server1", &err) &&
          pki_->make_leaf("ca1", "client1", &err) && pki_->make_ca("ca2", &err) &&
          pki_->make_leaf("ca2", "server2", &err) && pki_->make_leaf("ca2", "client2", &err);
    error_ = err;
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(pki_->dir, ec);
    delete pki_;
  }
  void SetUp() override { ASSERT_TRUE(ok_) << "openssl: " << error_; }

  static ClientOptions tls_to(const std::string& ca, const std::string& client = "") {
    ClientOptions o;
    o.tls.ca_file = pki_->path(ca + ".pem");
    if (!client.empty()) {
      o.tls.cert_file = pki_->path(client + ".pem");
      o.tls.key_file = pki_->path(client + ".key");
    }
    o.retry.max_attempts = 1;
    return o;
  }
  static std::vector<std::string> server_flags(const std::string& leaf) {
    return {"--tls-cert", pki_->path(leaf + ".pem"), "--tls-key", pki_->path(leaf + ".key")};
  }

  static TestPki* pki_;
  static bool ok_;
  static std::string error_;
};
TestPki* TlsE2E::pki_ = nullptr;
bool TlsE2E::ok_ = false;
std::string TlsE2E::error_;

TEST_F(TlsE2E, ServesOverTlsAndRefusesPlaintext) {
  ServerProcess server(server_flags("server1"));
  ASSERT_TRUE(server.running()) << server.log();
  EXPECT_TRUE(server.log_has("TLS")) << server.log();

  auto tls = Client::connect(server.address(), tls_to("ca1"));
  const Status served = multiply_verified(*tls, {63, 17, 129});
  EXPECT_TRUE(served.ok()) << served.to_string();

  // The server name may differ from the address when the certificate says so.
  ClientOptions by_name = tls_to("ca1");
  by_name.tls.server_name = "localhost";
  auto named = Client::connect(server.address(), by_name);
  EXPECT_TRUE(multiply_verified(*named).ok());

  ClientOptions plain;
  plain.retry.max_attempts = 1;
  auto plaintext = Client::connect(server.address(), plain);
  auto info = plaintext->info(std::chrono::milliseconds(3000));
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), StatusCode::kUnavailable) << info.status().to_string();

  // A CA that did not sign the server's certificate: the client refuses the server.
  auto wrong_ca = Client::connect(server.address(), tls_to("ca2"));
  EXPECT_FALSE(wrong_ca->info(std::chrono::milliseconds(3000)).ok());

  // Meanwhile the TLS client is still served.
  EXPECT_TRUE(multiply_verified(*tls).ok());
  EXPECT_EQ(server.stop(), 0);
}

TEST_F(TlsE2E, MutualTlsRequiresAClientCertificateFromTheCa) {
  auto flags = server_flags("server1");
  flags.insert(flags.end(), {"--tls-client-ca", pki_->path("ca1.pem")});
  ServerProcess server(flags);
  ASSERT_TRUE(server.running()) << server.log();

  auto with_cert = Client::connect(server.address(), tls_to("ca1", "client1"));
  const Status served = multiply_verified(*with_cert, {100, 31, 7});
  EXPECT_TRUE(served.ok()) << served.to_string();

  auto without = Client::connect(server.address(), tls_to("ca1"));
  auto r = without->info(std::chrono::milliseconds(3000));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().to_string();
  std::vector<float> a(4, 1.0f), b(4, 1.0f);
  EXPECT_FALSE(without->multiply({2, 2, 2}, a.data(), b.data(), nullptr, {}).ok());

  auto other_ca = Client::connect(server.address(), tls_to("ca1", "client2"));
  EXPECT_FALSE(other_ca->info(std::chrono::milliseconds(3000)).ok());

  EXPECT_TRUE(multiply_verified(*with_cert).ok());
  EXPECT_EQ(server.stop(), 0);
}

TEST_F(TlsE2E, BadTlsFilesStopTheServerAtStartWithTheFlagNamed) {
  ServerProcess server({"--tls-cert", pki_->path("server1.key"), "--tls-key", pki_->path("server1.key")});
  EXPECT_FALSE(server.running());
  EXPECT_NE(server.log().find("--tls-cert"), std::string::npos) << server.log();
}

TEST_F(TlsE2E, SighupSwapsTheCertificateWithoutDroppingARequestInFlight) {
  const std::string live = pki_->dir + "/live";
  fs::create_directories(live);
  fs::copy_file(pki_->path("server1.pem"), live + "/cert.pem", fs::copy_options::overwrite_existing);
  fs::copy_file(pki_->path("server1.key"), live + "/key.pem", fs::copy_options::overwrite_existing);
  ServerProcess server({"--tls-cert", live + "/cert.pem", "--tls-key", live + "/key.pem"});
  ASSERT_TRUE(server.running()) << server.log();

  // A request in flight on a connection made with the first certificate:
  // header, A and half of B sent.
  const GemmShape s{64, 48, 80};
  std::vector<float> a(std::size_t(s.m * s.k)), b(std::size_t(s.k * s.n));
  const uint64_t seed = testing::trust_seed();
  fill_random(a, seed);
  fill_random(b, seed + 1);
  grpc::SslCredentialsOptions so;
  {
    std::ifstream f(pki_->path("ca1.pem"));
    so.pem_root_certs.assign(std::istreambuf_iterator<char>(f), {});
  }
  auto channel = grpc::CreateChannel(server.address(), grpc::SslCredentials(so));
  auto stub = v1::Sgemm::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto stream = stub->Multiply(&ctx);
  v1::MultiplyRequest req;
  req.mutable_header()->set_m(s.m);
  req.mutable_header()->set_n(s.n);
  req.mutable_header()->set_k(s.k);
  ASSERT_TRUE(stream->Write(req));
  auto send = [&](v1::Matrix m, const std::vector<float>& v, std::size_t begin, std::size_t end) {
    v1::MultiplyRequest c;
    c.mutable_chunk()->set_matrix(m);
    c.mutable_chunk()->set_offset(int64_t(begin));
    c.mutable_chunk()->set_data(std::string(reinterpret_cast<const char*>(v.data() + begin), (end - begin) * 4));
    return stream->Write(c);
  };
  ASSERT_TRUE(send(v1::MATRIX_A, a, 0, a.size()));
  ASSERT_TRUE(send(v1::MATRIX_B, b, 0, b.size() / 2));

  // New files from another CA, then SIGHUP.
  fs::copy_file(pki_->path("server2.pem"), live + "/cert.pem", fs::copy_options::overwrite_existing);
  fs::copy_file(pki_->path("server2.key"), live + "/key.pem", fs::copy_options::overwrite_existing);
  ASSERT_EQ(kill(server.pid(), SIGHUP), 0);
  ASSERT_TRUE(server.log_has("TLS certificate reloaded")) << server.log();

  // New connections see the new certificate once gRPC's watcher has reread
  // the staged files (every second): polled, each try on a new connection. gRPC
  // shares one connection (and its reconnect backoff, which grows to seconds after
  // failed handshakes) among channels with equal arguments: a distinct argument per
  // try gives each its own.
  bool new_ca_served = false;
  int tries = 0;
  for (const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
       !new_ca_served && std::chrono::steady_clock::now() < give_up;) {
    ClientOptions o = tls_to("ca2");
    o.channel_args.emplace_back("sgemm.test.try", ++tries);
    new_ca_served = Client::connect(server.address(), o)->info(std::chrono::milliseconds(3000)).ok();
    if (!new_ca_served) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(new_ca_served) << "the new certificate was not served within 30 s\n" << server.log();
  auto new_ca = Client::connect(server.address(), tls_to("ca2"));
  const Status served = multiply_verified(*new_ca);
  EXPECT_TRUE(served.ok()) << served.to_string();
  auto old_ca = Client::connect(server.address(), tls_to("ca1"));
  EXPECT_FALSE(old_ca->info(std::chrono::milliseconds(3000)).ok());

  // The request in flight completes, correctly.
  ASSERT_TRUE(send(v1::MATRIX_B, b, b.size() / 2, b.size()));
  stream->WritesDone();
  std::vector<float> c(std::size_t(s.m * s.n), -1.0f);
  v1::MultiplyResponse resp;
  bool summary = false;
  while (stream->Read(&resp)) {
    if (resp.has_chunk()) {
      const auto& d = resp.chunk().data();
      std::memcpy(c.data() + resp.chunk().offset(), d.data(), d.size());
    }
    summary = summary || resp.has_summary();
  }
  const grpc::Status st = stream->Finish();
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_TRUE(summary);
  auto v = verify_gemm(s.m, s.n, s.k, 1.0f, a.data(), b.data(), 0.0f, nullptr, c.data(),
                       rows_to_verify(s.m, s.n, s.k, seed));
  EXPECT_TRUE(v.passed(kSgemmTolerance)) << v.max_rel_error;

  // A reload with a broken key keeps the working certificate.
  { std::ofstream(live + "/key.pem") << "not a key\n"; }
  ASSERT_EQ(kill(server.pid(), SIGHUP), 0);
  EXPECT_TRUE(server.log_has("TLS files not reloaded")) << server.log();
  // Nothing is awaited here: the broken files must never be served, so the
  // test gives the watcher two of its rereads to (wrongly) pick them up.
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  auto after = Client::connect(server.address(), tls_to("ca2"));
  EXPECT_TRUE(multiply_verified(*after).ok());
  EXPECT_EQ(server.stop(), 0);
}

}  // namespace
}  // namespace sgemm
