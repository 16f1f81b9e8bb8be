// A logger front that lets at most `per_second` lines through each second and
// reports how many it dropped with the next line that goes out, so a storm of
// failing streams (20,000 resets in a fraction of a second) costs a few lines.
//
// Every line goes out through log_line() (common/log_text.h): a caller's text
// in it cannot break it into two records; callers put quoted fields through
// log_field().
//
// Threads: log() is thread-safe.
#pragma once

#include <spdlog/logger.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "common/log_text.h"

namespace sgemm {

class RateLimitedLog {
 public:
  RateLimitedLog(std::shared_ptr<spdlog::logger> log, int per_second) : log_(std::move(log)), per_second_(per_second) {}

  // Whether a line at `level` would go out now; when not, it is counted as
  // dropped. Lets the caller skip formatting a line nobody will read.
  bool admit(spdlog::level::level_enum level) {
    if (!log_->should_log(level)) return false;
    std::lock_guard lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    if (now - window_start_ >= std::chrono::seconds(1)) {
      window_start_ = now;
      in_window_ = 0;
    }
    if (per_second_ > 0 && in_window_ >= per_second_) {
      ++dropped_;
      return false;
    }
    ++in_window_;
    return true;
  }

  // Writes a line admit() let through, first reporting the lines dropped since the last one.
  void write(spdlog::level::level_enum level, const std::string& line) {
    int64_t dropped;
    {
      std::lock_guard lock(mu_);
      dropped = dropped_;
      dropped_ = 0;
    }
    if (dropped > 0) log_->warn("{} similar log lines suppressed (more than {} a second)", dropped, per_second_);
    log_->log(level, log_line(line));
  }

  void log(spdlog::level::level_enum level, const std::string& line) {
    if (admit(level)) write(level, line);
  }

  spdlog::logger& logger() { return *log_; }

 private:
  std::shared_ptr<spdlog::logger> log_;
  const int per_second_;
  std::mutex mu_;
  std::chrono::steady_clock::time_point window_start_{};  // guarded by mu_
  int in_window_ = 0;                                     // guarded by mu_
  int64_t dropped_ = 0;                                   // guarded by mu_
};

}  // namespace sgemm
