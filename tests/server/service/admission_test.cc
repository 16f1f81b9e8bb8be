#include "server/service/admission.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace sgemm {
namespace {

using Clock = std::chrono::steady_clock;
const auto kNoDeadline = Clock::time_point::max();

TEST(AdmissionQueue, AdmitsUpToTheLimitAndReleasesOnTicketDestruction) {
  AdmissionQueue q(2, 0);
  auto t1 = q.admit(kNoDeadline, nullptr);
  auto t2 = q.admit(kNoDeadline, nullptr);
  ASSERT_TRUE(t1.ok() && t2.ok());
  EXPECT_EQ(q.in_flight(), 2);
  auto t3 = q.admit(kNoDeadline, nullptr);
  EXPECT_EQ(t3.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(t3.status().message().find("--max-queued"), std::string::npos) << t3.status().message();
  t1.value().release();
  EXPECT_EQ(q.in_flight(), 1);
  EXPECT_TRUE(q.admit(kNoDeadline, nullptr).ok());
}

TEST(AdmissionQueue, QueuedRequestRunsWhenASlotFrees) {
  AdmissionQueue q(1, 1);
  auto first = q.admit(kNoDeadline, nullptr);
  ASSERT_TRUE(first.ok());
  std::atomic<bool> admitted{false};
  std::thread waiter([&] {
    auto t = q.admit(kNoDeadline, nullptr);
    admitted = t.ok();
  });
  while (q.queued() == 0) std::this_thread::yield();
  EXPECT_FALSE(admitted);
  // The queue holds one: a third request is refused at once.
  EXPECT_EQ(q.admit(kNoDeadline, nullptr).status().code(), StatusCode::kUnavailable);
  first.value().release();
  waiter.join();
  EXPECT_TRUE(admitted);
  EXPECT_EQ(q.in_flight(), 0);
  EXPECT_EQ(q.queued(), 0);
}

TEST(AdmissionQueue, DeadlineAndCancellationEndTheWait) {
  AdmissionQueue q(1, 4);
  auto first = q.admit(kNoDeadline, nullptr);
  ASSERT_TRUE(first.ok());
  auto late = q.admit(Clock::now() + std::chrono::milliseconds(30), nullptr);
  EXPECT_EQ(late.status().code(), StatusCode::kDeadlineExceeded);
  auto cancelled = q.admit(kNoDeadline, [] { return true; });
  EXPECT_EQ(cancelled.status().code(), StatusCode::kCancelled);
  EXPECT_EQ(q.queued(), 0);
}

}  // namespace
}  // namespace sgemm
