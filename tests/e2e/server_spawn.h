// The real sgemm-server binary started on 127.0.0.1 with an ephemeral port
// and on a Unix socket in its temp dir, stopped with SIGTERM; its log; its
// resident set. No GoogleTest here: the e2e tests (server_process.h) and
// sgemm-attack-bench share it.
//
// SGEMM_E2E_TRANSPORT=shm makes address() the Unix socket ("unix:DIR/sgemm.sock"),
// where sgemm::Client's default transport (auto) moves matrices through shared
// memory: the whole e2e suite then runs over shm. Default (or grpc): TCP.
#pragma once

#include <fcntl.h>
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
#include <vector>

extern char** environ;

namespace sgemm::testing {

// The binaries under test: compiled-in build paths, overridable at run time
// (SGEMM_SERVER_BIN / SGEMM_CLIENT_BIN) for builds carried to another host.
inline std::string server_bin() {
  const char* e = std::getenv("SGEMM_SERVER_BIN");
  return e ? e : SGEMM_SERVER_BIN;
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
  // `bin` and `backend`, when given, replace server_bin() and SGEMM_E2E_BACKEND
  // (a benchmark names its own).
  explicit ServerProcess(std::vector<std::string> extra = {}, std::vector<std::string> launcher = {},
                         std::string bin = {}, std::string backend = {}) {
    dir_ = make_temp_dir();
    if (bin.empty()) bin = server_bin();
    if (backend.empty()) {
      const char* e = std::getenv("SGEMM_E2E_BACKEND");
      backend = e ? e : "auto";
    }
    std::vector<std::string> args = launcher;
    for (std::string a : {bin, std::string("--listen"), std::string("127.0.0.1:0"), std::string("--listen"),
                          "unix:" + dir_ + "/sgemm.sock", std::string("--port-file"), dir_ + "/port",
                          std::string("--log-dir"), dir_ + "/logs", std::string("--backend"), backend})
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
  // Whether the process is still there (it has not died of a signal, say).
  bool alive() const { return pid_ > 0 && kill(pid_, 0) == 0; }
  int port() const { return port_; }
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

// Waits until `pid`'s resident set is at most `bound` bytes, for up to
// `within`, polling. Whether it got there, how long it took and the last figure.
struct RssRecovery {
  bool back = false;
  double after_s = 0;
  int64_t rss = -1;
};
inline RssRecovery wait_rss_at_most(pid_t pid, int64_t bound,
                                    std::chrono::milliseconds within = std::chrono::milliseconds(10000)) {
  const auto t0 = std::chrono::steady_clock::now();
  RssRecovery r;
  for (;;) {
    r.rss = rss_bytes(pid);
    r.after_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r.rss >= 0 && r.rss <= bound) {
      r.back = true;
      return r;
    }
    if (std::chrono::steady_clock::now() - t0 >= within) return r;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace sgemm::testing
