// The coordinator's communicator builds (coordinator.h): one builder thread at
// a time forms a view over the members that have joined, hands every member
// its rank, connects this side, waits for each member's ready, then measures
// the link between hosts. A member that fails to join is dropped; the view
// describes this side's communicator exactly while one is up.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "proto/grpc_status.h"
#include "server/cluster/coordinator.h"
#include "server/cluster/member_reactor.h"

namespace sgemm {

StatusOr<ClusterView> ClusterCoordinator::current_view() {
  MutexLock lock(mu_);
  if (shut_down_) return Unavailable("the coordinator is shutting down");
  if (built_generation_ == generation_ && !building_) return view_;
  if (!building_) start_build_locked();
  return Unavailable("the cluster's communicator is forming over its " + std::to_string(members_.size()) +
                     " member(s); requests run on this host until it is ready");
}

void ClusterCoordinator::start_build_locked() {
  building_ = true;
  // The last builder has set building_ = false, its last step under mu_.
  if (builder_.joinable()) builder_.join();
  // It builds again while the view holds a member that has left since it was
  // built: on_left starts no build while one runs, and the members left (or this
  // side, when none is) must drop that member's communicator now, not at the
  // next request. A build that failed to connect has dropped the view.
  builder_ = std::thread([this] {
    for (;;) {
      {
        MutexLock jobs(job_mu_);
        (void)prepare();  // logs what it built, or why it failed
      }
      MutexLock lock(mu_);
      if (shut_down_ || !view_lost_a_member_locked()) {
        building_ = false;
        return;
      }
    }
  });
}

bool ClusterCoordinator::view_lost_a_member_locked() const {
  for (uint64_t id : view_members_)
    if (members_.find(id) == members_.end()) return true;
  return false;
}

Status ClusterCoordinator::wait_members_locked(MutexLock& lock, const std::vector<uint64_t>& ids,
                                               const CancelToken& abort, int64_t timeout_ms, const char* what,
                                               bool (*done)(const Member&, uint64_t), uint64_t value, bool* timed_out) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    if (!abort.status().ok()) return abort.status();
    std::string missing;
    for (uint64_t id : ids) {
      auto it = members_.find(id);
      if (it == members_.end()) return Unavailable("cluster member " + std::to_string(id) + " left " + what);
      if (!done(it->second, value)) missing += (missing.empty() ? "'" : ", '") + it->second.host + "'";
    }
    if (missing.empty()) return Status::Ok();
    if (lock.wait_until(cv_, deadline) == std::cv_status::timeout && std::chrono::steady_clock::now() >= deadline) {
      if (timed_out) *timed_out = true;
      return Unavailable("cluster member(s) " + missing + " did not answer " + what + " within " +
                         std::to_string(timeout_ms) + " ms");
    }
  }
}

StatusOr<ClusterView> ClusterCoordinator::prepare() {
  MutexLock lock(mu_);
  if (shut_down_) return Unavailable("the coordinator is shutting down");
  if (members_.empty()) {
    if (view_.members > 0) {
      lock.unlock();
      plane_.disconnect();
      lock.lock();
    }
    view_ = ClusterView{};
    view_members_.clear();
    built_generation_ = generation_;
    return view_;
  }
  if (built_generation_ == generation_) return view_;
  const uint64_t generation = generation_;
  const uint64_t epoch = ++epoch_;
  lock.unlock();
  StatusOr<std::string> id = plane_.new_unique_id();
  if (!id.ok()) return id.status().with_context("cluster: a communicator id");
  const std::vector<DeviceInfo> local = plane_.local_devices();
  lock.lock();

  ClusterView view;
  view.epoch = epoch;
  for (const DeviceInfo& d : local) view.ranks.push_back(ClusterView::Rank{0, options_.host, d});
  std::vector<uint64_t> ids;
  int host = 0;
  for (auto& [mid, m] : members_) {
    m.first_rank = int(view.ranks.size());
    ++host;
    for (int i = 0; i < m.devices; ++i) {
      DeviceInfo d;
      d.index = i;
      d.name = "GPU " + std::to_string(i) + " of " + m.host;
      view.ranks.push_back(ClusterView::Rank{host, m.host, d});
    }
    ids.push_back(mid);
  }
  view.members = int(ids.size());
  for (uint64_t mid : ids) {
    Member& m = members_[mid];
    v1::ClusterCoordinatorMessage msg;
    auto* c = msg.mutable_comm();
    c->set_epoch(epoch);
    c->set_unique_id(*id);
    c->set_nranks(int(view.ranks.size()));
    c->set_first_rank(m.first_rank);
    m.reactor->send(msg);
  }
  auto abort = std::make_shared<CancelToken>();
  abort_ = abort;
  abort_members_ = ids;
  log("epoch " + std::to_string(epoch) + ": building a communicator over " + std::to_string(view.ranks.size()) +
      " GPUs on " + std::to_string(ids.size() + 1) + " hosts");
  lock.unlock();

  ClusterCommSpec spec{epoch, *id, int(view.ranks.size()), 0};
  Status s = plane_.connect(spec, abort.get(), options_.connect_timeout_ms);
  lock.lock();
  bool members_timed_out = false;  // the wait for ready ran to its deadline
  if (s.ok())
    s = wait_members_locked(
        lock, ids, *abort, options_.connect_timeout_ms, "the communicator",
        [](const Member& m, uint64_t e) { return m.ready_epoch == e; }, epoch, &members_timed_out);
  if (s.ok()) {
    for (uint64_t mid : ids) {
      const Member& m = members_[mid];
      if (!m.ready_ok) {
        s = Unavailable("cluster member '" + m.host + "' could not join the communicator: " + m.ready_error);
        break;
      }
    }
  }
  abort_.reset();
  abort_members_.clear();
  abort_job_ = 0;
  if (!s.ok()) {
    // Members that did not join are dropped, and leave the members at once so
    // that no build counts them while their streams close: they join again with
    // a new stream. One that never answered while the wait for ready ran to its
    // deadline is kept out for rejoin_ban_ms: otherwise it would rejoin and hold
    // the next request too. When the wait was cut short (a member left), the
    // others' silence says nothing.
    const auto ban_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.rejoin_ban_ms);
    for (uint64_t mid : ids) {
      auto it = members_.find(mid);
      if (it == members_.end() || (it->second.ready_epoch == epoch && it->second.ready_ok)) continue;
      const bool silent = members_timed_out && it->second.ready_epoch != epoch;
      if (silent && options_.rejoin_ban_ms > 0) {
        banned_[it->second.host] = ban_until;
        log("member '" + it->second.host + "' did not answer ready for epoch " + std::to_string(epoch) +
            "; it may not join again for " + std::to_string(options_.rejoin_ban_ms) + " ms");
      }
      it->second.reactor->finish(to_grpc(Unavailable("did not join communicator epoch " + std::to_string(epoch))));
      members_.erase(it);
    }
    ++generation_;
    view_ = ClusterView{};  // this side's communicator, which the view described, ends here
    view_members_.clear();
    lock.unlock();
    plane_.disconnect();
    log("epoch " + std::to_string(epoch) + " failed: " + s.to_string());
    return s;
  }
  view_ = view;
  view_members_ = ids;
  built_generation_ = generation;

  // The link between hosts: a timed broadcast from rank 0, then rank 0's
  // timed sends to every remote rank at once (the fan-out).
  ClusterJobSpec probe;
  probe.kind = ClusterJobKind::kProbe;
  probe.probe_bytes = options_.probe_bytes;
  StatusOr<ClusterRunResult> r = run_locked_job(lock, probe, nullptr);
  if (!r.ok()) return r.status().with_context("cluster: measuring the link between hosts");
  int remote_ranks = 0;
  for (const auto& rank : view_.ranks) remote_ranks += rank.host != 0 ? 1 : 0;
  const double fanout_bytes = double(options_.probe_bytes) * remote_ranks;
  view_.net_gbps = r->elapsed_ms > 0 ? double(options_.probe_bytes) / (r->elapsed_ms * 1e6) : 0;
  view_.fanout_gbps = r->fanout_ms > 0 ? fanout_bytes / (r->fanout_ms * 1e6) : 0;
  char buf[96], fan[128];
  std::snprintf(buf, sizeof buf, "%.2f GB/s (%lld MiB broadcast in %.3f ms)", view_.net_gbps,
                static_cast<long long>(options_.probe_bytes >> 20), r->elapsed_ms);
  std::snprintf(fan, sizeof fan, "%.2f GB/s aggregate (%d x %lld MiB in %.3f ms, %.2fx the broadcast)",
                view_.fanout_gbps, remote_ranks, static_cast<long long>(options_.probe_bytes >> 20), r->fanout_ms,
                view_.net_gbps > 0 ? view_.fanout_gbps / view_.net_gbps : 0.0);
  log("epoch " + std::to_string(epoch) + " ready: " + std::to_string(view_.ranks.size()) +
      " ranks; link between hosts " + buf + "; fan-out from rank 0 to " + std::to_string(remote_ranks) +
      (remote_ranks == 1 ? " remote rank " : " remote ranks ") +
      (r->fanout_ms > 0 ? std::string(fan) : std::string("not measured")));
  return view_;
}

}  // namespace sgemm
