// The request ring's layout checks and its process-shared futex
// (common/request_ring.h); the server's and client's use of it is tested end
// to end in tests/e2e/ring_test.cc.
#include "common/request_ring.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <thread>

namespace sgemm::ring {
namespace {

TEST(RequestRing, LayoutChecksNameTheField) {
  const int64_t fits = ring_bytes(4, 4096);
  EXPECT_EQ(fits, 64 + 4 * 4096);
  EXPECT_TRUE(check_layout(0, 4, 4096, fits).ok());
  EXPECT_TRUE(check_layout(64, 4, 4096, fits + 64).ok());
  struct Bad {
    int64_t offset, slots, slot_bytes, region;
    const char* field;
  };
  for (const Bad& b :
       {Bad{3, 4, 4096, fits, "offset"}, Bad{-64, 4, 4096, fits, "offset"}, Bad{0, 0, 4096, fits, "slots"},
        Bad{0, kMaxSlots + 1, 4096, int64_t(1) << 40, "slots"}, Bad{0, 4, 4000, fits, "slot_bytes"},
        Bad{0, 4, 4096 + 32, fits, "slot_bytes"}, Bad{0, 1, kMaxSlotBytes + 64, int64_t(1) << 30, "slot_bytes"},
        Bad{64, 4, 4096, fits, "does not fit"}, Bad{0, 4, 4096, fits - 1, "does not fit"},
        Bad{int64_t(1) << 40, 1, 4096, fits, "does not fit"}}) {
    const Status st = check_layout(b.offset, b.slots, b.slot_bytes, b.region);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << b.field;
    EXPECT_NE(st.message().find(b.field), std::string::npos) << st.message();
  }
}

TEST(RequestRing, FormatThenCheckHeader) {
  const int slots = 3;
  const int64_t slot_bytes = 4096;
  auto* memory = static_cast<uint8_t*>(std::aligned_alloc(64, std::size_t(ring_bytes(slots, slot_bytes))));
  std::unique_ptr<uint8_t, decltype(&std::free)> hold(memory, &std::free);
  RingView view(memory, slots, slot_bytes);
  view.format();
  EXPECT_TRUE(view.check_header().ok());
  for (int i = 0; i < slots; ++i) EXPECT_EQ(view.slot(i)->state.load(), uint32_t(kFree));
  EXPECT_EQ(view.payload(1) - view.payload(0), slot_bytes);
  EXPECT_EQ(view.payload_capacity(), slot_bytes - kSlotHeaderBytes);
  // A reader that expects another layout, or a header the caller changed, is told which.
  EXPECT_NE(RingView(memory, slots + 1, slot_bytes).check_header().message().find("does not match"), std::string::npos);
  view.header()->version = kVersion + 1;
  EXPECT_NE(view.check_header().message().find("version"), std::string::npos);
  view.header()->magic = 0;
  EXPECT_NE(view.check_header().message().find("magic"), std::string::npos);
}

TEST(RequestRing, AWakeEndsAWaitAndAChangedWordNeverSleeps) {
  std::atomic<uint32_t> word{0};
  // The word is not what the waiter expects: it returns at once.
  const auto t0 = std::chrono::steady_clock::now();
  futex_wait(&word, 1, 10'000'000);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  // A waiter on the expected value is woken by the change and the wake.
  std::atomic<bool> woke{false};
  std::thread waiter([&] {
    while (word.load() == 0) futex_wait(&word, 0, 10'000'000);
    woke = true;
  });
  word.store(1);
  futex_wake_all(&word);
  waiter.join();
  EXPECT_TRUE(woke.load());
}

}  // namespace
}  // namespace sgemm::ring
