// A member of a cluster (docs/cluster.md): this process's GPUs joined to a
// coordinator's communicator. Holds one Join stream to the coordinator (its
// end is our leaving), builds each communicator the coordinator hands out and
// runs its ranks' part of each job sent ahead of the NCCL calls.
//
// Threads: start() starts two. The session thread connects, says hello and
// reads the coordinator's messages; a new communicator (or the stream's end)
// cancels whatever the worker is running, so a job stuck on a dead rank stops
// and the communicator is aborted. The worker thread runs connect() and jobs
// on the data plane, one at a time, and writes the answers. When the
// coordinator goes away the member joins again every rejoin_interval_ms.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>

#include "common/thread_annotations.h"
#include "server/cluster/cluster_options.h"
#include "server/engine/cluster_plane.h"

namespace sgemm {

class ClusterMember {
 public:
  ClusterMember(ClusterDataPlane& plane, std::string coordinator, ClusterOptions options);
  ~ClusterMember();  // stop()
  ClusterMember(const ClusterMember&) = delete;
  ClusterMember& operator=(const ClusterMember&) = delete;

  void start();
  // Leaves the cluster: ends the stream, stops the job under way, joins the threads.
  void stop() SGEMM_EXCLUDES(mu_);

  // For tests and logs.
  uint64_t member_id() const { return member_id_.load(); }
  uint64_t epoch() const { return epoch_.load(); }  // the communicator last joined
  int64_t jobs_done() const { return jobs_done_.load(); }

 private:
  struct Session;
  struct Task {
    enum Kind { kComm, kJob, kDisconnect, kQuit } kind = kQuit;
    ClusterCommSpec comm;
    std::string job;  // a serialised v1::ClusterJob (keeps protobuf out of this header)
    std::shared_ptr<Session> session;
    std::shared_ptr<CancelToken> abort;
    static Task of(Kind k) {
      Task t;
      t.kind = k;
      return t;
    }
  };
  void session_loop() SGEMM_EXCLUDES(mu_);
  void worker_loop() SGEMM_EXCLUDES(mu_);
  void push(Task t) SGEMM_EXCLUDES(mu_);
  void log(const std::string& msg) const;

  ClusterDataPlane& plane_;
  const std::string coordinator_;
  const ClusterOptions options_;
  std::atomic<uint64_t> member_id_{0};
  std::atomic<uint64_t> epoch_{0};
  std::atomic<int64_t> jobs_done_{0};

  Mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> tasks_ SGEMM_GUARDED_BY(mu_);
  std::shared_ptr<CancelToken> current_ SGEMM_GUARDED_BY(mu_);  // cancelled by a new comm or the stream's end
  std::shared_ptr<Session> session_ SGEMM_GUARDED_BY(mu_);      // the open stream
  bool stopping_ SGEMM_GUARDED_BY(mu_) = false;
  std::thread session_thread_, worker_thread_;
};

}  // namespace sgemm
