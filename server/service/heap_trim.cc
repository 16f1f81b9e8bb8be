#include "server/service/heap_trim.h"

#include <malloc.h>
#include <unistd.h>

#include <cstdio>

namespace sgemm {

bool HeapTrimPolicy::should_trim(const HeapFigures& now) {
  if (slack_after_trim_ < 0) return true;  // no baseline yet: what start-up freed goes too
  // Slack that shrank (a thread's stack unmapped, freed pages reused) is the
  // new floor: growth is counted from the least seen since the last trim.
  if (now.slack() < slack_after_trim_) slack_after_trim_ = now.slack();
  return now.slack() - slack_after_trim_ >= kGrowthBytes;
}

HeapFigures heap_figures() {
  HeapFigures f;
  if (std::FILE* statm = std::fopen("/proc/self/statm", "r")) {
    long long size = 0, resident = 0;
    if (std::fscanf(statm, "%lld %lld", &size, &resident) == 2) f.resident = resident * sysconf(_SC_PAGESIZE);
    std::fclose(statm);
  }
  const struct mallinfo2 mi = mallinfo2();
  f.heap_in_use = int64_t(mi.uordblks);
  f.mapped = int64_t(mi.hblkhd);
  return f;
}

bool trim_heap_if_grown(HeapTrimPolicy& policy) {
  if (!policy.should_trim(heap_figures())) return false;
  malloc_trim(0);
  policy.trimmed(heap_figures());
  return true;
}

}  // namespace sgemm
