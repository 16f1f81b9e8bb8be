// Starts the real sgemm-server binary on 127.0.0.1 with an ephemeral port and
// on a Unix socket in its temp dir, for end-to-end tests, and stops it with
// SIGTERM (checking it exits 0).
//
// SGEMM_E2E_TRANSPORT=shm makes address() the Unix socket ("unix:DIR/sgemm.sock"),
// where sgemm::Client's default transport (auto) moves matrices through shared
// memory: the whole e2e suite then runs over shm. Default (or grpc): TCP.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

extern char** environ;

namespace sgemm::testing {

// The binaries under test: compiled-in build paths, overridable at run time
// (SGEMM_SERVER_BIN / SGEMM_CLIENT_BIN) for builds carried to another host.
inline std::string server_bin() {
  const char* e = std::getenv("SGEMM_SERVER_BIN");
  return e ? e : SGEMM_SERVER_BIN;
}
inline std::string client_bin() {
  const char* e = std::getenv("SGEMM_CLIENT_BIN");
  return e ? e : SGEMM_CLIENT_BIN;
}

inline std::string make_temp_dir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "sgemm-e2e-XXXXXX").string();
  if (!mkdtemp(tmpl.data())) return {};
  return tmpl;
}

// The server's log, DIR/stdout.log, read by the tests (the process's stdout
// and stderr, or the in-process server's logger: tests/e2e/in_process_server.h).
class ServerLog {
 public:
  const std::string& dir() const { return dir_; }
  std::string log() const {
    std::ifstream f(dir_ + "/stdout.log");
    return {std::istreambuf_iterator<char>(f), {}};
  }
  // How long a test waits for an event it expects: the event usually comes
  // in milliseconds, and waiting returns as soon as it does, so the bound only
  // matters when something is wrong; it is long because a loaded CI machine,
  // or ThreadSanitizer, can be ten times slower than a developer's.
  static constexpr int kEventWaitMs = 30000;
  // Whether `text` appears in the log within `ms` (a failed request is logged
  // just after its client has the status).
  bool log_has(const std::string& text, int ms = kEventWaitMs) const { return log_count_reaches(text, 1, ms); }
  // How many times `text` appears in the log.
  int log_count(const std::string& text) const {
    const std::string all = log();
    int n = 0;
    for (auto at = all.find(text); at != std::string::npos; at = all.find(text, at + 1)) ++n;
    return n;
  }
  // Whether `text` appears at least `times` times in the log within `ms`.
  bool log_count_reaches(const std::string& text, int times, int ms = kEventWaitMs) const {
    return log_has_any({text}, ms, times);
  }
  // Whether one of `texts` appears at least `times` times in the log within
  // `ms` (for an event the server may log in one of several ways).
  bool log_has_any(const std::vector<std::string>& texts, int ms = kEventWaitMs, int times = 1) const {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    for (;;) {
      for (const auto& text : texts)
        if (log_count(text) >= times) return true;
      if (std::chrono::steady_clock::now() >= give_up) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  // SGEMM_E2E_TRANSPORT=shm: address() is the Unix socket, not TCP.
  static bool shm_transport() {
    const char* t = std::getenv("SGEMM_E2E_TRANSPORT");
    return t && std::string(t) == "shm";
  }

 protected:
  std::string dir_;
};

class ServerProcess : public ServerLog {
 public:
  // Extra flags after the defaults (127.0.0.1:0, a fresh log dir, SGEMM_E2E_BACKEND or auto).
  // `launcher`: a command that execs the server in its own process, before
  // the binary (e.g. {"/usr/bin/prlimit", "--nofile=256:256", "--"}): pid()
  // is still the server's.
  explicit ServerProcess(std::vector<std::string> extra = {}, std::vector<std::string> launcher = {}) {
    dir_ = make_temp_dir();
    const char* backend = std::getenv("SGEMM_E2E_BACKEND");
    std::vector<std::string> args = launcher;
    for (std::string a :
         {server_bin(), std::string("--listen"), std::string("127.0.0.1:0"), std::string("--listen"),
          "unix:" + dir_ + "/sgemm.sock", std::string("--port-file"), dir_ + "/port", std::string("--log-dir"),
          dir_ + "/logs", std::string("--backend"), std::string(backend ? backend : "auto")})
      args.push_back(std::move(a));
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    const std::string out = dir_ + "/stdout.log";
    posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    if (posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&fa);
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (pid_ > 0 && std::chrono::steady_clock::now() < give_up) {
      std::ifstream f(dir_ + "/port");
      if (f >> port_) break;
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {  // died at start
        pid_ = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  ~ServerProcess() {
    if (pid_ > 0) stop();
    std::error_code ec;
    if (!std::getenv("SGEMM_E2E_KEEP")) std::filesystem::remove_all(dir_, ec);
  }
  bool running() const { return pid_ > 0 && port_ > 0; }
  // The address tests use: TCP, or the Unix socket under SGEMM_E2E_TRANSPORT=shm.
  std::string address() const { return shm_transport() ? unix_address() : tcp_address(); }
  std::string tcp_address() const { return "127.0.0.1:" + std::to_string(port_); }
  std::string unix_address() const { return "unix:" + dir_ + "/sgemm.sock"; }
  pid_t pid() const { return pid_; }
  // SIGTERM, then waits; returns the exit code (or 128+signal).
  int stop() {
    if (pid_ <= 0) return -1;
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

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

struct CommandResult {
  int exit_code = -1;
  std::string output;
};

// Runs a shell command line and captures its stdout.
inline CommandResult run_command(const std::string& cmd) {
  CommandResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  std::size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// The port the server logged for --metrics-listen (waiting up to 10 s for the
// line), or 0.
inline int metrics_port(const ServerLog& server) {
  if (!server.log_has("/metrics (port ", 10000)) return 0;
  std::smatch match;
  const std::string log = server.log();
  if (!std::regex_search(log, match, std::regex(R"(/metrics \(port (\d+)\))"))) return 0;
  return std::stoi(match[1]);
}

// A process's resident set (VmRSS), bytes; -1 when it cannot be read.
inline int64_t rss_bytes(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return -1;
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
  const int64_t bound = start + start / 20 + (4 << 20);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  int64_t now = rss_bytes(pid);
  while (now > bound && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    now = rss_bytes(pid);
  }
  EXPECT_LE(now, bound) << what << ": RSS " << now << " bytes, " << start << " before the attack";
  std::printf("[ info ] %s: RSS %.1f MiB, %.1f MiB before the attack\n", what, now / 1048576.0, start / 1048576.0);
#endif
}

}  // namespace sgemm::testing
