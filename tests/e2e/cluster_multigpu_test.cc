// Cluster mode on one machine as if on several (docs/cluster.md): one
// sgemm-server per GPU (CUDA_VISIBLE_DEVICES), the first coordinating, the
// others joining it; NCCL between them over whatever the environment allows
// (scripts/cluster-check.sh runs this suite with NCCL_P2P_DISABLE=1
// NCCL_SHM_DISABLE=1, sockets, and again with NVLink). Results are checked
// against the fp64 reference, for the row split and the K split (reduce-scatter
// of partial Cs); a member killed in the middle of a request
// fails it with UNAVAILABLE naming the member, and the next request is served.
// SGEMM_CLUSTER_PROCESSES (default: the GPU count, at most 4) processes.
// ClusterTwoGpusEach runs both splits with two GPUs per process (4 GPUs), so
// a process holds ranks besides rank 0 and the coordinator a rank that is not
// rank 0.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "client/sgemm_client.h"
#include "common/reference_gemm.h"
#include "tests/common/gpu_test.h"
#include "tests/e2e/server_process.h"

namespace sgemm {
namespace {

using testing::ServerProcess;
using namespace std::chrono_literals;

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

int processes(int gpus_each) {
  const int gpus = testing::cuda_device_count() / gpus_each;
  if (const char* e = std::getenv("SGEMM_CLUSTER_PROCESSES")) return std::min(gpus, std::atoi(e));
  return std::min(gpus, 4);
}

// A server that sees only GPUs [first, first + count).
std::unique_ptr<ServerProcess> start_on_gpus(int first, int count, std::vector<std::string> flags) {
  const char* old = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string saved = old ? old : "";
  std::string visible;
  for (int g = first; g < first + count; ++g) {
    if (!visible.empty()) visible += ',';
    visible += std::to_string(g);
  }
  setenv("CUDA_VISIBLE_DEVICES", visible.c_str(), 1);
  setenv("SGEMM_E2E_BACKEND", "cuda", 1);  // ServerProcess passes --backend from it
  auto p = std::make_unique<ServerProcess>(flags);
  if (old)
    setenv("CUDA_VISIBLE_DEVICES", saved.c_str(), 1);
  else
    unsetenv("CUDA_VISIBLE_DEVICES");
  return p;
}

class Cluster : public ::testing::Test {
 protected:
  // GPUs each server process sees (one NCCL rank each).
  virtual int gpus_each() const { return 1; }
  void SetUp() override {
    n_ = processes(gpus_each());
    if (n_ < 2)
      GTEST_SKIP() << "needs " << 2 * gpus_each() << " CUDA devices (" << gpus_each() << " per server process), found "
                   << testing::cuda_device_count();
    cluster_addr_ = "127.0.0.1:" + std::to_string(free_port());
    coord_ = start_on_gpus(0, gpus_each(),
                           {"--cluster-listen", cluster_addr_, "--cluster-always", "--cluster-name", "coord"});
    ASSERT_TRUE(coord_->running()) << coord_->log();
    for (int i = 1; i < n_; ++i) {
      add_member(i);
      ASSERT_TRUE(coord_->log_has("'member-" + std::to_string(i) + "' joined", 60000)) << coord_->log();
    }
    client_ = Client::connect(coord_->address(), no_retry());
    wait_cluster_ready(n_ * gpus_each());
  }
  // Requests run on the coordinator alone while the communicator forms: one
  // small request starts forming it, then the coordinator's log says it is
  // ready over `ranks` GPUs.
  void wait_cluster_ready(int ranks) {
    const std::string ready = " ready: " + std::to_string(ranks) + " ranks";
    const int before = coord_->log_count(ready);
    StatusOr<MultiplyResult> warm = multiply(GemmShape{64, 64, 64}, false, 99);
    ASSERT_TRUE(warm.ok()) << warm.status().to_string() << "\n" << coord_->log();
    coord_->log_count_reaches(ready, before + 1, 60000);
    ASSERT_EQ(coord_->log_count(ready), before + 1) << coord_->log();
  }
  void add_member(int i) {
    if (members_.size() < size_t(i)) members_.resize(size_t(i));
    members_[size_t(i - 1)] = start_on_gpus(i * gpus_each(), gpus_each(),
                                            {"--join", cluster_addr_, "--cluster-name", "member-" + std::to_string(i)});
  }
  static ClientOptions no_retry() {
    ClientOptions o;
    o.retry.max_attempts = 1;
    return o;
  }
  // Multiplies fresh random matrices, checks C against the fp64 reference.
  StatusOr<MultiplyResult> multiply(GemmShape s, bool with_c, uint64_t seed, bool all_rows = true,
                                    SplitMode split = SplitMode::kAuto) {
    std::vector<float> a(size_t(s.m * s.k)), b(size_t(s.k * s.n)), c(size_t(s.m * s.n));
    fill_random(a, seed);
    fill_random(b, seed + 1);
    fill_random(c, seed + 2);
    MultiplyOptions o;
    o.alpha = 0.75f;
    o.beta = with_c ? -1.25f : 0.0f;
    o.split = split;
    // A request that stalls fails within the suite's time (the server's own
    // cluster job timeout is ten minutes) and the assertion shows the log.
    o.timeout = 60s;
    StatusOr<MultiplyResult> r = client_->multiply(s, a.data(), b.data(), with_c ? c.data() : nullptr, o);
    if (r.ok()) {
      const auto rows = all_rows ? std::vector<int64_t>{} : rows_to_verify(s.m, s.n, s.k, seed, 48);
      const VerifyResult v = verify_gemm(s.m, s.n, s.k, o.alpha, a.data(), b.data(), o.beta,
                                         with_c ? c.data() : nullptr, r->c.data(), rows);
      EXPECT_TRUE(v.passed(kSgemmTolerance)) << s.m << "x" << s.n << "x" << s.k << ": max rel error " << v.max_rel_error
                                             << " at " << v.worst_row << "," << v.worst_col;
    }
    return r;
  }

  int n_ = 0;
  std::string cluster_addr_;
  std::unique_ptr<ServerProcess> coord_;
  std::vector<std::unique_ptr<ServerProcess>> members_;
  std::unique_ptr<Client> client_;
};

// The summary lists the kernels every process's ranks launched (the members'
// come back with their timings): each rank with work launched at least one,
// and `kernel` names the most launched.
void expect_every_rank_launched(const MultiplySummary& sum) {
  ASSERT_FALSE(sum.kernel_rows.empty()) << sum.plan_reason;
  int64_t launches = 0, most = 0, working = 0;
  std::string most_name;
  for (const KernelRowResult& k : sum.kernel_rows) {
    launches += k.launches;
    if (k.launches > most) {
      most = k.launches;
      most_name = k.name;
    }
  }
  for (const auto& d : sum.devices) working += d.row_end > d.row_begin && d.k_end > d.k_begin;
  EXPECT_GE(launches, working);
  EXPECT_EQ(sum.kernel, most_name);
}

TEST_F(Cluster, RowSplitOverEveryProcessMatchesTheReference) {
  for (auto [s, with_c] : {std::pair{GemmShape{1025, 777, 3001}, true}, std::pair{GemmShape{4096, 4096, 4096}, false},
                           std::pair{GemmShape{3, 5, 7}, true}, std::pair{GemmShape{2049, 1000, 513}, false}}) {
    StatusOr<MultiplyResult> r =
        multiply(s, with_c, uint64_t(s.m + s.k), s.m * s.n * s.k < (int64_t{1} << 33), SplitMode::kRows);
    ASSERT_TRUE(r.ok()) << r.status().to_string() << "\n" << coord_->log();
    EXPECT_EQ(r->summary.split, "rows");
    EXPECT_NE(r->summary.plan_reason.find("cluster rows"), std::string::npos) << r->summary.plan_reason;
    ASSERT_EQ(int(r->summary.devices.size()), n_);
    EXPECT_EQ(r->summary.devices[0].host, "coord");
    for (int i = 1; i < n_; ++i) EXPECT_EQ(r->summary.devices[size_t(i)].host, "member-" + std::to_string(i));
    int64_t next = 0;
    for (const auto& d : r->summary.devices) {
      EXPECT_EQ(d.row_begin, next);
      next = d.row_end;
    }
    EXPECT_EQ(next, s.m);
    expect_every_rank_launched(r->summary);
  }
}

TEST_F(Cluster, KSplitOverEveryProcessMatchesTheReference) {
  // Odd shapes, C with beta != 0: the reduce-scatter's blocks pad m up to a
  // multiple of the process count; small m x n with long K as the K split
  // is meant for, and m smaller than the process count.
  for (auto [s, with_c] : {std::pair{GemmShape{333, 257, 40001}, true}, std::pair{GemmShape{1025, 777, 3001}, true},
                           std::pair{GemmShape{3, 5, 7}, true}, std::pair{GemmShape{129, 63, 65537}, false},
                           std::pair{GemmShape{384, 256, 262145}, true}}) {
    // Sampled rows of C above 2^32 multiply-adds (the fp64 reference is on the CPU).
    StatusOr<MultiplyResult> r =
        multiply(s, with_c, uint64_t(s.m * 3 + s.k), s.m * s.n * s.k < (int64_t{1} << 32), SplitMode::kK);
    ASSERT_TRUE(r.ok()) << r.status().to_string() << "\n" << coord_->log();
    EXPECT_EQ(r->summary.split, "k");
    EXPECT_NE(r->summary.plan_reason.find("cluster K split"), std::string::npos) << r->summary.plan_reason;
    // Its slices were costed at the fan-out rate measured at join.
    EXPECT_NE(r->summary.plan_reason.find(", fan-out "), std::string::npos) << r->summary.plan_reason;
    ASSERT_EQ(int(r->summary.devices.size()), n_);
    EXPECT_EQ(r->summary.devices[0].host, "coord");
    for (int i = 1; i < n_; ++i) EXPECT_EQ(r->summary.devices[size_t(i)].host, "member-" + std::to_string(i));
    int64_t next = 0;
    for (const auto& d : r->summary.devices) {
      EXPECT_EQ(d.k_begin, next);
      EXPECT_GT(d.k_end, d.k_begin);
      EXPECT_EQ(d.row_begin, 0);
      EXPECT_EQ(d.row_end, s.m);
      next = d.k_end;
    }
    EXPECT_EQ(next, s.k);
    expect_every_rank_launched(r->summary);
  }
  // The link was measured at join twice over: the broadcast and rank 0's
  // concurrent sends to every member (the fan-out), both logged.
  const std::string members = std::to_string(n_ - 1);
  EXPECT_TRUE(coord_->log_has("link between hosts", 0)) << coord_->log();
  EXPECT_TRUE(coord_->log_has("GB/s aggregate (" + members + " x 64 MiB in", 0)) << coord_->log();
  // The row split still runs after K-split jobs on the same communicator.
  StatusOr<MultiplyResult> rows = multiply(GemmShape{1025, 777, 3001}, true, 11, true, SplitMode::kRows);
  ASSERT_TRUE(rows.ok()) << rows.status().to_string() << "\n" << coord_->log();
  EXPECT_EQ(rows->summary.split, "rows");
}

TEST_F(Cluster, MemberKilledMidRequestFailsItAndTheNextIsServed) {
  // Warm the communicator, then a product long enough to kill a member in.
  ASSERT_TRUE(multiply(GemmShape{512, 512, 512}, false, 1).ok()) << coord_->log();
  const std::string victim = "member-" + std::to_string(n_ - 1);
  std::atomic<bool> killed{false}, finished{false};
  std::thread killer([&] {
    // The coordinator logs each cluster job as it sends it to the members.
    while (!finished) {
      if (coord_->log_has("job 3: 16384x16384x16384", 0)) {
        kill(members_.back()->pid(), SIGKILL);
        killed = true;
        return;
      }
      std::this_thread::sleep_for(5ms);
    }
  });
  StatusOr<MultiplyResult> r = multiply(GemmShape{16384, 16384, 16384}, false, 2, /*all_rows=*/false, SplitMode::kRows);
  finished = true;
  killer.join();
  ASSERT_TRUE(killed) << coord_->log();
  if (r.ok()) GTEST_SKIP() << "the product finished before the member died; nothing to test";
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().to_string();
  EXPECT_NE(r.status().message().find(victim), std::string::npos) << r.status().to_string();

  // The next request, served by the processes left, within 30 s.
  const auto t0 = std::chrono::steady_clock::now();
  StatusOr<MultiplyResult> next = multiply(GemmShape{1024, 1024, 2048}, true, 3);
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(next.ok()) << next.status().to_string() << "\n" << coord_->log();
  EXPECT_LT(took, 30s);
  // On the coordinator alone while the communicator over the rest forms.
  EXPECT_EQ(int(next->summary.devices.size()), 1) << next->summary.plan_reason;
  std::printf("next request after the kill: %.0f ms, on %zu GPU(s)\n",
              std::chrono::duration<double, std::milli>(took).count(), next->summary.devices.size());

  // The member comes back: the cluster has every process again.
  add_member(n_ - 1);
  const std::string joined = "'" + victim + "' joined with";
  coord_->log_count_reaches(joined, 2, 60000);
  ASSERT_EQ(coord_->log_count(joined), 2) << coord_->log();
  wait_cluster_ready(n_);
  StatusOr<MultiplyResult> again = multiply(GemmShape{1025, 777, 3001}, true, 4);
  ASSERT_TRUE(again.ok()) << again.status().to_string() << "\n" << coord_->log();
  EXPECT_EQ(int(again->summary.devices.size()), n_);
}

// Two GPUs per process: rank 0's process holds rank 1 too (it takes its rows
// or slice over its own host link, B from the broadcast), a member holds two
// ranks (both receive from rank 0, both send back).
class ClusterTwoGpusEach : public Cluster {
 protected:
  int gpus_each() const override { return 2; }
  void expect_hosts(const MultiplyResult& r) {
    ASSERT_EQ(int(r.summary.devices.size()), 2 * n_);
    for (int i = 0; i < 2 * n_; ++i)
      EXPECT_EQ(r.summary.devices[size_t(i)].host, i < 2 ? "coord" : "member-" + std::to_string(i / 2));
  }
};

TEST_F(ClusterTwoGpusEach, RowAndKSplitsMatchTheReference) {
  for (auto [s, with_c] : {std::pair{GemmShape{1025, 777, 3001}, true}, std::pair{GemmShape{3, 5, 7}, true},
                           std::pair{GemmShape{4099, 1000, 513}, false}}) {
    StatusOr<MultiplyResult> r = multiply(s, with_c, uint64_t(s.m + s.k), true, SplitMode::kRows);
    ASSERT_TRUE(r.ok()) << r.status().to_string() << "\n" << coord_->log();
    EXPECT_EQ(r->summary.split, "rows");
    EXPECT_NE(r->summary.plan_reason.find("cluster rows"), std::string::npos) << r->summary.plan_reason;
    expect_hosts(*r);
    int64_t next = 0;
    for (const auto& d : r->summary.devices) {
      EXPECT_EQ(d.row_begin, next);
      next = d.row_end;
    }
    EXPECT_EQ(next, s.m);
  }
  for (auto [s, with_c] : {std::pair{GemmShape{333, 257, 40001}, true}, std::pair{GemmShape{3, 5, 7}, true},
                           std::pair{GemmShape{129, 63, 65537}, false}}) {
    StatusOr<MultiplyResult> r = multiply(s, with_c, uint64_t(s.m * 3 + s.k), true, SplitMode::kK);
    ASSERT_TRUE(r.ok()) << r.status().to_string() << "\n" << coord_->log();
    EXPECT_EQ(r->summary.split, "k");
    EXPECT_NE(r->summary.plan_reason.find("cluster K split"), std::string::npos) << r->summary.plan_reason;
    expect_hosts(*r);
    int64_t next = 0;
    for (const auto& d : r->summary.devices) {
      EXPECT_EQ(d.k_begin, next);
      EXPECT_GT(d.k_end, d.k_begin);
      next = d.k_end;
    }
    EXPECT_EQ(next, s.k);
  }
}

}  // namespace
}  // namespace sgemm
