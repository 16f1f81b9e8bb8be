// A ClusterDataPlane without GPUs or NCCL, for the control plane's tests: the
// planes of one test share a FakeFabric that stands in for the NCCL network.
// Each rank computes its own rows of C (in fp32, on the CPU) from the root's
// host matrices; the root waits for every rank's rows as it would for the
// shards coming back. A K-split job: each rank adds its partial product (its
// slice of K) into the fabric's sum, and the root writes alpha * sum + beta * C. A plane told to hang waits, like a
// rank in a collective whose peer died, until its abort token is cancelled.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "server/engine/cluster_plane.h"

namespace sgemm::testing {

struct FakeFabric {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t job_id = 0;
  const GemmJob* job = nullptr;  // guarded by mu: the root's job under way
  ClusterJobSpec spec;           // guarded by mu
  std::set<int> ranks_done;      // guarded by mu
  std::vector<float> k_sum;      // guarded by mu: a K-split job's partials, summed
  int ids = 0;
};

class FakePlane final : public ClusterDataPlane {
 public:
  FakePlane(FakeFabric& fabric, int gpus, std::string name) : fabric_(fabric), gpus_(gpus), name_(std::move(name)) {}

  std::vector<DeviceInfo> local_devices() const override {
    std::vector<DeviceInfo> v;
    for (int i = 0; i < gpus_; ++i) v.push_back(DeviceInfo{i, name_ + " gpu " + std::to_string(i), 0, 0, 0, 0});
    return v;
  }
  StatusOr<std::string> new_unique_id() override {
    std::lock_guard lock(fabric_.mu);
    return "fake-id-" + std::to_string(++fabric_.ids);
  }
  Status connect(const ClusterCommSpec& spec, const CancelToken* abort, int64_t) override {
    // Told to hang: like a rank that never calls ncclCommInitRank, until aborted.
    if (Status s = hang_while(&FakePlane::hang_connect_, abort); !s.ok()) return s;
    std::lock_guard lock(mu_);
    connects_.push_back(spec);
    comm_ = spec;
    return Status::Ok();
  }
  void disconnect() override {
    std::lock_guard lock(mu_);
    ++disconnects_;
    comm_ = ClusterCommSpec{};
  }
  StatusOr<ClusterRunResult> run_root(const ClusterJobSpec& spec, const GemmJob& job,
                                      const CancelToken* abort) override {
    record(spec);
    ClusterRunResult r;
    if (spec.kind == ClusterJobKind::kProbe) {
      // Told to hang the probe: a link that never delivers, until aborted.
      if (Status s = hang_while(&FakePlane::hang_probe_, abort); !s.ok()) return s;
      r.elapsed_ms = 1.0;  // the broadcast
      r.fanout_ms = 2.0;   // the sends to every remote rank
      return r;
    }
    {
      std::lock_guard lock(fabric_.mu);
      fabric_.job_id = spec.job_id;
      fabric_.job = &job;
      fabric_.spec = spec;
      fabric_.ranks_done.clear();
      if (spec.kind == ClusterJobKind::kK) fabric_.k_sum.assign(size_t(spec.shape.m * spec.shape.n), 0.0f);
      fabric_.cv.notify_all();
    }
    SGEMM_RETURN_IF_ERROR(compute_mine(spec, abort, &r));
    std::unique_lock lock(fabric_.mu);
    while (int(fabric_.ranks_done.size()) < int(spec.ranks.size())) {
      if (abort && !abort->status().ok()) {
        fabric_.job = nullptr;
        return abort->status();
      }
      fabric_.cv.wait_for(lock, std::chrono::milliseconds(5));
    }
    if (spec.kind == ClusterJobKind::kK)
      for (size_t i = 0; i < fabric_.k_sum.size(); ++i)
        job.c[i] = spec.alpha * fabric_.k_sum[i] + (spec.has_c ? spec.beta * job.c[i] : 0.0f);
    fabric_.job = nullptr;
    return r;
  }
  StatusOr<ClusterRunResult> run_member(const ClusterJobSpec& spec, const CancelToken* abort) override {
    record(spec);
    ClusterRunResult r;
    if (spec.kind == ClusterJobKind::kProbe) return r;
    SGEMM_RETURN_IF_ERROR(compute_mine(spec, abort, &r));
    return r;
  }

  // Test controls and records.
  void set_hang_connect(bool h) {
    std::lock_guard lock(mu_);
    hang_connect_ = h;
  }
  void set_hang_probe(bool h) {
    std::lock_guard lock(mu_);
    hang_probe_ = h;
  }
  void set_hang(bool h) {
    std::lock_guard lock(mu_);
    hang_ = h;
  }
  // Told to fail: the job is refused on this process once it is under way,
  // like a rank whose kernel failed (the ranks' collectives are aborted).
  void set_fail(Status s) {
    std::lock_guard lock(mu_);
    fail_ = std::move(s);
  }
  bool running() {
    std::lock_guard lock(mu_);
    return running_;
  }
  std::vector<ClusterCommSpec> connects() {
    std::lock_guard lock(mu_);
    return connects_;
  }
  std::vector<ClusterJobSpec> jobs() {
    std::lock_guard lock(mu_);
    return jobs_;
  }
  int disconnects() {
    std::lock_guard lock(mu_);
    return disconnects_;
  }

 private:
  // Returns once the flag (one of the hang_ members) is clear, or with the
  // abort's status: a peer that never answers, until aborted. Polls every 5 ms.
  Status hang_while(bool FakePlane::*flag, const CancelToken* abort) {
    for (;;) {
      {
        std::lock_guard lock(mu_);
        if (!(this->*flag)) return Status::Ok();
      }
      if (abort && !abort->status().ok()) return abort->status();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  void record(const ClusterJobSpec& spec) {
    std::lock_guard lock(mu_);
    jobs_.push_back(spec);
  }
  struct Running {
    FakePlane* p;
    explicit Running(FakePlane* p) : p(p) {
      std::lock_guard lock(p->mu_);
      p->running_ = true;
    }
    ~Running() {
      std::lock_guard lock(p->mu_);
      p->running_ = false;
    }
  };
  // Waits for the root's job, then computes this process's ranks' rows.
  Status compute_mine(const ClusterJobSpec& spec, const CancelToken* abort, ClusterRunResult* r) {
    Running running(this);
    int first = 0;
    bool hang = false;
    Status fail;
    {
      std::lock_guard lock(mu_);
      first = comm_.first_rank;
      hang = hang_;
      fail = fail_;
      if (comm_.epoch != spec.epoch) return Unavailable("fake plane: job for another epoch");
    }
    std::unique_lock lock(fabric_.mu);
    for (;;) {
      if (abort && !abort->status().ok()) return abort->status();
      if (!hang && fabric_.job && fabric_.job_id == spec.job_id) break;
      fabric_.cv.wait_for(lock, std::chrono::milliseconds(5));
    }
    if (!fail.ok()) return fail;
    const GemmJob& job = *fabric_.job;
    const auto& s = spec.shape;
    for (int rank = first; rank < first + gpus_; ++rank) {
      const Shard& sh = spec.ranks[size_t(rank)];
      if (spec.kind == ClusterJobKind::kK) {
        for (int64_t i = 0; i < s.m; ++i)
          for (int64_t j = 0; j < s.n; ++j) {
            float acc = 0;
            for (int64_t p = sh.k_begin; p < sh.k_end; ++p) acc += job.a[i * s.k + p] * job.b[p * s.n + j];
            fabric_.k_sum[size_t(i * s.n + j)] += acc;
          }
      }
      for (int64_t i = sh.row_begin; spec.kind == ClusterJobKind::kRows && i < sh.row_end; ++i)
        for (int64_t j = 0; j < s.n; ++j) {
          float acc = 0;
          for (int64_t p = 0; p < s.k; ++p) acc += job.a[i * s.k + p] * job.b[p * s.n + j];
          float& c = job.c[i * s.n + j];
          c = spec.alpha * acc + (spec.has_c ? spec.beta * c : 0.0f);
        }
      DeviceTiming t;
      t.device = rank - first;
      t.name = name_;
      t.shard = sh;
      t.kernel_ms = 1;
      r->timings.push_back(t);
      // One launch per rank of a row named after the process, as the engine counts them.
      count_kernel_launches(&r->kernel_rows, "fake_row_" + name_);
      fabric_.ranks_done.insert(rank);
    }
    fabric_.cv.notify_all();
    return Status::Ok();
  }

  FakeFabric& fabric_;
  const int gpus_;
  const std::string name_;
  std::mutex mu_;
  ClusterCommSpec comm_;                   // guarded by mu_
  std::vector<ClusterCommSpec> connects_;  // guarded by mu_
  std::vector<ClusterJobSpec> jobs_;       // guarded by mu_
  int disconnects_ = 0;                    // guarded by mu_
  bool hang_ = false;                      // guarded by mu_
  bool hang_connect_ = false;              // guarded by mu_
  bool hang_probe_ = false;                // guarded by mu_
  bool running_ = false;                   // guarded by mu_
  Status fail_;                            // guarded by mu_
};

}  // namespace sgemm::testing
