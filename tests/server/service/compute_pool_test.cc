#include "server/service/compute_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

namespace sgemm {
namespace {

// Whether `pred` holds within 30 s, polled: pool threads take their tasks
// when the scheduler runs them, which on a loaded machine (or under
// ThreadSanitizer) can be long after submit() returned.
template <typename Pred>
bool eventually(Pred pred) {
  for (const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30); !pred();) {
    if (std::chrono::steady_clock::now() >= give_up) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

TEST(ComputePool, AcceptsWhileAThreadIsIdleOrTheQueueHasRoomAndRunsEverything) {
  std::atomic<int> ran{0};
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  {
    ComputePool pool(2, 1);
    EXPECT_TRUE(pool.submit([&] {
      gate.wait();
      ++ran;
    }));
    EXPECT_TRUE(pool.submit([&] {
      gate.wait();
      ++ran;
    }));
    EXPECT_TRUE(pool.submit([&] { ++ran; }));  // the one queued place
    EXPECT_TRUE(eventually([&] { return pool.running() == 2; }));
    EXPECT_FALSE(pool.submit([&] { ++ran; })) << "two busy threads, queue full";
    release.set_value();
  }
  EXPECT_EQ(ran.load(), 3);
}

TEST(ComputePool, NeverRefusesWhileAThreadIsIdle) {
  ComputePool pool(4, 0);
  std::atomic<int> ran{0};
  for (int round = 0; round < 50; ++round) {
    // Queued first, then running (|| orders them; + did not): a task moves
    // from the queue to a thread, so both at 0 read in this order means idle.
    while (pool.queued() > 0 || pool.running() > 0) std::this_thread::yield();
    for (int i = 0; i < 4; ++i) EXPECT_TRUE(pool.submit([&] { ++ran; }));
  }
}

TEST(ComputePool, ATaskThatReleasesItsSlotLetsTheNextInWhileItFinishes) {
  ComputePool pool(1, 0);
  std::promise<void> released, finish;
  std::shared_future<void> finish_gate = finish.get_future().share();
  ASSERT_TRUE(pool.submit([&] {
    pool.release_slot();
    released.set_value();
    finish_gate.wait();  // still on the thread, handing its result over
  }));
  released.get_future().wait();
  EXPECT_EQ(pool.running(), 0);
  std::atomic<bool> ran{false};
  EXPECT_TRUE(pool.submit([&] { ran = true; })) << "the slot is free";
  finish.set_value();
  EXPECT_TRUE(eventually([&] { return ran.load(); }));
  // The task's slot is given back after its body returns.
  EXPECT_TRUE(eventually([&] { return pool.running() == 0; })) << pool.running();
}

TEST(ComputePool, APreemptibleTaskIsAskedForItsSlotWhenTheQueueIsFull) {
  ComputePool pool(1, 0);
  std::promise<void> preempted;
  auto gate = preempted.get_future().share();
  std::atomic<int> ran{0}, asked{0};
  uint64_t id = 0;
  ASSERT_TRUE(pool.submit_if_idle(
      [&] {
        gate.wait();
        ++ran;
      },
      [&] {
        ++asked;
        preempted.set_value();
      },
      &id));
  EXPECT_FALSE(pool.submit_if_idle([] {}, [] {}, &id)) << "no idle thread";
  ASSERT_TRUE(eventually([&] { return pool.running() == 1; }));
  // The task that takes the slot holds it until the last check: were it to
  // finish first, the slot would be free again and the third submit accepted.
  std::promise<void> hold;
  auto held = hold.get_future().share();
  EXPECT_TRUE(pool.submit([&] {
    held.wait();
    ++ran;
  })) << "accepted: the preemptible task gives its slot up";
  EXPECT_EQ(asked.load(), 1);
  EXPECT_FALSE(pool.submit([&] { ++ran; })) << "nothing left to preempt, queue full";
  hold.set_value();
  while (ran.load() < 2) std::this_thread::yield();
}

TEST(ComputePool, AQuickTaskRunsOnTheCallersThreadOnlyWhileAThreadIsIdleAndHoldsItsSlot) {
  ComputePool pool(1, 4);
  ASSERT_TRUE(pool.reserve_here());
  EXPECT_EQ(pool.running(), 1) << "the reserved slot counts as running";
  EXPECT_FALSE(pool.reserve_here()) << "the one slot is taken";
  std::atomic<bool> queued_ran{false};
  EXPECT_TRUE(pool.submit([&] { queued_ran = true; })) << "a pool task queues behind it";
  EXPECT_EQ(pool.queued(), 1);
  pool.end_here();
  EXPECT_TRUE(eventually([&] { return queued_ran.load(); }));
  while (pool.running() > 0) std::this_thread::yield();

  // A task that releases its slot early (as MultiplyCall::run_compute does) is counted once.
  ASSERT_TRUE(pool.reserve_here());
  pool.release_slot();
  EXPECT_EQ(pool.running(), 0);
  pool.end_here();
  EXPECT_EQ(pool.running(), 0);
  ASSERT_TRUE(pool.reserve_here()) << "the thread's released flag was reset";
  pool.end_here();
  EXPECT_EQ(pool.running(), 0);
}

TEST(ComputePool, NoTaskRunsOnThePoolsOwnThreadsOrPastAQueue) {
  ComputePool pool(2, 4);
  std::promise<bool> on_pool_thread;
  ASSERT_TRUE(pool.submit([&] { on_pool_thread.set_value(pool.reserve_here()); }));
  EXPECT_FALSE(on_pool_thread.get_future().get()) << "a pool thread would count its slot twice";
  while (pool.running() > 0) std::this_thread::yield();

  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  ASSERT_TRUE(pool.submit([&] { gate.wait(); }));
  ASSERT_TRUE(pool.submit([&] { gate.wait(); }));
  ASSERT_TRUE(pool.submit([] {}));  // queued: both threads are busy
  EXPECT_FALSE(pool.reserve_here()) << "no idle thread, and a task waits";
  release.set_value();
  // The tasks hold `gate` by reference: they end before it goes (it is destroyed before the pool).
  while (pool.queued() > 0 || pool.running() > 0) std::this_thread::yield();
}

}  // namespace
}  // namespace sgemm
