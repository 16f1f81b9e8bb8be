// Returning freed heap to the system.
//
// glibc keeps freed memory in its arenas: after a burst (a reset storm, a
// flood of streams gRPC serves itself, the last of many requests) the
// resident set would stay at its high water. Much of it is freed by gRPC on
// its own threads, seconds after the calls that caused it have ended, so
// the service's own events cannot say when to trim. The figures can:
// "slack", the resident set less the heap in use and malloc's mapped
// chunks, is the freed memory still resident (plus what no trim returns:
// code, stacks, fragments). The first look trims; at each later one (the
// caller paces them) the slack is compared with the least seen since the
// last trim; grown by kGrowthBytes, the heap is trimmed and the figure just
// after the trim kept.
#pragma once

#include <cstdint>

namespace sgemm {

struct HeapFigures {
  int64_t resident = 0;     // the process's resident set
  int64_t heap_in_use = 0;  // malloc's arena bytes in use
  int64_t mapped = 0;       // malloc's chunks of their own mapping (in use)
  int64_t slack() const { return resident - heap_in_use - mapped; }
};

class HeapTrimPolicy {
 public:
  static constexpr int64_t kGrowthBytes = int64_t{4} << 20;
  // Whether to trim now (the first look does).
  bool should_trim(const HeapFigures& now);
  // The figures just after a trim: later growth counts from them.
  void trimmed(const HeapFigures& after) { slack_after_trim_ = after.slack(); }

 private:
  int64_t slack_after_trim_ = -1;
};

// This process's figures (/proc/self/statm, mallinfo2).
HeapFigures heap_figures();

// One look: trims the heap when the policy says so; true if it did.
bool trim_heap_if_grown(HeapTrimPolicy& policy);

}  // namespace sgemm
