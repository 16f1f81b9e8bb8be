// The cluster control plane over real gRPC on 127.0.0.1, with fake data
// planes (tests/server/cluster/fake_plane.h): joins, the communicator id and
// ranks handed out, job descriptions ahead of the data, a member dying in the
// middle of a job (UNAVAILABLE naming it) and the next job on the members left.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <mutex>
#include <thread>

#include "common/reference_gemm.h"
#include "server/cluster/cluster_engine.h"
#include "server/cluster/coordinator.h"
#include "server/cluster/member.h"
#include "server/planner/kernel_choice.h"
#include "server/planner/kernel_speeds.h"
#include "tests/server/cluster/cluster_fixture.h"
#include "tests/server/cluster/fake_plane.h"
#include "tests/server/engine/fake_engine_base.h"

namespace sgemm {
namespace {

using testing::cluster_ready;
using testing::ClusterFixture;
using testing::eventually;
using testing::FakeFabric;
using testing::FakePlane;
using testing::LogLines;
using testing::serve_coordinator;
using testing::test_cluster_options;
using namespace std::chrono_literals;

class ClusterControl : public ClusterFixture {
 protected:
  void SetUp() override { start(test_cluster_options("coordinator")); }
  // A coordinator with options `o` in place of SetUp's (its members gone).
  void restart(ClusterOptions o) {
    TearDown();
    start(std::move(o));
  }
  LogLines coord_log_;  // for restart()'s options: outlives the coordinator (TearDown)
  FakePlane& add_member(const std::string& name, int gpus) {
    return ClusterFixture::add_member(test_cluster_options(name), gpus);
  }

  // A job over the cluster's ranks, rows (or K) split evenly; checked against fp64.
  StatusOr<ClusterRunResult> multiply(const ClusterView& view, GemmShape s, bool has_c, uint64_t seed,
                                      ClusterJobKind kind = ClusterJobKind::kRows) {
    std::vector<float> a(size_t(s.m * s.k)), b(size_t(s.k * s.n)), c(size_t(s.m * s.n)), c0;
    fill_random(a, seed);
    fill_random(b, seed + 1);
    fill_random(c, seed + 2);
    c0 = c;
    ClusterJobSpec spec;
    spec.shape = s;
    spec.alpha = 1.5f;
    spec.beta = has_c ? -0.5f : 0.0f;
    spec.has_c = has_c;
    spec.kind = kind;
    const int p = int(view.ranks.size());
    for (int r = 0; r < p; ++r)
      spec.ranks.push_back(kind == ClusterJobKind::kK ? Shard{r, 0, s.m, s.k * r / p, s.k * (r + 1) / p}
                                                      : Shard{r, s.m * r / p, s.m * (r + 1) / p, 0, s.k});
    GemmJob job;
    job.request.shape = s;
    job.a = a.data();
    job.b = b.data();
    job.c = c.data();
    MutexLock lock(coord_->job_mutex());
    StatusOr<ClusterRunResult> r = coord_->run(spec, job);
    if (r.ok()) {
      const VerifyResult v =
          verify_gemm(s.m, s.n, s.k, spec.alpha, a.data(), b.data(), spec.beta, has_c ? c0.data() : nullptr, c.data());
      EXPECT_TRUE(v.passed(kSgemmTolerance)) << "max rel error " << v.max_rel_error;
    }
    return r;
  }
};

TEST_F(ClusterControl, NoMembersIsAnEmptyView) {
  StatusOr<ClusterView> v = prepare();
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_EQ(v->members, 0);
  EXPECT_TRUE(root_plane_->connects().empty());
}

TEST_F(ClusterControl, MembersJoinOneCommunicatorWithRanksInJoinOrder) {
  FakePlane& a = add_member("host-a", 1);
  ASSERT_TRUE(eventually([&] { return coord_->member_count() == 1; }));
  FakePlane& b = add_member("host-b", 2);
  ASSERT_TRUE(eventually([&] { return coord_->member_count() == 2; }));
  StatusOr<ClusterView> v = prepare();
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_EQ(v->members, 2);
  ASSERT_EQ(v->ranks.size(), 4u);
  EXPECT_EQ(v->ranks[0].host, 0);
  EXPECT_EQ(v->ranks[1].host_name, "host-a");
  EXPECT_EQ(v->ranks[2].host_name, "host-b");
  EXPECT_EQ(v->ranks[3].host_name, "host-b");
  // One id, one epoch, every process its first rank.
  ASSERT_EQ(root_plane_->connects().size(), 1u);
  const ClusterCommSpec root = root_plane_->connects()[0];
  ASSERT_TRUE(eventually([&] { return a.connects().size() == 1 && b.connects().size() == 1; }));
  EXPECT_EQ(root.first_rank, 0);
  EXPECT_EQ(a.connects()[0].first_rank, 1);
  EXPECT_EQ(b.connects()[0].first_rank, 2);
  for (const auto& c : {a.connects()[0], b.connects()[0]}) {
    EXPECT_EQ(c.unique_id, root.unique_id);
    EXPECT_EQ(c.nranks, 4);
    EXPECT_EQ(c.epoch, root.epoch);
  }
  // The link was measured with a probe every rank took part in: 64 MiB
  // broadcast in 1 ms; 3 x 64 MiB sent from rank 0 to the 3 remote ranks in 2 ms.
  EXPECT_NEAR(v->net_gbps, 67.1, 0.1);
  EXPECT_NEAR(v->fanout_gbps, 100.7, 0.1);
  ASSERT_TRUE(eventually([&] { return a.jobs().size() == 1 && b.jobs().size() == 1; }));
  EXPECT_EQ(a.jobs()[0].kind, ClusterJobKind::kProbe);
  // Nothing changed: the next prepare keeps the communicator.
  ASSERT_TRUE(prepare().ok());
  EXPECT_EQ(root_plane_->connects().size(), 1u);
}

TEST_F(ClusterControl, JobsReachEveryRankAndTimingsCarryTheHost) {
  FakePlane& a = add_member("host-a", 1);
  ASSERT_TRUE(eventually([&] { return coord_->member_count() == 1; }));  // join order = rank order
  FakePlane& b = add_member("host-b", 2);
  ASSERT_TRUE(eventually([&] { return coord_->member_count() == 2; }));
  StatusOr<ClusterView> v = prepare();
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  for (GemmShape s : {GemmShape{67, 33, 41}, GemmShape{128, 64, 96}, GemmShape{3, 5, 7}}) {
    for (bool has_c : {false, true}) {
      StatusOr<ClusterRunResult> r = multiply(*v, s, has_c, uint64_t(s.m * 7 + has_c));
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      ASSERT_EQ(r->timings.size(), 4u);
      EXPECT_EQ(r->timings[0].host, "coordinator");
      EXPECT_EQ(r->timings[1].host, "host-a");
      EXPECT_EQ(r->timings[2].host, "host-b");
      EXPECT_EQ(r->timings[3].host, "host-b");
      // Every process's kernel launches, the members' sent back with their timings.
      ASSERT_EQ(r->kernel_rows.size(), 3u);
      EXPECT_EQ(r->kernel_rows[0].name, "fake_row_coordinator");
      EXPECT_EQ(r->kernel_rows[0].launches, 1);
      EXPECT_EQ(r->kernel_rows[1].name, "fake_row_host-a");
      EXPECT_EQ(r->kernel_rows[1].launches, 1);
      EXPECT_EQ(r->kernel_rows[2].name, "fake_row_host-b");
      EXPECT_EQ(r->kernel_rows[2].launches, 2);
    }
  }
  // Every member saw the same job descriptions, in the same order.
  ASSERT_TRUE(eventually([&] { return a.jobs().size() == 7 && b.jobs().size() == 7; }));
  for (size_t i = 0; i < 7; ++i) {
    EXPECT_EQ(a.jobs()[i].job_id, b.jobs()[i].job_id);
    EXPECT_EQ(a.jobs()[i].job_id, root_plane_->jobs()[i].job_id);
    EXPECT_EQ(a.jobs()[i].ranks, root_plane_->jobs()[i].ranks);
  }
}

TEST_F(ClusterControl, KSplitJobsCarryTheirKSlicesToEveryRank) {
  FakePlane& a = add_member("host-a", 1);
  ASSERT_TRUE(eventually([&] { return coord_->member_count() == 1; }));
  FakePlane& b = add_member("host-b", 2);
  ASSERT_TRUE(eventually([&] { return coord_->member_count() == 2; }));
  StatusOr<ClusterView> v = prepare();
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  for (GemmShape s : {GemmShape{67, 33, 41}, GemmShape{5, 3, 2049}}) {
    for (bool has_c : {false, true}) {
      StatusOr<ClusterRunResult> r = multiply(*v, s, has_c, uint64_t(s.k * 3 + has_c), ClusterJobKind::kK);
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      ASSERT_EQ(r->timings.size(), 4u);
      EXPECT_EQ(r->timings[2].host, "host-b");
      for (int i = 0; i < 4; ++i) {  // the members' K slices come back in their timings
        EXPECT_EQ(r->timings[size_t(i)].shard.k_begin, s.k * i / 4);
        EXPECT_EQ(r->timings[size_t(i)].shard.k_end, s.k * (i + 1) / 4);
      }
    }
  }
  // The job kind and the K slices crossed the wire (the probe is job 0).
  ASSERT_TRUE(eventually([&] { return a.jobs().size() == 5 && b.jobs().size() == 5; }));
  for (size_t i = 1; i < 5; ++i) {
    EXPECT_EQ(a.jobs()[i].kind, ClusterJobKind::kK);
    EXPECT_EQ(a.jobs()[i].ranks, root_plane_->jobs()[i].ranks);
    EXPECT_EQ(b.jobs()[i].ranks, root_plane_->jobs()[i].ranks);
  }
}

TEST_F(ClusterControl, MemberKilledMidJobFailsItNamingTheMemberAndTheNextRunsOnTheRest) {
  FakePlane& a = add_member("host-a", 1);
  ASSERT_TRUE(eventually([&] { return coord_->member_count() == 1; }));
  FakePlane& b = add_member("host-b", 1);
  ASSERT_TRUE(eventually([&] { return coord_->member_count() == 2; }));
  StatusOr<ClusterView> v = prepare();
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  b.set_hang(true);  // host-b stops in the job, like a rank whose process froze
  auto failed = std::async(std::launch::async, [&] { return multiply(*v, GemmShape{64, 32, 16}, false, 3); });
  ASSERT_TRUE(eventually([&] { return b.running(); }));
  members_[1]->stop();  // host-b's process goes away: its stream ends
  ASSERT_EQ(failed.wait_for(10s), std::future_status::ready);
  StatusOr<ClusterRunResult> r = failed.get();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("host-b"), std::string::npos) << r.status().message();

  // The next request: a new communicator over the coordinator and host-a.
  const auto t0 = std::chrono::steady_clock::now();
  StatusOr<ClusterView> v2 = prepare();
  ASSERT_TRUE(v2.ok()) << v2.status().to_string();
  EXPECT_EQ(v2->members, 1);
  EXPECT_EQ(v2->ranks.size(), 2u);
  EXPECT_GT(v2->epoch, v->epoch);
  StatusOr<ClusterRunResult> next = multiply(*v2, GemmShape{65, 31, 17}, true, 5);
  ASSERT_TRUE(next.ok()) << next.status().to_string();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 30s);
  ASSERT_TRUE(eventually([&] { return a.connects().size() == 2; }));
  EXPECT_EQ(a.connects()[1].nranks, 2);
}

// A member whose part of the job fails (its ranks aborted) ends the job at
// once, naming it: rank 0's collectives with it would otherwise wait for the
// cluster job timeout. The next job runs on a new communicator.
TEST_F(ClusterControl, MemberFailingMidJobEndsItAtOnceNamingTheMember) {
  add_member("host-a", 1);
  ASSERT_TRUE(eventually([&] { return coord_->member_count() == 1; }));
  FakePlane& b = add_member("host-b", 2);
  ASSERT_TRUE(eventually([&] { return coord_->member_count() == 2; }));
  StatusOr<ClusterView> v = prepare();
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  b.set_fail(Internal("kernel launch failed on gpu 1"));
  auto failed = std::async(std::launch::async, [&] { return multiply(*v, GemmShape{67, 33, 19}, true, 11); });
  ASSERT_EQ(failed.wait_for(10s), std::future_status::ready) << "the job waited past a member's failure";
  StatusOr<ClusterRunResult> r = failed.get();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("host-b"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("kernel launch failed"), std::string::npos) << r.status().message();

  b.set_fail(Status::Ok());
  StatusOr<ClusterView> v2 = prepare();
  ASSERT_TRUE(v2.ok()) << v2.status().to_string();
  StatusOr<ClusterRunResult> next = multiply(*v2, GemmShape{65, 31, 17}, false, 13);
  ASSERT_TRUE(next.ok()) << next.status().to_string();
}

TEST_F(ClusterControl, JoinAndLeaveBetweenRequestsRebuildTheCommunicator) {
  add_member("host-a", 1);
  ASSERT_TRUE(eventually([&] { return coord_->member_count() == 1; }));
  StatusOr<ClusterView> v1 = prepare();
  ASSERT_TRUE(v1.ok());
  EXPECT_EQ(v1->ranks.size(), 2u);
  add_member("host-b", 1);
  ASSERT_TRUE(eventually([&] { return coord_->member_count() == 2; }));
  StatusOr<ClusterView> v2 = prepare();
  ASSERT_TRUE(v2.ok());
  EXPECT_EQ(v2->ranks.size(), 3u);
  ASSERT_TRUE(multiply(*v2, GemmShape{50, 20, 30}, false, 9).ok());
  members_[0]->stop();
  ASSERT_TRUE(eventually([&] { return coord_->member_count() == 1; }));
  StatusOr<ClusterView> v3 = prepare();
  ASSERT_TRUE(v3.ok());
  EXPECT_EQ(v3->ranks.size(), 2u);
  EXPECT_EQ(v3->ranks[1].host_name, "host-b");
  ASSERT_TRUE(multiply(*v3, GemmShape{50, 20, 30}, true, 10).ok());
  members_[1]->stop();
  ASSERT_TRUE(eventually([&] { return coord_->member_count() == 0; }));
  StatusOr<ClusterView> v4 = prepare();
  ASSERT_TRUE(v4.ok());
  EXPECT_EQ(v4->members, 0);
}

// A member leaving between requests ends the communicator it held ranks in at
// once: NCCL tears a process's ranks down only when every rank on its node lets
// go, so a member waiting for the next request to do it would hang its stop.
TEST_F(ClusterControl, AMemberLeavingBetweenRequestsEndsItsCommunicatorAtOnce) {
  FakePlane& a = add_member("host-a", 2);
  add_member("host-b", 1);
  ASSERT_TRUE(eventually([&] { return coord_->member_count() == 2; }));
  StatusOr<ClusterView> v = prepare();
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  ASSERT_EQ(v->ranks.size(), 4u);
  const int root_disconnects = root_plane_->disconnects();
  members_[1]->stop();  // host-b leaves; no request follows
  // This side aborts the old communicator and host-a gets a new one over the
  // two processes left, without a request asking for it.
  ASSERT_TRUE(eventually([&] { return a.connects().size() == 2; }));
  ASSERT_TRUE(eventually([&] { return root_plane_->connects().size() == 2; }));
  EXPECT_EQ(a.connects()[1].nranks, 3);
  EXPECT_GT(a.connects()[1].epoch, a.connects()[0].epoch);
  StatusOr<ClusterView> after = prepare();
  ASSERT_TRUE(after.ok()) << after.status().to_string();
  EXPECT_EQ(after->ranks.size(), 3u);
  ASSERT_TRUE(multiply(*after, GemmShape{37, 11, 29}, true, 12).ok());
  members_[0]->stop();  // the last member leaves: this side drops its communicator
  ASSERT_TRUE(eventually([&] { return root_plane_->disconnects() > root_disconnects; }));
}

// The same when the last member leaves while a build (here, its measurement of
// the link) is under way: the build started for that member's departure ends,
// and this side drops the communicator the build had made.
TEST_F(ClusterControl, AMemberLeavingWhileTheCommunicatorIsBuiltEndsItAtOnce) {
  add_member("host-a", 1);
  ASSERT_TRUE(eventually([&] { return coord_->member_count() == 1; }));
  root_plane_->set_hang_probe(true);
  const int root_disconnects = root_plane_->disconnects();
  EXPECT_FALSE(coord_->current_view().ok());  // not built yet: it starts the build
  ASSERT_TRUE(eventually([&] {
    const std::vector<ClusterJobSpec> jobs = root_plane_->jobs();
    return !jobs.empty() && jobs.back().kind == ClusterJobKind::kProbe;
  }));
  members_[0]->stop();
  ASSERT_TRUE(eventually([&] { return root_plane_->disconnects() > root_disconnects; }));
  ASSERT_TRUE(eventually([&] { return coord_->current_view().ok(); }));
  EXPECT_EQ(coord_->current_view()->members, 0);
}

TEST_F(ClusterControl, AMemberDropsItsCommunicatorWhenTheCoordinatorGoes) {
  FakePlane& a = add_member("host-a", 1);
  ASSERT_TRUE(eventually([&] { return coord_->member_count() == 1; }));
  ASSERT_TRUE(prepare().ok());
  EXPECT_NE(members_[0]->epoch(), 0u);
  coord_->shutdown();  // every member stream ends: the member drops its communicator and tries again
  ASSERT_TRUE(eventually([&] { return a.disconnects() >= 1; }));
  EXPECT_EQ(members_[0]->epoch(), 0u);
}

// The coordinator's own engine, for the cluster engine's tests: runs every
// job on "one GPU" (computing nothing) and says so in its reason.
class LocalEngine final : public testing::FakeEngineBase {
 public:
  EngineInfo info() const override {
    EngineInfo i;
    i.backend = "cuda";
    i.devices.push_back(DeviceInfo{0, "local gpu", 0, 0, 0, 0});
    i.kernels = {KernelKind::kPingpong, KernelKind::kCublas};
    i.kernel_speeds = speeds;
    return i;
  }
  HostAllocator& host_allocator() override { return alloc_; }
  Status validate(const GemmRequest&) const override { return Status::Ok(); }
  StatusOr<GemmReport> run(const GemmJob& job) override {
    ++runs;
    GemmReport r;
    r.plan_reason = "local";
    r.split = job.request.options.split == SplitMode::kAuto ? SplitMode::kSingle : job.request.options.split;
    return r;
  }
  Status register_host_memory(void* data, std::size_t bytes) override {
    locked.emplace_back(data, bytes);
    return Status::Ok();
  }
  Status unregister_host_memory(void* data) override {
    unlocked.push_back(data);
    return Status::Ok();
  }
  int runs = 0;
  std::shared_ptr<const KernelSpeeds> speeds;  // what info() reports the kernel choice reads
  std::vector<std::pair<void*, std::size_t>> locked;
  std::vector<void*> unlocked;

 private:
  AlignedHostAllocator alloc_;
};

TEST_F(ClusterControl, TheEngineRunsLocallyUntilTheClusterPaysAndOverItWhenAsked) {
  auto local = std::make_unique<LocalEngine>();
  LocalEngine* local_ptr = local.get();
  std::unique_ptr<Engine> engine = make_cluster_engine(std::move(local), *coord_);
  const GemmShape s{96, 40, 24};
  std::vector<float> a(size_t(s.m * s.k)), b(size_t(s.k * s.n)), c(size_t(s.m * s.n));
  fill_random(a, 1);
  fill_random(b, 2);
  GemmJob job;
  job.request.shape = s;
  job.a = a.data();
  job.b = b.data();
  job.c = c.data();
  // No member: local.
  StatusOr<GemmReport> r = engine->run(job);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(local_ptr->runs, 1);
  add_member("host-a", 1);
  ASSERT_TRUE(eventually([&] { return coord_->member_count() == 1; }));
  ASSERT_TRUE(cluster_ready(*coord_, 1));  // requests run here while it forms
  // A member, but a small product over a 67 GB/s link: the cost model keeps it local.
  r = engine->run(job);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(local_ptr->runs, 2);
  EXPECT_NE(r->plan_reason.find("cluster rows: 2 GPUs on 2 hosts"), std::string::npos) << r->plan_reason;
  // split single is never spread over the cluster.
  job.request.options.split = SplitMode::kSingle;
  ASSERT_TRUE(engine->run(job).ok());
  EXPECT_EQ(local_ptr->runs, 3);
}

// A shared-memory region registered with the coordinator is page-locked by
// the engine that copies from it; resident or strided operands, which the
// cluster's data plane cannot move, run on this host even when told always.
TEST_F(ClusterControl, TheEngineForwardsHostMemoryLockingToTheLocalEngine) {
  auto local = std::make_unique<LocalEngine>();
  LocalEngine* local_ptr = local.get();
  std::unique_ptr<Engine> engine = make_cluster_engine(std::move(local), *coord_);
  std::vector<float> region(4096);
  ASSERT_TRUE(engine->register_host_memory(region.data(), region.size() * sizeof(float)).ok());
  ASSERT_EQ(local_ptr->locked.size(), 1u);
  EXPECT_EQ(local_ptr->locked[0].first, region.data());
  EXPECT_EQ(local_ptr->locked[0].second, region.size() * sizeof(float));
  ASSERT_TRUE(engine->unregister_host_memory(region.data()).ok());
  ASSERT_EQ(local_ptr->unlocked.size(), 1u);
  EXPECT_EQ(local_ptr->unlocked[0], region.data());
  EXPECT_EQ(engine->resident_store(), local_ptr->resident_store());
  EXPECT_LT(engine->estimate_ms(GemmJob{}), 0);
}

// A coordinator whose options say --cluster-always, on the fixture's fabric,
// with one member on "host-a" and the cluster engine over a LocalEngine.
struct AlwaysCluster {
  AlwaysCluster(FakeFabric& fabric, FakePlane& root_plane) : plane(fabric, 1, "host-a") {
    ClusterOptions o = test_cluster_options("coordinator", &log);
    o.always = true;
    coordinator = std::make_unique<ClusterCoordinator>(root_plane, o);
    int port = 0;
    server = serve_coordinator(*coordinator, &port);
    member =
        std::make_unique<ClusterMember>(plane, "127.0.0.1:" + std::to_string(port), test_cluster_options("host-a"));
    member->start();
    auto owned = std::make_unique<LocalEngine>();
    local = owned.get();
    engine = make_cluster_engine(std::move(owned), *coordinator);
  }
  ~AlwaysCluster() {
    member->stop();
    coordinator->shutdown();
    if (server) server->Shutdown(std::chrono::system_clock::now() + 1s);
  }
  LogLines log;
  FakePlane plane;
  std::unique_ptr<ClusterCoordinator> coordinator;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<ClusterMember> member;
  LocalEngine* local = nullptr;  // owned by engine
  std::unique_ptr<Engine> engine;
};

// Random A, B and C for C = alpha*A*B + beta*C, and the job over them.
struct Product {
  Product(GemmShape s, float alpha, float beta, uint64_t seed)
      : shape(s), a(size_t(s.m * s.k)), b(size_t(s.k * s.n)), c(size_t(s.m * s.n)) {
    fill_random(a, seed);
    fill_random(b, seed + 1);
    fill_random(c, seed + 2);
    c0 = c;
    job.request.shape = s;
    job.request.alpha = alpha;
    job.request.beta = beta;
    job.request.has_c = true;
    job.a = a.data();
    job.b = b.data();
    job.c = c.data();
  }
  bool right() const {
    const VerifyResult v = verify_gemm(shape.m, shape.n, shape.k, job.request.alpha, a.data(), b.data(),
                                       job.request.beta, c0.data(), c.data());
    EXPECT_TRUE(v.passed(kSgemmTolerance)) << "max rel error " << v.max_rel_error;
    return v.passed(kSgemmTolerance);
  }

  GemmShape shape;
  std::vector<float> a, b, c, c0;
  GemmJob job;
};

TEST_F(ClusterControl, TheEngineSpreadsEveryRequestWhenToldAlways) {
  AlwaysCluster cluster(fabric_, *root_plane_);
  ASSERT_TRUE(cluster.server);
  ASSERT_TRUE(eventually([&] { return cluster.coordinator->member_count() == 1; }));
  ASSERT_TRUE(cluster_ready(*cluster.coordinator, 1));  // requests run here while it forms
  Product p({77, 33, 19}, 2.0f, 0.5f, 4);
  StatusOr<GemmReport> r = cluster.engine->run(p.job);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(cluster.local->runs, 0);
  EXPECT_EQ(r->split, SplitMode::kRows);
  ASSERT_EQ(r->devices.size(), 2u);
  EXPECT_EQ(r->devices[0].host, "coordinator");
  EXPECT_EQ(r->devices[1].host, "host-a");
  EXPECT_EQ(r->devices[1].shard.row_end, p.shape.m);
  // The report lists both processes' kernels; the first names it (tied at one launch each).
  ASSERT_EQ(r->kernel_rows.size(), 2u);
  EXPECT_EQ(r->kernel_rows[0].name, "fake_row_coordinator");
  EXPECT_EQ(r->kernel_rows[1].name, "fake_row_host-a");
  EXPECT_EQ(r->kernel_row, "fake_row_coordinator");
  p.right();
}

// The ranks' kernel is chosen as the local engine chooses, from the measured
// speeds the local engine reads (an operator's --kernel-speeds reaches it).
TEST_F(ClusterControl, TheRanksKernelIsChosenFromTheLocalEnginesMeasuredSpeeds) {
  AlwaysCluster cluster(fabric_, *root_plane_);
  ASSERT_TRUE(cluster.server);
  ASSERT_TRUE(eventually([&] { return cluster.coordinator->member_count() == 1; }));
  ASSERT_TRUE(cluster_ready(*cluster.coordinator, 1));
  for (const KernelKind faster : {KernelKind::kCublas, KernelKind::kPingpong}) {
    SCOPED_TRACE(std::string(kernel_kind_name(faster)) + " measured faster");
    // One shape of every class measured on "local gpu": whatever the shard's class, `faster` wins.
    std::string csv = std::string(KernelSpeeds::kHeader) + "\n";
    for (const KernelShapeClass& c : kernel_shape_classes())
      for (const KernelKind k : {KernelKind::kCublas, KernelKind::kPingpong})
        csv +=
            KernelSpeeds::csv_row({"local gpu", 132, "test", c.id, c.probes[0], k, k == faster ? 40.0 : 10.0}) + "\n";
    StatusOr<KernelSpeeds> speeds = KernelSpeeds::parse(csv);
    ASSERT_TRUE(speeds.ok()) << speeds.status().to_string();
    cluster.local->speeds = std::make_shared<const KernelSpeeds>(std::move(*speeds));
    Product p({77, 33, 19}, 1.0f, 0.0f, 11);
    StatusOr<GemmReport> r = cluster.engine->run(p.job);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(cluster.local->runs, 0);
    ASSERT_FALSE(cluster.plane.jobs().empty());
    EXPECT_EQ(cluster.plane.jobs().back().kernel, faster);
    EXPECT_EQ(r->kernel, faster);
    // Away from the default (ping-pong) the reason names the measurement and the GPU.
    EXPECT_EQ(r->plan_reason.find("on local gpu") != std::string::npos, faster != KernelKind::kPingpong)
        << r->plan_reason;
    p.right();
  }
}

// The cluster's data plane moves dense matrices: a strided view of a larger
// region (lda > k) or a resident operand runs on this host, even when told always.
TEST_F(ClusterControl, StridedOrResidentOperandsRunLocallyEvenWhenToldAlways) {
  AlwaysCluster cluster(fabric_, *root_plane_);
  ASSERT_TRUE(cluster.server);
  ASSERT_TRUE(eventually([&] { return cluster.coordinator->member_count() == 1; }));
  ASSERT_TRUE(cluster_ready(*cluster.coordinator, 1));  // requests run here while it forms
  Product p({37, 29, 23}, 1.0f, 0.0f, 11);
  p.job.lda = p.shape.k + 5;  // a submatrix of a wider region
  StatusOr<GemmReport> r = cluster.engine->run(p.job);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(cluster.local->runs, 1);
  EXPECT_NE(r->plan_reason.find("cluster not used: resident or strided operands"), std::string::npos) << r->plan_reason;
  p.job.lda = 0;
  ResidentMatrix b_kept{};
  p.job.b_resident = &b_kept;
  r = cluster.engine->run(p.job);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(cluster.local->runs, 2);
}

TEST_F(ClusterControl, SplitKRequestsRunAsTheClusterKSplitWhenToldAlwaysAndStayLocalOtherwise) {
  AlwaysCluster cluster(fabric_, *root_plane_);
  ASSERT_TRUE(cluster.server);
  ASSERT_TRUE(eventually([&] { return cluster.coordinator->member_count() == 1; }));
  ASSERT_TRUE(cluster_ready(*cluster.coordinator, 1));  // requests run here while it forms
  Product p({21, 13, 301}, -1.25f, 0.75f, 7);           // small m x n, long K, nothing a multiple of anything
  p.job.request.options.split = SplitMode::kK;
  StatusOr<GemmReport> r = cluster.engine->run(p.job);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(cluster.local->runs, 0);
  EXPECT_EQ(r->split, SplitMode::kK);
  EXPECT_NE(r->plan_reason.find("cluster K split: 2 GPUs on 2 hosts (requested)"), std::string::npos) << r->plan_reason;
  // The planner got both rates measured at join (64 MiB broadcast in 1 ms; sent to the one remote rank in 2 ms).
  EXPECT_NE(r->plan_reason.find("net 67.11 GB/s, fan-out 33.55 GB/s"), std::string::npos) << r->plan_reason;
  ASSERT_EQ(r->devices.size(), 2u);
  EXPECT_EQ(r->devices[0].host, "coordinator");
  EXPECT_EQ(r->devices[1].host, "host-a");
  EXPECT_EQ(r->devices[0].shard.k_begin, 0);
  EXPECT_EQ(r->devices[0].shard.k_end, r->devices[1].shard.k_begin);
  EXPECT_EQ(r->devices[1].shard.k_end, p.shape.k);
  p.right();
  ASSERT_FALSE(cluster.plane.jobs().empty());
  EXPECT_EQ(cluster.plane.jobs().back().kind, ClusterJobKind::kK);
  // Both rates are logged when the communicator is ready.
  const std::string ready = cluster.log.last_with(" ready: 2 ranks");
  EXPECT_NE(ready.find("link between hosts 67.11 GB/s (64 MiB broadcast in 1.000 ms)"), std::string::npos) << ready;
  EXPECT_NE(ready.find("fan-out from rank 0 to 1 remote rank 33.55 GB/s aggregate (1 x 64 MiB in 2.000 ms"),
            std::string::npos)
      << ready;
}

TEST_F(ClusterControl, ASmallSplitKRequestStaysLocalWithTheClusterKSplitInItsReason) {
  auto local = std::make_unique<LocalEngine>();
  LocalEngine* local_ptr = local.get();
  std::unique_ptr<Engine> engine = make_cluster_engine(std::move(local), *coord_);
  add_member("host-a", 1);
  ASSERT_TRUE(eventually([&] { return coord_->member_count() == 1; }));
  ASSERT_TRUE(cluster_ready(*coord_, 1));  // requests run here while it forms
  const GemmShape s{32, 24, 400};
  std::vector<float> a(size_t(s.m * s.k)), b(size_t(s.k * s.n)), c(size_t(s.m * s.n));
  GemmJob job;
  job.request.shape = s;
  job.request.options.split = SplitMode::kK;
  job.a = a.data();
  job.b = b.data();
  job.c = c.data();
  StatusOr<GemmReport> r = engine->run(job);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(local_ptr->runs, 1);
  EXPECT_EQ(r->split, SplitMode::kK);  // the local engine ran the split it was asked for
  EXPECT_NE(r->plan_reason.find("cluster K split: 2 GPUs on 2 hosts"), std::string::npos) << r->plan_reason;
  EXPECT_EQ(r->plan_reason.find("cluster rows"), std::string::npos) << r->plan_reason;
}

// A member that joined but never answers ready holds no request: requests run
// here while the communicator forms; after the connect timeout the member is
// dropped and the communicator forms over the rest, which the next request uses.
TEST_F(ClusterControl, AMemberThatNeverAnswersReadyHoldsNoRequest) {
  ClusterOptions co = test_cluster_options("coordinator", &coord_log_);
  co.connect_timeout_ms = 2000;
  co.always = true;
  restart(co);
  auto owned = std::make_unique<LocalEngine>();
  LocalEngine* local = owned.get();
  std::unique_ptr<Engine> engine = make_cluster_engine(std::move(owned), *coord_);
  add_member("steady", 1);
  add_member("silent", 1).set_hang_connect(true);
  ASSERT_TRUE(eventually([&] { return coord_->member_count() == 2; }));
  Product p({77, 33, 19}, 2.0f, 0.5f, 4);
  for (int i = 0; i < 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    StatusOr<GemmReport> r = engine->run(p.job);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    // Far below the connect timeout, with room for a loaded machine.
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 1000ms) << "request " << i << " waited for the communicator";
    EXPECT_NE(r->plan_reason.find("communicator is forming"), std::string::npos) << r->plan_reason;
  }
  EXPECT_EQ(local->runs, 3);
  ASSERT_TRUE(eventually([&] { return coord_log_.has("member 'silent' did not answer ready"); })) << coord_log_.all();
  // Dropped at once, under the lock that logged it: no build counts it while its stream closes.
  EXPECT_EQ(coord_->member_count(), 1);
  ASSERT_TRUE(cluster_ready(*coord_, 1)) << coord_log_.all();
  EXPECT_FALSE(coord_log_.has("member 'steady' did not answer ready")) << coord_log_.all();
  Product q({65, 31, 23}, -1.0f, 0.25f, 8);
  StatusOr<GemmReport> r = engine->run(q.job);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(local->runs, 3);
  ASSERT_EQ(r->devices.size(), 2u);
  EXPECT_EQ(r->devices[1].host, "steady");
  q.right();
}

}  // namespace
}  // namespace sgemm
