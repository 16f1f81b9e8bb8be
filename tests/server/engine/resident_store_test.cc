// The store of resident matrices (server/engine/resident_store.h): handles,
// owners, pins, delete during use, the budget and least-recently-used eviction.
#include "server/engine/resident_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>

namespace sgemm {
namespace {

// Data that charges its bytes to one location and records its destruction.
class FakeData final : public ResidentData {
 public:
  FakeData(ResidentBytes bytes, int64_t rows, std::atomic<int>* freed)
      : bytes_(std::move(bytes)), rows_(rows), freed_(freed) {}
  ~FakeData() override {
    if (freed_) ++*freed_;
  }
  Layout layout() const override { return whole_on(bytes_.location(), rows_); }

 private:
  ResidentBytes bytes_;
  int64_t rows_;
  std::atomic<int>* freed_;
};

struct Fixture {
  explicit Fixture(int64_t budget, std::vector<int> locations = {-1}) : store({budget, std::move(locations)}) {}
  // A rows x 1 matrix (4 bytes a row) on `location`.
  StatusOr<std::string> put(int64_t rows, bool evictable, const std::string& owner = "", int location = -1) {
    SGEMM_ASSIGN_OR_RETURN(ResidentBytes bytes, store.reserve(location, rows * 4, "test put"));
    auto m = store.add(owner, "", rows, 1, evictable, std::make_shared<FakeData>(std::move(bytes), rows, &freed));
    return m->handle;
  }
  ResidentStore store;
  std::atomic<int> freed{0};
};

TEST(ResidentStoreTest, HandlesAreRandom128BitHexAndNeverRepeat) {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    const std::string h = ResidentStore::new_handle();
    ASSERT_EQ(h.size(), 32u);
    EXPECT_EQ(h.find_first_not_of("0123456789abcdef"), std::string::npos);
    EXPECT_TRUE(seen.insert(h).second);
  }
}

TEST(ResidentStoreTest, UnknownHandleIsNotFoundNamingIt) {
  Fixture f(1000);
  auto l = f.store.acquire("0123456789abcdef0123456789abcdef", "");
  ASSERT_EQ(l.status().code(), StatusCode::kNotFound);
  EXPECT_NE(l.status().message().find("0123456789abcdef0123456789abcdef"), std::string::npos);
  EXPECT_EQ(f.store.remove("nope", "").status().code(), StatusCode::kNotFound);
}

TEST(ResidentStoreTest, AnotherClientsMatrixIsPermissionDeniedAndUnlisted) {
  Fixture f(1000);
  auto h = f.put(10, false, "alice");
  ASSERT_TRUE(h.ok());
  auto l = f.store.acquire(*h, "bob");
  ASSERT_EQ(l.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(l.status().message().find("alice"), std::string::npos);
  EXPECT_EQ(f.store.remove(*h, "bob").status().code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(f.store.list("bob").empty());
  ASSERT_EQ(f.store.list("alice").size(), 1u);
  EXPECT_TRUE(f.store.acquire(*h, "alice").ok());
}

TEST(ResidentStoreTest, BudgetExhaustedNamesTheFlagAndTheNumbers) {
  Fixture f(100);
  ASSERT_TRUE(f.put(20, false).ok());  // 80 bytes
  auto h = f.put(10, false);           // 40 more: no room, nothing evictable
  ASSERT_EQ(h.status().code(), StatusCode::kResourceExhausted);
  const std::string& msg = h.status().message();
  EXPECT_NE(msg.find("--resident-bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("100"), std::string::npos) << msg;
  EXPECT_NE(msg.find("80 in use"), std::string::npos) << msg;
  EXPECT_EQ(f.store.in_use(-1), 80);
  auto big = f.store.reserve(-1, 1000, "a big put");
  ASSERT_EQ(big.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(big.status().message().find("more than the whole resident budget"), std::string::npos);
}

TEST(ResidentStoreTest, EvictsLeastRecentlyUsedEvictableFirst) {
  Fixture f(120);
  auto a = f.put(10, true), b = f.put(10, true), keep = f.put(10, false);
  ASSERT_TRUE(a.ok() && b.ok() && keep.ok());
  // Use a after b: b is now the least recently used.
  { ASSERT_TRUE(f.store.acquire(*a, "").ok()); }
  auto c = f.put(10, true);  // 160 > 120: one must go
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(f.freed.load(), 1);
  EXPECT_TRUE(f.store.acquire(*a, "").ok());
  auto gone = f.store.acquire(*b, "");
  ASSERT_EQ(gone.status().code(), StatusCode::kNotFound);
  EXPECT_NE(gone.status().message().find("evicted"), std::string::npos) << gone.status().message();
  EXPECT_TRUE(f.store.acquire(*keep, "").ok());
  EXPECT_EQ(f.store.in_use(-1), 120);
}

TEST(ResidentStoreTest, APinnedMatrixIsNeverEvicted) {
  Fixture f(80);
  auto a = f.put(10, true), b = f.put(10, true);
  ASSERT_TRUE(a.ok() && b.ok());
  auto la = f.store.acquire(*a, "");  // a is older but in use
  auto lb = f.store.acquire(*b, "");
  ASSERT_TRUE(la.ok() && lb.ok());
  auto c = f.put(10, true);
  ASSERT_EQ(c.status().code(), StatusCode::kResourceExhausted);  // both pinned
  lb->reset();
  auto d = f.put(10, true);
  ASSERT_TRUE(d.ok());  // b, unpinned, went; a stayed
  EXPECT_TRUE(f.store.acquire(*a, "").ok());
  EXPECT_EQ(f.store.acquire(*b, "").status().code(), StatusCode::kNotFound);
}

TEST(ResidentStoreTest, EvictionOnlyFreesTheLocationThatNeedsRoom) {
  Fixture f(40, {0, 1});
  auto on0 = f.put(10, true, "", 0);
  auto on1 = f.put(10, true, "", 1);
  ASSERT_TRUE(on0.ok() && on1.ok());
  EXPECT_EQ(f.store.roomiest_location(), 0);  // ties: the first
  auto more = f.put(5, true, "", 1);
  ASSERT_TRUE(more.ok());
  EXPECT_TRUE(f.store.acquire(*on0, "").ok());
  EXPECT_EQ(f.store.acquire(*on1, "").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(f.store.roomiest_location(), 1);
}

TEST(ResidentStoreTest, DeleteDuringUseRemovesTheNameNowAndFreesAtTheLastLease) {
  Fixture f(1000);
  auto h = f.put(10, false);
  ASSERT_TRUE(h.ok());
  auto lease = f.store.acquire(*h, "");
  ASSERT_TRUE(lease.ok());
  auto using_now = f.store.remove(*h, "");
  ASSERT_TRUE(using_now.ok());
  EXPECT_EQ(*using_now, 1);
  EXPECT_EQ(f.store.acquire(*h, "").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(f.store.list("").empty());
  EXPECT_EQ(f.freed.load(), 0);  // still in use
  EXPECT_EQ(f.store.in_use(-1), 40);
  lease->reset();
  EXPECT_EQ(f.freed.load(), 1);
  EXPECT_EQ(f.store.in_use(-1), 0);
}

TEST(ResidentStoreTest, ListShowsUseCountsMostRecentFirst) {
  Fixture f(1000);
  auto a = f.put(1, false), b = f.put(2, true);
  ASSERT_TRUE(a.ok() && b.ok());
  { auto l = f.store.acquire(*a, ""); }
  auto l = f.store.acquire(*a, "");
  const auto rows = f.store.list("");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].handle, *a);
  EXPECT_EQ(rows[0].uses, 2);
  EXPECT_EQ(rows[0].in_use, 1);
  EXPECT_EQ(rows[1].handle, *b);
  EXPECT_TRUE(rows[1].evictable);
  EXPECT_EQ(rows[1].layout, whole_on(-1, 2));
}

TEST(ResidentStoreTest, ConcurrentPutsUsesAndDeletesKeepTheBudgetExact) {
  Fixture f(4000);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        auto h = f.put(1 + (i % 7), (i + t) % 2 == 0);
        if (!h.ok()) continue;
        auto l = f.store.acquire(*h, "");
        if (i % 3 == 0) (void)f.store.remove(*h, "");
      }
    });
  for (auto& th : threads) th.join();
  int64_t listed = 0;
  for (const auto& r : f.store.list("")) listed += r.bytes;
  EXPECT_EQ(f.store.in_use(-1), listed);
  f.store.clear();
  EXPECT_EQ(f.store.in_use(-1), 0);
}

}  // namespace
}  // namespace sgemm
