#include "server/service/memory_budget.h"

#include <gtest/gtest.h>

namespace sgemm {
namespace {

TEST(MemoryBudget, ReservesUpToCapacityAndGivesBackOnDestruction) {
  MemoryBudget budget(100, 4);
  auto a = budget.try_reserve(60);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(budget.in_use(), 60);
  EXPECT_FALSE(budget.try_reserve(41).has_value());
  auto b = budget.try_reserve(40);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(budget.in_use(), 100);
  a.reset();
  EXPECT_EQ(budget.in_use(), 40);
  b->reset();
  EXPECT_EQ(budget.in_use(), 0);
}

TEST(MemoryBudget, WaitersAreGrantedInOrderWhenMemoryComesBack) {
  MemoryBudget budget(100, 4);
  auto held = budget.try_reserve(90);
  std::vector<int> order;
  std::vector<MemoryBudget::Reservation> got;
  ASSERT_NE(budget.enqueue(50,
                           [&](MemoryBudget::Reservation r) {
                             order.push_back(1);
                             got.push_back(std::move(r));
                           }),
            0u);
  ASSERT_NE(budget.enqueue(50,
                           [&](MemoryBudget::Reservation r) {
                             order.push_back(2);
                             got.push_back(std::move(r));
                           }),
            0u);
  EXPECT_FALSE(budget.try_reserve(5).has_value()) << "a newcomer must not pass the waiters";
  EXPECT_EQ(budget.waiters(), 2);
  held.reset();
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  EXPECT_EQ(budget.in_use(), 100);
  got.clear();
  EXPECT_EQ(budget.in_use(), 0);
}

TEST(MemoryBudget, BoundedWaitersAndCancel) {
  MemoryBudget budget(10, 1);
  auto held = budget.try_reserve(10);
  bool granted = false;
  const uint64_t t = budget.enqueue(5, [&](MemoryBudget::Reservation) { granted = true; });
  ASSERT_NE(t, 0u);
  EXPECT_EQ(budget.enqueue(5, [](MemoryBudget::Reservation) {}), 0u) << "only one may wait";
  EXPECT_TRUE(budget.cancel(t));
  EXPECT_FALSE(budget.cancel(t));
  held.reset();
  EXPECT_FALSE(granted);
  EXPECT_EQ(budget.in_use(), 0);
}

}  // namespace
}  // namespace sgemm
