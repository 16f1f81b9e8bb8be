// The coordinator of a cluster (docs/cluster.md): the gRPC service members
// join (sgemm.v1.Cluster, one bidi stream per member, its end = the member
// left), the ranks of every GPU, and the jobs it sends ahead of the NCCL
// calls. The data itself moves through a ClusterDataPlane.
//
// Ownership and threads: the Server owns it and registers it on the cluster
// listener. gRPC threads run the member reactors (member_reactor.h: joins,
// Ready, JobDone, leaves); the thread that calls prepare()/run() (a service
// thread, holding job_mutex()) builds communicators and runs jobs. A member that leaves while
// a job includes it cancels that job's abort token, so the data plane stops
// waiting on the GPUs and run() returns UNAVAILABLE naming the member; the
// next prepare() builds a communicator over the members left.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "common/thread_annotations.h"
#include "server/cluster/cluster_options.h"
#include "server/engine/cluster_plane.h"
#include "sgemm/v1/cluster.grpc.pb.h"

namespace sgemm {

class MemberReactor;

// The cluster as the last prepare() built it.
struct ClusterView {
  uint64_t epoch = 0;
  int members = 0;
  struct Rank {
    int host = 0;           // 0: the coordinator; 1.. members in join order
    std::string host_name;  // ClusterOptions::host of that process
    DeviceInfo device;
  };
  std::vector<Rank> ranks;  // NCCL rank order
  double net_gbps = 0;      // measured broadcast algBw from rank 0 (0: not measured)
  // Rank 0's concurrent sends of probe_bytes to every rank on another host:
  // all bytes sent over the time (0: not measured).
  double fanout_gbps = 0;
};

// Join is a raw (grpc::ByteBuffer) method: the reactor parses each message
// in its own reaction, after taking its lock, rather than letting gRPC parse
// into a message the reactor's constructor made on another thread (gRPC
// hands the call between threads through its core, which ThreadSanitizer
// does not see), as the Sgemm service's reactors do.
class ClusterCoordinator final : public v1::Cluster::WithRawCallbackMethod_Join<v1::Cluster::Service> {
 public:
  ClusterCoordinator(ClusterDataPlane& plane, ClusterOptions options);
  ~ClusterCoordinator() override;

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Join(grpc::CallbackServerContext* context) override
      SGEMM_EXCLUDES(mu_);

  int member_count() const SGEMM_EXCLUDES(mu_);
  const ClusterOptions& options() const { return options_; }

  // Held across prepare() and run(): one cluster job (or rebuild) at a time.
  //   MutexLock jobs(coordinator.job_mutex());
  Mutex& job_mutex() SGEMM_RETURN_CAPABILITY(job_mu_) { return job_mu_; }
  // Brings the communicator up to date with the membership (a new epoch and
  // a link measurement when members joined or left, or the last job failed).
  // It waits for every member to join the communicator (up to
  // connect_timeout_ms); requests use current_view() instead.
  StatusOr<ClusterView> prepare() SGEMM_REQUIRES(job_mu_) SGEMM_EXCLUDES(mu_);
  // The communicator's view when it is built over the current members; never
  // waits. Otherwise a builder thread runs prepare() (unless one is running)
  // and this answers UNAVAILABLE saying the communicator is forming: the
  // caller runs the request on this host, so that no request waits on a
  // member that is slow or never answers ready.
  StatusOr<ClusterView> current_view() SGEMM_EXCLUDES(mu_);
  // Runs `spec` (ranks filled by the caller from the view prepare() returned)
  // with `job`'s matrices: sends it to every member, runs rank 0's part, waits
  // for every member's answer. Timings carry each rank's host.
  StatusOr<ClusterRunResult> run(ClusterJobSpec spec, const GemmJob& job) SGEMM_REQUIRES(job_mu_) SGEMM_EXCLUDES(mu_);
  // Ends every member's stream and waits for the builder thread (server shutdown).
  void shutdown() SGEMM_EXCLUDES(mu_);

 private:
  friend class MemberReactor;
  struct Member {
    uint64_t id = 0;
    std::string host;
    int devices = 0;
    MemberReactor* reactor = nullptr;
    int first_rank = -1;
    uint64_t ready_epoch = 0;
    bool ready_ok = false;
    std::string ready_error;
    uint64_t done_job = 0;
    bool done_ok = false;
    std::string done_error;
    std::vector<DeviceTiming> done_timings;
    std::vector<KernelRowUse> done_kernel_rows;
  };

  // Reactor callbacks (gRPC threads).
  void on_message(MemberReactor* r, const v1::ClusterMemberMessage& msg) SGEMM_EXCLUDES(mu_);
  void on_left(MemberReactor* r, const std::string& why) SGEMM_EXCLUDES(mu_);
  void forget(MemberReactor* r) SGEMM_EXCLUDES(mu_);
  Member* find_locked(MemberReactor* r) SGEMM_REQUIRES(mu_);
  // Waits (mu_ held through `lock`) until `done(member)` for every member of
  // `ids`, a member of them leaves, `abort` is cancelled or the deadline passes
  // (then *timed_out, when given, is set: only then did a member stay silent).
  Status wait_members_locked(MutexLock& lock, const std::vector<uint64_t>& ids, const CancelToken& abort,
                             int64_t timeout_ms, const char* what, bool (*done)(const Member&, uint64_t),
                             uint64_t value, bool* timed_out = nullptr) SGEMM_REQUIRES(mu_);
  // Runs a job on the current communicator. mu_ is held through `lock` on
  // entry and on return, and released while rank 0's part runs.
  StatusOr<ClusterRunResult> run_locked_job(MutexLock& lock, ClusterJobSpec spec, const GemmJob* job)
      SGEMM_REQUIRES(job_mu_, mu_);
  void log(const std::string& msg) const;
  // Starts builder_ (prepare() under job_mu_); building_ is false.
  void start_build_locked() SGEMM_REQUIRES(mu_);
  // Whether a member of view_ has left since view_ was built.
  bool view_lost_a_member_locked() const SGEMM_REQUIRES(mu_);

  ClusterDataPlane& plane_;
  const ClusterOptions options_;

  Mutex job_mu_ SGEMM_ACQUIRED_BEFORE(mu_);  // see job_mutex()

  mutable Mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Member> members_ SGEMM_GUARDED_BY(mu_);  // by id = join order
  uint64_t next_member_id_ SGEMM_GUARDED_BY(mu_) = 1;
  uint64_t generation_ SGEMM_GUARDED_BY(mu_) = 1;        // bumped on every join/leave or failed job
  uint64_t built_generation_ SGEMM_GUARDED_BY(mu_) = 0;  // generation_ of the current communicator
  uint64_t epoch_ SGEMM_GUARDED_BY(mu_) = 0;
  uint64_t next_job_id_ SGEMM_GUARDED_BY(mu_) = 1;
  ClusterView view_ SGEMM_GUARDED_BY(mu_);
  std::vector<uint64_t> view_members_ SGEMM_GUARDED_BY(mu_);   // member ids of view_, in rank order
  std::shared_ptr<CancelToken> abort_ SGEMM_GUARDED_BY(mu_);   // the job or rebuild under way
  std::vector<uint64_t> abort_members_ SGEMM_GUARDED_BY(mu_);  // the members it includes
  uint64_t abort_job_ SGEMM_GUARDED_BY(mu_) = 0;               // its job id (0: a rebuild)
  bool shut_down_ SGEMM_GUARDED_BY(mu_) = false;
  bool building_ SGEMM_GUARDED_BY(mu_) = false;  // builder_ is running prepare()
  std::thread builder_ SGEMM_GUARDED_BY(mu_);
  // Members dropped for not answering `ready`, by host name: when they may join again.
  std::map<std::string, std::chrono::steady_clock::time_point> banned_ SGEMM_GUARDED_BY(mu_);
};

}  // namespace sgemm
