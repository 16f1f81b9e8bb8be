// The checks every attack test makes (docs/security.md, "Done when"): the
// server survives, a normal request completes correctly while the attack runs
// (normal_traffic.h), and its resident set is back within 5% of its start
// within 10 s after the attack ends (server_process.h, expect_rss_back).
//
// Latency bounds here are generous (shared 2-core CI machines, sanitizers
// running the server 5-15x slower): the figures are printed as "[ info ]"
// lines, and sgemm-attack-bench, not the tests, holds the targets (100 ms;
// 1 s under a rapid-reset storm).
#pragma once

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>

#include "client/sgemm_client.h"
#include "tests/e2e/normal_traffic.h"
#include "tests/e2e/server_process.h"

namespace sgemm::testing {

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
inline constexpr double kNormalRequestBoundMs = 20000;
#else
inline constexpr double kNormalRequestBoundMs = 2000;
#endif

// The server process is alive, and one normal request from a fresh client on
// its TCP address (with `options`: TLS, a token) completes correctly within
// `bound_ms`. Returns the request's latency.
inline double expect_served(const ServerProcess& server, const char* what, const ClientOptions& options = {},
                            double bound_ms = kNormalRequestBoundMs) {
  SCOPED_TRACE(what);
  EXPECT_TRUE(server.alive()) << "the server process is gone: " << server.log();
  if (!server.alive()) return 0;
  auto client = Client::connect(server.tcp_address(), options);
  const NormalOutcome o = normal_request(*client, fresh_seed());
  EXPECT_TRUE(o.status.ok()) << o.status.to_string();
  EXPECT_TRUE(!o.status.ok() || o.correct) << "a normal request came back wrong";
  EXPECT_LT(o.ms, bound_ms) << what << ": a normal request took " << o.ms << " ms";
  std::printf("[ info ] %s: a normal request took %.1f ms\n", what, o.ms);
  return o.ms;
}

// The normal requests sent while an attack ran (NormalTrafficThread::stop()):
// at least one, none failed or wrong, the slowest within `bound_ms`.
inline void expect_traffic_served(const NormalTraffic& t, const char* what, double bound_ms = kNormalRequestBoundMs) {
  EXPECT_GE(t.count(), 1u) << what << ": no normal request ran during the attack";
  EXPECT_EQ(t.failed, 0) << what << ": normal requests failed, the first: " << t.first_error;
  EXPECT_EQ(t.wrong, 0) << what << ": normal requests came back wrong";
  EXPECT_LT(t.max(), bound_ms) << what << ": the slowest normal request took " << t.max() << " ms";
  std::printf("[ info ] %s: %zu normal requests, p50 %.1f ms, the slowest %.1f ms\n", what, t.count(), t.pct(0.5),
              t.max());
}

// The server exits 0 on SIGTERM once the attack is over. A sanitizer report
// in the server ends it with exit 66 (at once under halt_on_error=1, as CI
// runs it), which its callers see only as connections reset: the failure
// names the exit code and quotes the report from the server's log.
inline void expect_clean_exit(ServerProcess& server, const char* what) {
  const int code = server.stop();
  if (code == 0) return;
  const std::string log = server.log();
  const std::size_t report = log.find("Sanitizer");
  if (report != std::string::npos) {
    const std::size_t line = log.rfind('\n', report);
    ADD_FAILURE() << what << ": the server exited " << code << ", not 0, on SIGTERM; a sanitizer reported:\n"
                  << log.substr(line == std::string::npos ? 0 : line + 1, 8000);
  } else {
    ADD_FAILURE() << what << ": the server exited " << code << ", not 0, on SIGTERM; the end of its log:\n"
                  << log.substr(log.size() > 4000 ? log.size() - 4000 : 0);
  }
}

// An attack made of single requests, repeated so that it is in flight while
// normal requests run: `attack` (one round, checking what the attacker got)
// runs over and over while a NormalTrafficThread on `normal` sends normal
// requests, until at least `min_rounds` rounds have run and `min_normal`
// normal requests have completed beside them (or ServerLog::kEventWaitMs
// passed, or a round failed a check). Then the
// normal requests are checked (expect_traffic_served). Returns the rounds run.
inline int attack_beside_traffic(Client& normal, const std::function<void()>& attack, const char* what,
                                 int min_rounds = 3, std::size_t min_normal = 3,
                                 double bound_ms = kNormalRequestBoundMs) {
  const bool failed_before = ::testing::Test::HasFailure();
  NormalTrafficThread traffic(normal);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(ServerLog::kEventWaitMs);
  int rounds = 0;
  for (;;) {
    attack();
    ++rounds;
    if (!failed_before && ::testing::Test::HasFailure()) break;
    if (rounds >= min_rounds && traffic.completed() >= min_normal) break;
    if (std::chrono::steady_clock::now() >= give_up) break;
  }
  const NormalTraffic& t = traffic.stop();
  EXPECT_GE(t.count(), min_normal) << what << ": fewer normal requests than asked for ran beside the attack";
  expect_traffic_served(t, what, bound_ms);
  std::printf("[ info ] %s: %d rounds of the attack\n", what, rounds);
  return rounds;
}

}  // namespace sgemm::testing
