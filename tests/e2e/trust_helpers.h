// Shared by the TLS and token e2e tests: certificates made with the openssl
// CLI at test time, and one verified product.
#pragma once

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "client/sgemm_client.h"
#include "common/reference_gemm.h"
#include "tests/e2e/server_process.h"

namespace sgemm::testing {

// A CA and certificates it signed, as PEM files under `dir`:
// <ca>.pem/.key, and for each leaf <name>.pem/.key.
struct TestPki {
  std::string dir;
  // Runs openssl; false (with the command in `error`) when it fails.
  bool run(const std::string& cmd, std::string* error) {
    auto r = run_command("cd '" + dir + "' && " + cmd + " 2>&1");
    if (r.exit_code != 0) *error = cmd + ": " + r.output;
    return r.exit_code == 0;
  }
  bool make_ca(const std::string& ca, std::string* error) {
    return run("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -keyout " + ca +
                   ".key -out " + ca + ".pem -subj /CN=" + ca,
               error);
  }
  // A leaf certificate for 127.0.0.1 and localhost signed by `ca`.
  bool make_leaf(const std::string& ca, const std::string& name, std::string* error) {
    return run("openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout " + name + ".key -out " +
                   name + ".csr -subj /CN=" + name + " && printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > " +
                   name + ".ext && openssl x509 -req -in " + name + ".csr -CA " + ca + ".pem -CAkey " + ca +
                   ".key -CAcreateserial -days 2 -out " + name + ".pem -extfile " + name + ".ext",
               error);
  }
  std::string path(const std::string& file) const { return dir + "/" + file; }
};

inline uint64_t trust_seed() { return std::random_device{}(); }

// One product on fresh random inputs, checked against the fp64 reference;
// returns the status when the call failed.
inline Status multiply_verified(Client& client, GemmShape s = {37, 29, 41}) {
  const uint64_t seed = trust_seed();
  std::vector<float> a(std::size_t(s.m * s.k)), b(std::size_t(s.k * s.n));
  fill_random(a, seed);
  fill_random(b, seed + 1);
  MultiplyOptions opt;
  opt.timeout = std::chrono::milliseconds(30000);
  auto r = client.multiply(s, a.data(), b.data(), nullptr, opt);
  if (!r.ok()) return r.status();
  EXPECT_EQ(int64_t(r->c.size()), s.m * s.n);
  auto v = verify_gemm(s.m, s.n, s.k, 1.0f, a.data(), b.data(), 0.0f, nullptr, r->c.data(),
                       rows_to_verify(s.m, s.n, s.k, seed));
  EXPECT_TRUE(v.passed(kSgemmTolerance)) << "max rel error " << v.max_rel_error;
  return Status::Ok();
}

}  // namespace sgemm::testing
