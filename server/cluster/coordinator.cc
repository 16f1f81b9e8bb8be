#include "server/cluster/coordinator.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "common/log_text.h"
#include "proto/grpc_status.h"
#include "server/cluster/cluster_codec.h"
#include "server/cluster/cluster_trust.h"
#include "server/cluster/member_reactor.h"

namespace sgemm {

// A member's error texts are kept to this many characters (they go into
// request errors and the log).
constexpr std::size_t kMaxMemberText = 1024;

ClusterCoordinator::ClusterCoordinator(ClusterDataPlane& plane, ClusterOptions options)
    : plane_(plane), options_(std::move(options)) {}

ClusterCoordinator::~ClusterCoordinator() { shutdown(); }

void ClusterCoordinator::log(const std::string& msg) const {
  if (options_.log) options_.log(log_line("cluster: " + msg));  // a member's strings cannot forge a line
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* ClusterCoordinator::Join(
    grpc::CallbackServerContext* ctx) {
  auto* r = new MemberReactor(this);
  if (Status trusted = check_cluster_token(ctx, options_.token); !trusted.ok()) {
    log("refused a Join from " + ctx->peer() + ": " + trusted.message());
    r->finish(to_grpc(trusted));
    return r;
  }
  MutexLock lock(mu_);
  if (shut_down_) r->finish(to_grpc(Unavailable("the coordinator is shutting down")));
  return r;
}

int ClusterCoordinator::member_count() const {
  MutexLock lock(mu_);
  return int(members_.size());
}

ClusterCoordinator::Member* ClusterCoordinator::find_locked(MemberReactor* r) {
  for (auto& [id, m] : members_)
    if (m.reactor == r) return &m;
  return nullptr;
}

void ClusterCoordinator::on_message(MemberReactor* r, const v1::ClusterMemberMessage& msg) {
  MutexLock lock(mu_);
  Member* m = find_locked(r);
  if (msg.has_hello()) {
    if (m || shut_down_) return;  // one hello per stream
    Status valid = check_hello(msg.hello());
    if (valid.ok() && int(members_.size()) >= kMaxClusterMembers)
      valid = ResourceExhausted("the cluster has " + std::to_string(members_.size()) + " members, its limit");
    if (auto ban = banned_.find(msg.hello().host()); valid.ok() && ban != banned_.end()) {
      const auto now = std::chrono::steady_clock::now();
      if (now < ban->second)
        valid = Unavailable(
            "cluster member '" + ban->first + "' did not answer ready within " +
            std::to_string(options_.connect_timeout_ms) + " ms and may join again in " +
            std::to_string(std::chrono::duration_cast<std::chrono::seconds>(ban->second - now).count() + 1) + " s");
      else
        banned_.erase(ban);
    }
    if (!valid.ok()) {
      log("refused a hello: " + valid.message());
      r->finish(to_grpc(valid));
      return;
    }
    Member nm;
    nm.id = next_member_id_++;
    nm.host = msg.hello().host().empty() ? "member-" + std::to_string(nm.id) : msg.hello().host();
    nm.devices = msg.hello().devices_size();
    nm.reactor = r;
    if (nm.devices < 1) {
      r->finish(to_grpc(FailedPrecondition("a member needs at least one GPU")));
      return;
    }
    v1::ClusterCoordinatorMessage welcome;
    welcome.mutable_welcome()->set_member_id(nm.id);
    r->send(welcome);
    log("member " + std::to_string(nm.id) + " '" + nm.host + "' joined with " + std::to_string(nm.devices) +
        " GPU(s); a communicator over the members forms at the next cluster request");
    members_.emplace(nm.id, std::move(nm));
    ++generation_;
  } else if (!m) {
    return;  // nothing before hello
  } else if (msg.has_ready()) {
    m->ready_epoch = msg.ready().epoch();
    m->ready_ok = msg.ready().ok();
    m->ready_error = msg.ready().error().substr(0, kMaxMemberText);
  } else if (msg.has_done()) {
    m->done_job = msg.done().job_id();
    m->done_ok = msg.done().ok();
    m->done_error = msg.done().error().substr(0, kMaxMemberText);
    m->done_timings = timings_from_proto(msg.done());
    m->done_kernel_rows = kernel_rows_from_proto(msg.done());
    // A member that failed the job under way has aborted its ranks, so rank
    // 0's collectives with them would wait until the job timeout (NCCL over
    // NVLink does not see a peer's abort): its error ends the job now.
    if (!m->done_ok && abort_ && m->done_job == abort_job_ &&
        std::find(abort_members_.begin(), abort_members_.end(), m->id) != abort_members_.end())
      abort_->cancel(Unavailable("cluster member '" + m->host + "' failed the job: " + m->done_error));
  }
  cv_.notify_all();
}

void ClusterCoordinator::on_left(MemberReactor* r, const std::string& why) {
  MutexLock lock(mu_);
  Member* m = find_locked(r);
  if (!m) return;
  const uint64_t id = m->id;
  const std::string who = "cluster member '" + m->host + "' (member " + std::to_string(id) + ")";
  log(who + " left: " + why);
  for (uint64_t a : abort_members_)
    if (a == id && abort_) abort_->cancel(Unavailable(who + " left during the request (" + why + ")"));
  const bool in_view = std::find(view_members_.begin(), view_members_.end(), id) != view_members_.end();
  members_.erase(id);
  ++generation_;
  cv_.notify_all();
  // Its communicator ends now, not at the next request: NCCL frees a process's
  // ranks only once every rank on the node lets go (a rank's proxy waits for
  // its local peers). The rebuild aborts this side's and hands the members
  // left a new one, which makes them abort theirs.
  if (in_view && !shut_down_ && !building_) start_build_locked();
}

void ClusterCoordinator::forget(MemberReactor* r) {
  MutexLock lock(mu_);
  if (Member* m = find_locked(r)) {
    members_.erase(m->id);
    ++generation_;
    cv_.notify_all();
  }
}

void ClusterCoordinator::shutdown() {
  std::thread builder;
  {
    MutexLock lock(mu_);
    shut_down_ = true;
    if (abort_) abort_->cancel(Unavailable("the coordinator is shutting down"));
    for (auto& [id, m] : members_) m.reactor->finish(to_grpc(Unavailable("the coordinator is shutting down")));
    cv_.notify_all();
    builder = std::move(builder_);
  }
  if (builder.joinable()) builder.join();  // its prepare() returns at once now
}

StatusOr<ClusterRunResult> ClusterCoordinator::run(ClusterJobSpec spec, const GemmJob& job) {
  MutexLock lock(mu_);
  return run_locked_job(lock, std::move(spec), &job);
}

StatusOr<ClusterRunResult> ClusterCoordinator::run_locked_job(MutexLock& lock, ClusterJobSpec spec,
                                                              const GemmJob* job) {
  if (shut_down_) return Unavailable("the coordinator is shutting down");
  if (built_generation_ != generation_ || view_.members == 0)
    return Unavailable("the cluster changed since it was prepared; retry");
  spec.job_id = next_job_id_++;
  spec.epoch = view_.epoch;
  const std::vector<uint64_t> ids = view_members_;
  const std::vector<ClusterView::Rank> ranks = view_.ranks;
  for (uint64_t mid : ids) {
    v1::ClusterCoordinatorMessage msg;
    job_to_proto(spec, msg.mutable_job());
    members_[mid].reactor->send(msg);
  }
  auto abort = std::make_shared<CancelToken>();
  abort_ = abort;
  abort_members_ = ids;
  abort_job_ = spec.job_id;
  if (spec.kind != ClusterJobKind::kProbe)
    log("job " + std::to_string(spec.job_id) + (spec.kind == ClusterJobKind::kK ? " (K split): " : ": ") +
        gemm_shape_text(spec.shape) + " over " + std::to_string(ranks.size()) + " ranks");
  // Released through the mutex itself, not `lock`: the analysis follows a
  // MutexLock only in the scope that made it. Taken again on every path.
  mu_.unlock();
  StatusOr<ClusterRunResult> mine =
      job ? plane_.run_root(spec, *job, abort.get()) : plane_.run_root(spec, GemmJob{}, abort.get());
  mu_.lock();
  Status s = mine.ok() ? Status::Ok() : mine.status();
  if (!s.ok() && abort->status().ok()) {
    // NCCL may see a dead peer before its stream's end reaches us: give the
    // control plane a moment to say which member it was.
    lock.wait_for(cv_, std::chrono::seconds(2), [&] { return !abort->status().ok(); });
  }
  if (!abort->status().ok()) s = abort->status();  // a member left: that is the cause
  if (s.ok())
    s = wait_members_locked(
        lock, ids, *abort, options_.job_timeout_ms, "the job",
        [](const Member& m, uint64_t j) { return m.done_job == j; }, spec.job_id);
  ClusterRunResult out;
  if (s.ok()) {
    out = *mine;
    for (auto& t : out.timings) t.host = options_.host;
    for (uint64_t mid : ids) {
      const Member& m = members_[mid];
      if (!m.done_ok) {
        s = Unavailable("cluster member '" + m.host + "' failed the job: " + m.done_error);
        break;
      }
      for (DeviceTiming t : m.done_timings) {
        t.host = m.host;
        if (spec.kind == ClusterJobKind::kRows) {  // the row split gives every rank all of K
          t.shard.k_begin = 0;
          t.shard.k_end = spec.shape.k;
        }
        out.timings.push_back(std::move(t));
      }
      for (const KernelRowUse& k : m.done_kernel_rows) count_kernel_launches(&out.kernel_rows, k.name, k.launches);
    }
  }
  abort_.reset();
  abort_members_.clear();
  abort_job_ = 0;
  if (!s.ok()) {
    ++generation_;  // the communicator may be broken: build a new one before the next job
    log("job " + std::to_string(spec.job_id) + " failed: " + s.to_string());
    return s;
  }
  return out;
}

}  // namespace sgemm
