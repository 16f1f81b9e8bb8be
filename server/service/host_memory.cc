#include "server/service/host_memory.h"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <vector>

namespace sgemm {
namespace {

// v1 writes "no limit" as the largest page-aligned int64 (9223372036854771712);
// anything from 2^60 on (an exbibyte) is no limit.
constexpr int64_t kNoLimit = int64_t{1} << 60;

std::optional<int64_t> read_limit(const std::string& path) {
  std::ifstream f(path);
  if (!f) return std::nullopt;
  std::string text;
  f >> text;
  if (text.empty() || text == "max") return std::nullopt;
  try {
    std::size_t used = 0;
    const long long v = std::stoll(text, &used);
    if (used != text.size() || v <= 0 || v >= kNoLimit) return std::nullopt;
    return int64_t(v);
  } catch (const std::exception&) {
    return std::nullopt;  // out of range (no limit) or not a number
  }
}

// The smallest limit in `file` of the cgroup at `base` + `path` and of each ancestor up to `base`.
std::optional<MemoryLimit> tightest(const std::string& base, std::string path, const std::string& file,
                                    const char* kind) {
  std::optional<MemoryLimit> best;
  for (;;) {
    while (path.size() > 1 && path.back() == '/') path.pop_back();
    const std::string full = base + (path == "/" ? "" : path) + "/" + file;
    if (auto v = read_limit(full); v && (!best || *v < best->bytes))
      best = MemoryLimit{*v, std::string(kind) + " " + full};
    if (path.empty() || path == "/") break;
    const auto slash = path.rfind('/');
    path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
  }
  return best;
}

}  // namespace

std::optional<MemoryLimit> cgroup_memory_limit(const std::string& cgroup_root, const std::string& proc_self_cgroup) {
  std::istringstream in(proc_self_cgroup);
  std::optional<MemoryLimit> v1, v2;
  for (std::string line; std::getline(in, line);) {
    // hierarchy-ID:controller-list:cgroup-path (the path may itself hold ':')
    const auto c1 = line.find(':');
    const auto c2 = c1 == std::string::npos ? std::string::npos : line.find(':', c1 + 1);
    if (c2 == std::string::npos) continue;
    const std::string id = line.substr(0, c1), controllers = line.substr(c1 + 1, c2 - c1 - 1);
    const std::string path = line.substr(c2 + 1);
    if (id == "0" && controllers.empty()) {
      v2 = tightest(cgroup_root, path, "memory.max", "cgroup v2");
      continue;
    }
    std::stringstream list(controllers);
    for (std::string c; std::getline(list, c, ',');)
      if (c == "memory") v1 = tightest(cgroup_root + "/memory", path, "memory.limit_in_bytes", "cgroup v1");
  }
  // A hybrid host lists both; the memory controller is then v1's.
  return v1 ? v1 : v2;
}

MemoryLimit host_memory_limit() {
  MemoryLimit limit{int64_t{16} << 30, "a guess (sysconf gave no physical memory size)"};
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) limit = {int64_t(pages) * int64_t(page), "physical memory"};
  std::ifstream f("/proc/self/cgroup");
  const std::string text{std::istreambuf_iterator<char>(f), {}};
  if (auto c = cgroup_memory_limit("/sys/fs/cgroup", text); c && c->bytes < limit.bytes) limit = *c;
  return limit;
}

}  // namespace sgemm
