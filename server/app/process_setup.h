// What sgemm-server's main() sets up for its process before it builds a
// Server: the loggers (stdout and, with --log-dir, rotating files), the
// open-files limit, and the GPUs named by --devices. Kept out of the Server,
// which takes its loggers and engine ready-made (tests give it their own).
#pragma once

#include <spdlog/logger.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace sgemm {

struct LogOptions {
  std::string dir;                         // --log-dir: sgemm-server.log and timings.jsonl; "" = stdout only
  int64_t max_bytes = int64_t{100} << 20;  // each file rotates at this size ...
  int max_files = 5;                       // ... keeping this many older files of each
  std::string level = "info";              // trace, debug, info, warn, error
};

struct ProcessLogs {
  std::shared_ptr<spdlog::logger> log;         // the request log: stdout, and dir/sgemm-server.log
  std::shared_ptr<spdlog::logger> timing_log;  // sgemm.timing/1 lines in dir/timings.jsonl; null without a dir
};

// Opens the logs. Every line is flushed as it is written (at debug and trace
// too: whoever turns those on is watching), so a long-lived server's files
// stay within (max_files + 1) x max_bytes each. INVALID_ARGUMENT naming
// --log-dir when its files cannot be opened.
StatusOr<ProcessLogs> open_process_logs(const LogOptions& options);

// Raises the soft limit on open files to the hard limit: every connection is
// a descriptor, and Debian's default soft limit (1024) is below
// --max-open-streams. Returns {before, after} (equal when nothing changed).
std::pair<uint64_t, uint64_t> raise_open_files_limit();

// --devices: "all" (or "") = every GPU (an empty list); else a comma list of
// CUDA ordinals. INVALID_ARGUMENT naming the flag and the bad item.
StatusOr<std::vector<int>> parse_device_list(const std::string& text);

}  // namespace sgemm
