// The e2e tests' view of the real sgemm-server (server_spawn.h), with the
// GoogleTest expectations the suites share: polling GetInfo for an event,
// the server's request memory released, its resident set back after an attack.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <type_traits>

#include "tests/e2e/server_spawn.h"

namespace sgemm::testing {

// sgemm-client under test: the compiled-in build path, or SGEMM_CLIENT_BIN at
// run time (a build carried to another host), as server_bin() is for the server.
inline std::string client_bin() {
  const char* e = std::getenv("SGEMM_CLIENT_BIN");
  return e ? e : SGEMM_CLIENT_BIN;
}

// Polls GetInfo until `pred(info)` holds, for up to `within` (a request's
// messages reach the server some time after Write() returns, later under
// load); returns the last info seen, for the caller's expectations.
template <typename ClientT, typename Pred>
auto info_when(ClientT& client, Pred pred,
               std::chrono::milliseconds within = std::chrono::milliseconds(ServerLog::kEventWaitMs)) {
  std::remove_cvref_t<decltype(*client.info())> last{};
  const auto give_up = std::chrono::steady_clock::now() + within;
  for (;;) {
    auto info = client.info();
    EXPECT_TRUE(info.ok()) << info.status().to_string();
    if (!info.ok()) break;
    last = *info;
    if (pred(last) || std::chrono::steady_clock::now() >= give_up) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return last;
}

// Polls GetInfo until the server holds no request memory, has no Multiply
// stream open and nothing in flight (a stream's reactor finishes just after its
// client sees the status), for up to `within`. Expects all three to reach
// zero, naming `what` on failure, and returns the last info seen.
template <typename ClientT>
auto expect_released(ClientT& client, const char* what = "",
                     std::chrono::milliseconds within = std::chrono::milliseconds(ServerLog::kEventWaitMs)) {
  std::remove_cvref_t<decltype(*client.info())> last{};
  const auto give_up = std::chrono::steady_clock::now() + within;
  for (;;) {
    auto info = client.info();
    EXPECT_TRUE(info.ok()) << info.status().to_string();
    if (!info.ok()) return last;
    last = *info;
    if (last.host_bytes_in_use == 0 && last.open_streams == 0 && last.in_flight == 0) break;
    if (std::chrono::steady_clock::now() >= give_up) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(last.host_bytes_in_use, 0) << what << ": request memory still held";
  EXPECT_EQ(last.open_streams, 0) << what << ": streams still open";
  EXPECT_EQ(last.in_flight, 0) << what << ": requests still in flight";
  return last;
}

// Within 10 s of an attack's end the server's resident set is back within 5%
// of where it started (plus 4 MiB for the allocator's and gRPC's rounding).
// Not checked under a sanitizer: its allocator and shadow memory keep what
// the server frees.
inline void expect_rss_back(pid_t pid, int64_t start, const char* what) {
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  (void)pid;
  (void)start;
  std::printf("[ info ] %s: resident set not checked under a sanitizer\n", what);
#else
  const RssRecovery r = wait_rss_at_most(pid, start + start / 20 + (4 << 20));
  EXPECT_TRUE(r.back) << what << ": RSS " << r.rss << " bytes 10 s after, " << start << " before the attack";
  std::printf("[ info ] %s: RSS %.1f MiB %.2f s after, %.1f MiB before the attack\n", what, r.rss / 1048576.0,
              r.after_s, start / 1048576.0);
#endif
}

}  // namespace sgemm::testing
