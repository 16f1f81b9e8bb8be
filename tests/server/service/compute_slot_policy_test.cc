#include "server/service/compute_slot_policy.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

namespace sgemm {
namespace {

using std::chrono::milliseconds;

// A 1000 x 100 A (400 000 bytes), half in after 0.1 s; B (100 x 50) complete.
UploadFacts half_of_a() {
  UploadFacts f;
  f.uploads_a = true;
  f.a_elements = 1000 * 100;
  f.a_received = f.a_elements / 2;
  f.b_elements = f.b_received = 100 * 50;
  f.bytes_in = (f.a_received + f.b_received) * 4;
  f.seconds_since_first_data = 0.1;
  return f;
}

TEST(ComputeSlotPolicy, StartsEarlyOnlyWhenTheRestOfAIsDueWithinHalfTheBudget) {
  // 220 000 bytes in 0.1 s: the other 200 000 bytes of A are due in about 0.09 s.
  EXPECT_TRUE(ComputeSlotPolicy(milliseconds(1000), 0).start_early(half_of_a()));
  EXPECT_FALSE(ComputeSlotPolicy(milliseconds(100), 0).start_early(half_of_a())) << "0.09 s > half of 0.1 s";
  EXPECT_FALSE(ComputeSlotPolicy(milliseconds(0), 0).start_early(half_of_a())) << "no budget: never early";
}

TEST(ComputeSlotPolicy, NeverEarlyWithAnInputCAfterAYieldWithoutBOrWithoutAnyA) {
  const ComputeSlotPolicy policy(milliseconds(1000), 0);
  UploadFacts f = half_of_a();
  f.has_c = true;
  EXPECT_FALSE(policy.start_early(f));
  f = half_of_a();
  f.yields = 1;
  EXPECT_FALSE(policy.start_early(f));
  f = half_of_a();
  f.b_received = f.b_elements - 1;
  EXPECT_FALSE(policy.start_early(f));
  f = half_of_a();
  f.a_received = 0;
  EXPECT_FALSE(policy.start_early(f));
  f = half_of_a();
  f.uploads_a = false;
  EXPECT_FALSE(policy.start_early(f)) << "A not uploaded: nothing to start early for";
}

TEST(ComputeSlotPolicy, RunsHereOnlyAQuickUnstripedProductOnItsReceivingThread) {
  int asked = 0;
  auto estimate = [&](double ms) {
    return [&asked, ms] {
      ++asked;
      return ms;
    };
  };
  using Way = ComputeSlotPolicy::Way;
  const ComputeSlotPolicy policy(milliseconds(0), 0.5);
  EXPECT_EQ(policy.complete(Receiver::kGrpc, false, estimate(0.2)), Way::kHere);
  EXPECT_EQ(policy.complete(Receiver::kGrpc, false, estimate(0.7)), Way::kQueued);
  EXPECT_EQ(policy.complete(Receiver::kGrpc, false, estimate(-1)), Way::kQueued) << "no estimate: hand over";
  EXPECT_EQ(asked, 3);
  EXPECT_EQ(policy.complete(Receiver::kOther, false, estimate(0.2)), Way::kQueued);
  EXPECT_EQ(policy.complete(Receiver::kGrpc, true, estimate(0.2)), Way::kQueued);
  EXPECT_EQ(ComputeSlotPolicy(milliseconds(0), 0).complete(Receiver::kGrpc, false, estimate(0.2)), Way::kQueued);
  EXPECT_EQ(asked, 3) << "the estimate is asked only when running here is possible";
}

TEST(ComputeSlotPolicy, ARingsOwnThreadRunsWhatItReceivedWhateverItsSize) {
  int asked = 0;
  const auto estimate = [&asked] {
    ++asked;
    return 50.0;
  };
  using Way = ComputeSlotPolicy::Way;
  // The ring's thread serves one caller and would only poll meanwhile: no
  // estimate is needed, and --inline-compute-ms 0 does not apply to it.
  EXPECT_EQ(ComputeSlotPolicy(milliseconds(0), 0).complete(Receiver::kRing, false, estimate), Way::kHere);
  EXPECT_EQ(ComputeSlotPolicy(milliseconds(0), 0.5).complete(Receiver::kRing, false, estimate), Way::kHere);
  EXPECT_EQ(ComputeSlotPolicy(milliseconds(0), 0.5).complete(Receiver::kRing, true, estimate), Way::kQueued);
  EXPECT_EQ(asked, 0);
}

TEST(SentRows, ARunAfterAYieldSendsOnlyTheRowsTheYieldedRunDidNot) {
  SentRows rows;
  auto unsent = [&](int64_t b, int64_t e) {
    std::vector<std::pair<int64_t, int64_t>> out;
    rows.for_each_unsent(b, e, [&](int64_t x, int64_t y) { out.emplace_back(x, y); });
    return out;
  };
  using V = std::vector<std::pair<int64_t, int64_t>>;
  EXPECT_EQ(unsent(0, 10), (V{{0, 10}})) << "before any yield everything goes";
  rows.record(20, 30);
  rows.record(0, 7);
  rows.record(5, 12);  // overlapping reports merge
  rows.on_yield();
  EXPECT_EQ(unsent(0, 40), (V{{12, 20}, {30, 40}}));
  EXPECT_EQ(unsent(3, 9), V{});
  EXPECT_EQ(unsent(10, 25), (V{{12, 20}}));
  rows.record(12, 20);  // reported by the second run: skipped only after another yield
  EXPECT_EQ(unsent(12, 20), (V{{12, 20}}));
  rows.on_yield();
  EXPECT_EQ(unsent(0, 40), (V{{30, 40}}));
}

}  // namespace
}  // namespace sgemm
