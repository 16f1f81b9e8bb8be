#include "server/service/heap_trim.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

namespace sgemm {
namespace {

constexpr int64_t MiB = int64_t{1} << 20;

HeapFigures figures(int64_t resident_mib, int64_t in_use_mib, int64_t mapped_mib = 0) {
  return {resident_mib * MiB, in_use_mib * MiB, mapped_mib * MiB};
}

// A burst before the first look (start-up, or a flood in the first second)
// would otherwise stay resident: it would be the baseline.
TEST(HeapTrimPolicy, TheFirstLookTrimsAndItsResultIsTheBaseline) {
  HeapTrimPolicy p;
  EXPECT_TRUE(p.should_trim(figures(200, 10)));
  p.trimmed(figures(180, 10));
  EXPECT_FALSE(p.should_trim(figures(180, 10)));
  EXPECT_TRUE(p.should_trim(figures(200, 10)));
}

TEST(HeapTrimPolicy, LiveMemoryIsNotSlack) {
  HeapTrimPolicy p;
  p.trimmed(figures(180, 20, 0));
  EXPECT_FALSE(p.should_trim(figures(380, 120, 100)));  // 100 MiB more in the arenas and 100 mapped, all live
}

TEST(HeapTrimPolicy, FreedResidentMemoryPastTheGrowthIsTrimmedOnce) {
  HeapTrimPolicy p;
  p.trimmed(figures(180, 20));
  EXPECT_FALSE(p.should_trim(figures(183, 20)));  // 3 MiB freed: under the growth
  EXPECT_TRUE(p.should_trim(figures(200, 20)));   // a flood's 20 MiB freed, still resident
  p.trimmed(figures(181, 20));
  EXPECT_FALSE(p.should_trim(figures(181, 20)));
  EXPECT_FALSE(p.should_trim(figures(184, 20)));
}

TEST(HeapTrimPolicy, GrowthCountsFromTheLeastSlackSinceTheTrim) {
  HeapTrimPolicy p;
  p.trimmed(figures(200, 20));
  EXPECT_FALSE(p.should_trim(figures(190, 20)));  // a thread's stack unmapped: 10 MiB less slack
  EXPECT_TRUE(p.should_trim(figures(198, 20)));   // then 8 MiB freed: back near the old figure, yet 8 MiB to return
}

TEST(HeapTrimPolicy, FreedMemoryThatWasReusedAfterATrimCountsAgain) {
  HeapTrimPolicy p;
  p.trimmed(figures(180, 20));
  EXPECT_FALSE(p.should_trim(figures(280, 120)));  // a request's 100 MiB, live
  EXPECT_TRUE(p.should_trim(figures(280, 20)));    // freed: its pages stay resident until trimmed
}

// The real mechanism: heap memory freed in many pieces (below malloc's mmap
// threshold: it stays in the arena) is resident slack until the trim.
TEST(HeapTrim, FreedArenaMemoryGoesBackToTheSystem) {
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "a sanitizer's allocator replaces malloc's arenas";
#else
  HeapTrimPolicy p;
  EXPECT_TRUE(trim_heap_if_grown(p)) << "the first look trims";
  constexpr std::size_t kPiece = 64 << 10;
  constexpr int kPieces = 512;  // 32 MiB
  std::vector<std::unique_ptr<char[]> > pieces;
  for (int i = 0; i < kPieces; ++i) {
    pieces.emplace_back(new char[kPiece]);
    std::memset(pieces.back().get(), i & 0xff, kPiece);  // resident
  }
  const HeapFigures held = heap_figures();
  EXPECT_FALSE(trim_heap_if_grown(p)) << "live memory is not slack";
  // Free all but the last piece (it keeps the arena's top from shrinking on its own).
  for (int i = 0; i + 1 < kPieces; ++i) pieces[i].reset();
  const HeapFigures freed = heap_figures();
  EXPECT_GE(freed.slack() - held.slack(), 16 * MiB) << "freed pieces stay resident until trimmed";
  EXPECT_TRUE(trim_heap_if_grown(p));
  const HeapFigures after = heap_figures();
  EXPECT_LE(after.resident, freed.resident - 16 * MiB) << "the trim returned the freed pieces";
  EXPECT_FALSE(trim_heap_if_grown(p)) << "nothing new to return";
#endif
}

}  // namespace
}  // namespace sgemm
