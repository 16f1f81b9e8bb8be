// The region registry (rights, budget, lifetime) and the Unix connection
// table (peer lookup, close detection), without a server.
#include "server/service/region_registry.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

#include "server/service/region_operands.h"
#include "server/service/unix_connections.h"
#include "tests/server/engine/fake_engine_base.h"

namespace sgemm {
namespace {

// An engine that only records which host ranges it was asked to page-lock.
class RecordingEngine final : public testing::FakeEngineBase {
 public:
  EngineInfo info() const override { return {}; }
  HostAllocator& host_allocator() override { return alloc_; }
  Status validate(const GemmRequest&) const override { return Status::Ok(); }
  StatusOr<GemmReport> run(const GemmJob&) override { return GemmReport{}; }
  Status register_host_memory(void* data, std::size_t bytes) override {
    std::lock_guard lock(mu_);
    if (fail_next_) {
      fail_next_ = false;
      return ResourceExhausted("cannot lock");
    }
    registered_.insert(data);
    bytes_ += int64_t(bytes);
    return Status::Ok();
  }
  Status unregister_host_memory(void* data) override {
    std::lock_guard lock(mu_);
    registered_.erase(data);
    return Status::Ok();
  }
  std::size_t registered() {
    std::lock_guard lock(mu_);
    return registered_.size();
  }
  void fail_next() {
    std::lock_guard lock(mu_);
    fail_next_ = true;
  }

 private:
  AlignedHostAllocator alloc_;
  std::mutex mu_;
  std::set<void*> registered_;
  int64_t bytes_ = 0;
  bool fail_next_ = false;
};

// A shared-memory object for one test, unlinked at the end.
class ShmObject {
 public:
  ShmObject(int64_t bytes, mode_t mode = 0600) {
    static std::atomic<int> n{0};
    name_ = "/sgemm-unit-" + std::to_string(getpid()) + "-" + std::to_string(n++);
    const int fd = shm_open(name_.c_str(), O_RDWR | O_CREAT | O_EXCL, mode);
    EXPECT_GE(fd, 0) << strerror(errno);
    EXPECT_EQ(ftruncate(fd, bytes), 0);
    EXPECT_EQ(fchmod(fd, mode), 0);  // whatever the umask
    fd_ = fd;
  }
  ~ShmObject() {
    close(fd_);
    shm_unlink(name_.c_str());
  }
  const std::string& name() const { return name_; }
  void chown_to(uid_t uid, gid_t gid) { ASSERT_EQ(fchown(fd_, uid, gid), 0) << strerror(errno); }

 private:
  std::string name_;
  int fd_ = -1;
};

RegionCaller unix_caller(uint64_t conn = 1) {
  RegionCaller c;
  c.unix_socket = true;
  c.connection = conn;
  c.cred = {getuid(), getgid(), getpid()};
  return c;
}

struct stat stat_of(uid_t uid, gid_t gid, mode_t mode) {
  struct stat st {};
  st.st_uid = uid;
  st.st_gid = gid;
  st.st_mode = S_IFREG | mode;
  return st;
}

TEST(RegionAccess, OwnerGroupOtherBitsAndNoRootExemption) {
  const PeerCredentials alice{1000, 1000, 1}, bob{1001, 1000, 2}, carol{1002, 1002, 3}, root{0, 0, 4};
  EXPECT_TRUE(check_region_access(alice, stat_of(1000, 1000, 0600)).ok());
  EXPECT_EQ(check_region_access(alice, stat_of(1000, 1000, 0400)).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(check_region_access(bob, stat_of(1000, 1000, 0600)).code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(check_region_access(bob, stat_of(1000, 1000, 0660)).ok());  // group rw
  EXPECT_EQ(check_region_access(carol, stat_of(1000, 1000, 0660)).code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(check_region_access(carol, stat_of(1000, 1000, 0666)).ok());  // other rw
  // The owner's own bits decide for the owner, even when others may.
  EXPECT_EQ(check_region_access(alice, stat_of(1000, 1000, 0066)).code(), StatusCode::kPermissionDenied);
  // Root is held to the same bits.
  EXPECT_EQ(check_region_access(root, stat_of(1000, 1000, 0600)).code(), StatusCode::kPermissionDenied);
  const Status st = check_region_access(carol, stat_of(1000, 1000, 0640));
  EXPECT_NE(st.message().find("uid 1002"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("0640"), std::string::npos) << st.message();
}

TEST(RegionAccess, ShmNames) {
  EXPECT_TRUE(check_shm_name("/sgemm-a").ok());
  for (const char* bad : {"", "/", "sgemm", "/a/b", "/..", "/."})
    EXPECT_EQ(check_shm_name(bad).code(), StatusCode::kInvalidArgument) << bad;
}

TEST(RegionRegistry, RegisterMapsLocksListsAndUnregisterReleases) {
  RecordingEngine engine;
  RegionRegistry reg(engine, {1 << 20});
  ShmObject obj(64 << 10);
  auto r = reg.register_region(unix_caller(), "r1", obj.name(), 0);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, 64 << 10);
  EXPECT_EQ(engine.registered(), 1u);
  EXPECT_EQ(reg.bytes_in_use(), 64 << 10);
  auto rows = reg.list(unix_caller());
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].name, "r1");
  EXPECT_TRUE(rows[0].this_connection);
  EXPECT_FALSE(reg.list(unix_caller(2))[0].this_connection);
  // The bytes are the object's: what one side writes the other reads.
  auto held = reg.acquire(unix_caller(), "r1");
  ASSERT_TRUE(held.ok());
  std::memcpy((*held)->data(), "hello", 6);
  held->reset();
  EXPECT_EQ(reg.register_region(unix_caller(), "r1", obj.name(), 0).status().code(), StatusCode::kAlreadyExists);
  int waited = -1;
  ASSERT_TRUE(reg.unregister_region(unix_caller(), "r1", [&](int w) { waited = w; }).ok());
  EXPECT_EQ(waited, 0);  // nothing held it: released at once
  EXPECT_EQ(engine.registered(), 0u);
  EXPECT_EQ(reg.bytes_in_use(), 0);
  EXPECT_EQ(reg.acquire(unix_caller(), "r1").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(reg.unregister_region(unix_caller(), "r1", [](int) {}).code(), StatusCode::kNotFound);
}

TEST(RegionRegistry, UnregisterWaitsForTheRequestsHoldingIt) {
  RecordingEngine engine;
  RegionRegistry reg(engine, {1 << 20});
  ShmObject obj(4096);
  ASSERT_TRUE(reg.register_region(unix_caller(), "r", obj.name(), 0).ok());
  auto h1 = reg.acquire(unix_caller(), "r");
  auto h2 = reg.acquire(unix_caller(), "r");
  ASSERT_TRUE(h1.ok() && h2.ok());
  std::atomic<int> waited{-1};
  ASSERT_TRUE(reg.unregister_region(unix_caller(), "r", [&](int w) { waited = w; }).ok());
  EXPECT_EQ(waited.load(), -1) << "answered while requests still use the region";
  EXPECT_EQ(reg.acquire(unix_caller(), "r").status().code(), StatusCode::kNotFound) << "the name must go at once";
  EXPECT_EQ(engine.registered(), 1u);
  h1->reset();
  EXPECT_EQ(waited.load(), -1);
  std::thread last([&] { h2->reset(); });  // the last holder releases it, on its own thread
  last.join();
  EXPECT_EQ(waited.load(), 2);
  EXPECT_EQ(engine.registered(), 0u);
  EXPECT_EQ(reg.bytes_in_use(), 0);
}

TEST(RegionRegistry, BudgetSizesAndTcpCallers) {
  RecordingEngine engine;
  RegionRegistry reg(engine, {12288});
  ShmObject a(8192), b(8192);
  ASSERT_TRUE(reg.register_region(unix_caller(), "a", a.name(), 0).ok());
  EXPECT_EQ(reg.register_region(unix_caller(), "b", b.name(), 0).status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(reg.register_region(unix_caller(), "b", b.name(), 4096).ok());  // a prefix fits
  EXPECT_EQ(reg.bytes_in_use(), 12288);
  ShmObject c(4096);
  EXPECT_EQ(reg.register_region(unix_caller(), "c", c.name(), 8192).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(reg.register_region(unix_caller(), "c", "/sgemm-no-such-object", 0).status().code(), StatusCode::kNotFound);
  RegionCaller tcp;
  const auto refused = reg.register_region(tcp, "c", c.name(), 0);
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("Unix"), std::string::npos);
  EXPECT_EQ(reg.acquire(tcp, "a").status().code(), StatusCode::kFailedPrecondition);
  // A page-lock failure leaves nothing registered and returns the bytes.
  engine.fail_next();
  EXPECT_EQ(reg.register_region(unix_caller(), "c", c.name(), 0).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(reg.bytes_in_use(), 12288);
  EXPECT_EQ(reg.count(), 2);
}

TEST(RegionRegistry, PeerWithoutRightsIsRefused) {
  if (getuid() != 0) GTEST_SKIP() << "needs root to give the object to another uid";
  RecordingEngine engine;
  RegionRegistry reg(engine, {1 << 20});
  ShmObject obj(4096, 0600);
  obj.chown_to(65534, 65534);
  const auto r = reg.register_region(unix_caller(), "x", obj.name(), 0);
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied) << r.status().to_string();
  EXPECT_EQ(engine.registered(), 0u);
  // Registered by its owner, it is invisible and unusable for root.
  RegionCaller owner = unix_caller(7);
  owner.cred = {65534, 65534, 1};
  ASSERT_TRUE(reg.register_region(owner, "x", obj.name(), 0).ok());
  EXPECT_EQ(reg.acquire(unix_caller(), "x").status().code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(reg.list(unix_caller()).empty());
  EXPECT_EQ(reg.unregister_region(unix_caller(), "x", [](int) {}).code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(reg.acquire(owner, "x").ok());
}

// Without tokens a region belongs to the Unix user that registered it: a
// second uid that may open the object (mode 0666) still cannot use, see or
// unregister it. The uids are injected (the peer's SO_PEERCRED in the
// server), so no second user is needed.
TEST(RegionRegistry, WithoutTokensARegionIsItsUnixUsers) {
  RecordingEngine engine;
  RegionRegistry reg(engine, {1 << 20});
  ShmObject obj(4096, 0666);
  RegionCaller alice = unix_caller(1), bob = unix_caller(2), alice_again = unix_caller(3);
  alice.cred.uid = alice_again.cred.uid = 1000;
  bob.cred.uid = 1001;
  ASSERT_TRUE(reg.register_region(alice, "a", obj.name(), 0).ok());
  const auto denied = reg.acquire(bob, "a");
  EXPECT_EQ(denied.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(denied.status().message().find("Unix user 1000"), std::string::npos) << denied.status().to_string();
  EXPECT_NE(denied.status().message().find("Unix user 1001"), std::string::npos) << denied.status().to_string();
  EXPECT_TRUE(reg.list(bob).empty()) << "another uid sees the region's name";
  EXPECT_EQ(reg.unregister_region(bob, "a", [](int) {}).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(reg.count(), 1);
  // The same user on another connection owns it.
  EXPECT_TRUE(reg.acquire(alice_again, "a").ok());
  ASSERT_EQ(reg.list(alice_again).size(), 1u);
  // With tokens the client decides, whatever the uid.
  RegionCaller alice_token = alice, bob_token = bob, alice_token_elsewhere = bob;
  alice_token.client = alice_token_elsewhere.client = "alice";
  bob_token.client = "bob";
  ShmObject other(4096, 0666);
  ASSERT_TRUE(reg.register_region(alice_token, "t", other.name(), 0).ok());
  EXPECT_EQ(reg.acquire(bob_token, "t").status().code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(reg.acquire(alice_token_elsewhere, "t").ok());
  ASSERT_TRUE(reg.unregister_region(alice_again, "a", [](int) {}).ok());
}

// Without tokens each Unix user's regions, on every connection, count
// against its share of the budget: one local user cannot take it all. The
// uids are injected as above.
TEST(RegionRegistry, WithoutTokensAUnixUsersRegionBytesAreCapped) {
  RecordingEngine engine;
  RegionRegistryOptions options;
  options.capacity_bytes = 5 * 4096;
  options.max_bytes_per_user = 2 * 4096;
  RegionRegistry reg(engine, options);
  ShmObject a1(4096, 0666), a2(4096, 0666), a3(4096, 0666), b1(8192, 0666), t1(8192, 0666);
  RegionCaller alice = unix_caller(1), alice_elsewhere = unix_caller(2), bob = unix_caller(3);
  alice.cred.uid = alice_elsewhere.cred.uid = 1000;
  bob.cred.uid = 1001;
  ASSERT_TRUE(reg.register_region(alice, "a1", a1.name(), 0).ok());
  ASSERT_TRUE(reg.register_region(alice_elsewhere, "a2", a2.name(), 0).ok());
  // Its third page, on either connection, is past its share.
  const auto refused = reg.register_region(alice, "a3", a3.name(), 0);
  ASSERT_EQ(refused.status().code(), StatusCode::kResourceExhausted) << refused.status().to_string();
  const std::string& why = refused.status().message();
  EXPECT_NE(why.find("Unix user 1000"), std::string::npos) << why;
  EXPECT_NE(why.find("8192 bytes of regions registered"), std::string::npos) << why;
  EXPECT_NE(why.find("share of 8192"), std::string::npos) << why;
  EXPECT_NE(why.find("--region-bytes-per-user"), std::string::npos) << why;
  EXPECT_EQ(reg.register_region(alice_elsewhere, "a3", a3.name(), 0).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(reg.bytes_in_use(), 2 * 4096);
  EXPECT_EQ(engine.registered(), 2u);
  // Another user still has its own share.
  ASSERT_TRUE(reg.register_region(bob, "b1", b1.name(), 0).ok());
  EXPECT_EQ(reg.bytes_in_use(), 4 * 4096);
  // A token's client is bounded by its max_region_bytes, not by its uid's share.
  RegionCaller alice_token = alice;
  alice_token.client = "alice";
  const auto server_full = reg.register_region(alice_token, "t1", t1.name(), 0);
  EXPECT_EQ(server_full.status().code(), StatusCode::kResourceExhausted) << "over --region-bytes, not the share";
  EXPECT_NE(server_full.status().message().find("--region-bytes)"), std::string::npos)
      << server_full.status().to_string();
  ASSERT_TRUE(reg.register_region(alice_token, "t1", t1.name(), 4096).ok()) << "the uid's share does not bind a token";
  // The share comes back when a region goes: by unregistering, or with its connection.
  ASSERT_TRUE(reg.unregister_region(alice, "a1", [](int) {}).ok());
  ASSERT_TRUE(reg.register_region(alice, "a3", a3.name(), 0).ok());
  reg.drop_connection(2);  // a2
  ASSERT_TRUE(reg.register_region(alice, "a1", a1.name(), 0).ok());
  EXPECT_EQ(reg.bytes_in_use(), 5 * 4096);
}

TEST(RegionRegistry, DropConnectionRemovesOnlyItsRegistrations) {
  RecordingEngine engine;
  RegionRegistry reg(engine, {1 << 20});
  ShmObject a(4096), b(4096);
  ASSERT_TRUE(reg.register_region(unix_caller(1), "a", a.name(), 0).ok());
  ASSERT_TRUE(reg.register_region(unix_caller(2), "b", b.name(), 0).ok());
  auto held = reg.acquire(unix_caller(2), "a");  // a request of connection 2 uses connection 1's region
  reg.drop_connection(1);
  EXPECT_EQ(reg.count(), 1);
  EXPECT_EQ(engine.registered(), 2u) << "a request still holds 'a'";
  held->reset();
  EXPECT_EQ(engine.registered(), 1u);
  EXPECT_TRUE(reg.acquire(unix_caller(1), "b").ok());
}

TEST(RegionOperands, BindChecksShapesStridesAndOverlap) {
  RecordingEngine engine;
  RegionRegistry reg(engine, {1 << 20});
  ShmObject obj(64 << 10);
  ASSERT_TRUE(reg.register_region(unix_caller(), "r", obj.name(), 0).ok());
  GemmRequest req;
  req.shape = {10, 20, 30};  // A 10x30, B 30x20, C 10x20
  req.has_c = true;
  RegionOperands ops;
  ops.a = RegionRef{"r", 0, 32};
  ops.b = RegionRef{"r", 4096, 0};
  ops.c = RegionRef{"r", 16384, 24};
  ops.out = ops.c;  // in place
  auto b = bind_region_operands(reg, unix_caller(), req, ops, INT32_MAX);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(b->lda, 32);
  EXPECT_EQ(b->ldb, 20);
  EXPECT_TRUE(b->c_in_place());
  EXPECT_EQ(b->held.size(), 4u);
  auto code = [&](RegionOperands o, GemmRequest r) {
    return bind_region_operands(reg, unix_caller(), r, o, INT32_MAX).status();
  };
  RegionOperands bad = ops;
  bad.a->ld = 29;  // narrower than k
  EXPECT_EQ(code(bad, req).code(), StatusCode::kInvalidArgument);
  bad = ops;
  bad.b->offset = 2;
  EXPECT_EQ(code(bad, req).code(), StatusCode::kInvalidArgument);
  bad = ops;
  bad.c->offset = (64 << 10) - 4 * (24 * 9 + 20);  // the last element just fits
  bad.out = bad.c;
  EXPECT_TRUE(code(bad, req).ok()) << code(bad, req).to_string();
  bad.c->offset += 4;
  bad.out = bad.c;
  EXPECT_EQ(code(bad, req).code(), StatusCode::kInvalidArgument);
  bad = ops;
  bad.out = RegionRef{"r", 4096 + 400, 0};  // inside B
  EXPECT_EQ(code(bad, req).code(), StatusCode::kInvalidArgument);
  bad = ops;
  bad.c.reset();
  EXPECT_EQ(code(bad, req).code(), StatusCode::kInvalidArgument);  // has_c without c_region
  bad = ops;
  bad.b.reset();
  EXPECT_EQ(code(bad, req).code(), StatusCode::kInvalidArgument);
  bad = ops;
  bad.a->region = "nope";
  EXPECT_EQ(code(bad, req).code(), StatusCode::kNotFound);
}

TEST(ConnectionTable, FindsPeersByDescriptorAndSeesThemClose) {
  std::mutex mu;
  std::vector<uint64_t> closed;
  ConnectionTable table([&](uint64_t id) {
    std::lock_guard lock(mu);
    closed.push_back(id);
  });
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  auto id = table.add(sv[0], {1234, 99, 42});
  ASSERT_TRUE(id.ok());
  const RegionCaller c = table.find("fd:" + std::to_string(sv[0]));
  EXPECT_TRUE(c.unix_socket);
  EXPECT_EQ(c.cred.uid, 1234u);
  EXPECT_EQ(c.connection, *id);
  EXPECT_FALSE(table.find("ipv4:127.0.0.1:5555").unix_socket);
  EXPECT_FALSE(table.find("fd:" + std::to_string(sv[1])).unix_socket);
  close(sv[1]);  // the client goes away
  // The table's watcher sees the close on its own thread: polled for up to 30 s.
  for (const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
       std::chrono::steady_clock::now() < give_up;) {
    {
      std::lock_guard lock(mu);
      if (!closed.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  {
    std::lock_guard lock(mu);
    ASSERT_EQ(closed.size(), 1u);
    EXPECT_EQ(closed[0], *id);
  }
  EXPECT_FALSE(table.find("fd:" + std::to_string(sv[0])).unix_socket);
  close(sv[0]);
}

}  // namespace
}  // namespace sgemm
