// How much memory this process may use: the smaller of the host's physical
// memory and the memory limit of its cgroup (a container's `--memory`, a
// Kubernetes `resources.limits.memory`, a systemd `MemoryMax=`). The
// service's default budgets (--host-memory-bytes, --region-bytes) are shares
// of it, so a server in a container limited to N bytes refuses a request
// over its budget instead of being killed by the kernel's OOM killer.
//
// Threads: pure functions over files; callable from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace sgemm {

struct MemoryLimit {
  int64_t bytes = 0;
  std::string source;  // what set it: "cgroup v2 <file>", "cgroup v1 <file>" or "physical memory"
};

// The tightest memory limit of the cgroup this process is in, or nullopt
// where none is set ("max", or v1's "unlimited" of about 2^63) or none can
// be read. `cgroup_root` is where the cgroup file systems are mounted
// (/sys/fs/cgroup); `proc_self_cgroup` is the text of /proc/self/cgroup.
// cgroup v2 ("0::/PATH"): memory.max of PATH and of each ancestor under the
// root, the smallest. cgroup v1 ("N:...memory...:/PATH"): memory.limit_in_bytes
// under <root>/memory, likewise. Inside a container the cgroup namespace
// makes PATH "/", so the root's own file is read too.
std::optional<MemoryLimit> cgroup_memory_limit(const std::string& cgroup_root, const std::string& proc_self_cgroup);

// min(physical memory, this process's cgroup limit), with its source.
MemoryLimit host_memory_limit();

}  // namespace sgemm
