#include "server/app/process_setup.h"

#include <spdlog/sinks/rotating_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <sys/resource.h>

#include <algorithm>
#include <filesystem>
#include <sstream>

namespace sgemm {

StatusOr<ProcessLogs> open_process_logs(const LogOptions& options) {
  ProcessLogs out;
  std::vector<spdlog::sink_ptr> sinks{std::make_shared<spdlog::sinks::stdout_color_sink_mt>()};
  try {
    if (!options.dir.empty()) {
      std::filesystem::create_directories(options.dir);
      const auto max_bytes = static_cast<std::size_t>(options.max_bytes);
      const auto max_files = static_cast<std::size_t>(options.max_files);
      sinks.push_back(std::make_shared<spdlog::sinks::rotating_file_sink_mt>(options.dir + "/sgemm-server.log",
                                                                             max_bytes, max_files));
      auto timing_sink =
          std::make_shared<spdlog::sinks::rotating_file_sink_mt>(options.dir + "/timings.jsonl", max_bytes, max_files);
      timing_sink->set_pattern("%v");
      out.timing_log = std::make_shared<spdlog::logger>("timings", timing_sink);
      out.timing_log->flush_on(spdlog::level::info);
    }
  } catch (const std::exception& e) {
    return InvalidArgument("cannot open logs in --log-dir " + options.dir + ": " + e.what());
  }
  out.log = std::make_shared<spdlog::logger>("sgemm", sinks.begin(), sinks.end());
  out.log->set_level(spdlog::level::from_str(options.level));
  out.log->flush_on(std::min(out.log->level(), spdlog::level::info));
  return out;
}

std::pair<uint64_t, uint64_t> raise_open_files_limit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return {0, 0};
  const rlim_t before = r.rlim_cur;
  if (r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &r) != 0) return {before, before};
  }
  return {before, r.rlim_cur};
}

StatusOr<std::vector<int>> parse_device_list(const std::string& text) {
  std::vector<int> out;
  if (text == "all" || text.empty()) return out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      std::size_t used = 0;
      const int d = std::stoi(item, &used);
      if (used != item.size() || d < 0) throw std::invalid_argument(item);
      out.push_back(d);
    } catch (const std::exception&) {
      return InvalidArgument("--devices: '" + item + "' is not a device ordinal (use 'all' or e.g. 0,1)");
    }
  }
  return out;
}

}  // namespace sgemm
