#include "server/cluster/member.h"

#include <grpcpp/grpcpp.h>

#include <chrono>

#include "common/log_text.h"
#include "server/cluster/cluster_codec.h"
#include "server/cluster/cluster_trust.h"
#include "sgemm/v1/cluster.grpc.pb.h"

namespace sgemm {

// One Join stream. The session thread reads; the worker writes (under
// write_mu, until the session is closed).
struct ClusterMember::Session {
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReaderWriter<v1::ClusterMemberMessage, v1::ClusterCoordinatorMessage>> stream;
  Mutex write_mu;
  bool closed SGEMM_GUARDED_BY(write_mu) = false;
  bool write(const v1::ClusterMemberMessage& m) SGEMM_EXCLUDES(write_mu) {
    MutexLock lock(write_mu);
    return !closed && stream->Write(m);
  }
};

ClusterMember::ClusterMember(ClusterDataPlane& plane, std::string coordinator, ClusterOptions options)
    : plane_(plane), coordinator_(std::move(coordinator)), options_(std::move(options)) {}

ClusterMember::~ClusterMember() { stop(); }

void ClusterMember::log(const std::string& msg) const {
  if (options_.log) options_.log(log_line("cluster member: " + msg));  // a member's strings cannot forge a line
}

void ClusterMember::start() {
  worker_thread_ = std::thread([this] { worker_loop(); });
  session_thread_ = std::thread([this] { session_loop(); });
}

void ClusterMember::stop() {
  {
    MutexLock lock(mu_);
    if (stopping_ && !session_thread_.joinable()) return;
    stopping_ = true;
    if (current_) current_->cancel(Unavailable("this member is leaving the cluster"));
    if (session_) session_->context.TryCancel();
    tasks_.push_back(Task::of(Task::kQuit));
    cv_.notify_all();
  }
  if (session_thread_.joinable()) session_thread_.join();
  if (worker_thread_.joinable()) worker_thread_.join();
}

void ClusterMember::push(Task t) {
  MutexLock lock(mu_);
  tasks_.push_back(std::move(t));
  cv_.notify_all();
}

void ClusterMember::session_loop() {
  grpc::ChannelArguments args;
  // A coordinator that vanishes without closing its connection is noticed by keepalive.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  auto credentials = cluster_channel_credentials(options_);
  if (!credentials.ok()) {  // main() checked the files at start-up; they went since
    log("cannot reach the coordinator: " + credentials.status().message());
    return;
  }
  auto channel = grpc::CreateCustomChannel(coordinator_, *credentials, args);
  auto stub = v1::Cluster::NewStub(channel);
  for (;;) {
    auto session = std::make_shared<Session>();
    {
      MutexLock lock(mu_);
      if (stopping_) return;
      session_ = session;
    }
    if (!options_.token.empty()) session->context.AddMetadata("authorization", "Bearer " + options_.token);
    session->stream = stub->Join(&session->context);
    v1::ClusterMemberMessage hello;
    hello.mutable_hello()->set_host(options_.host);
    for (const DeviceInfo& d : plane_.local_devices()) hello.mutable_hello()->add_devices(d.name);
    bool ok = session->write(hello);
    v1::ClusterCoordinatorMessage msg;
    while (ok && session->stream->Read(&msg)) {
      if (msg.has_welcome()) {
        member_id_ = msg.welcome().member_id();
        log("joined " + coordinator_ + " as member " + std::to_string(member_id_.load()));
      } else if (msg.has_comm()) {
        const auto& c = msg.comm();
        auto abort = std::make_shared<CancelToken>();
        {
          MutexLock lock(mu_);
          // A new communicator replaces the old: whatever runs on the old one stops.
          if (current_) current_->cancel(Unavailable("the coordinator rebuilt the communicator"));
          current_ = abort;
        }
        Task t = Task::of(Task::kComm);
        t.comm = ClusterCommSpec{c.epoch(), c.unique_id(), c.nranks(), c.first_rank()};
        t.session = session;
        t.abort = abort;
        push(std::move(t));
      } else if (msg.has_job()) {
        Task t = Task::of(Task::kJob);
        t.job = msg.job().SerializeAsString();
        t.session = session;
        {
          MutexLock lock(mu_);
          t.abort = current_;
        }
        push(std::move(t));
      }
    }
    {
      MutexLock write_lock(session->write_mu);
      session->closed = true;
    }
    // The reads ended: the coordinator's status is here (why it ended the
    // stream: a refused token, a refused hello). The hello was not sent:
    // nothing will end the call but a cancel.
    if (!ok) session->context.TryCancel();
    const grpc::Status ended = session->stream->Finish();
    {
      MutexLock lock(mu_);
      if (current_) current_->cancel(Unavailable("the stream to the coordinator ended"));
      current_.reset();
      session_.reset();
      tasks_.push_back(Task::of(Task::kDisconnect));
      cv_.notify_all();
      if (stopping_) return;
    }
    log("lost the coordinator " + coordinator_ + " (" + ended.error_message() + "); joining again in " +
        std::to_string(options_.rejoin_interval_ms) + " ms");
    MutexLock lock(mu_);
    lock.wait_for(cv_, std::chrono::milliseconds(options_.rejoin_interval_ms), [&] {
      mu_.assert_held();
      return stopping_;
    });
    if (stopping_) return;
  }
}

void ClusterMember::worker_loop() {
  for (;;) {
    Task t;
    {
      MutexLock lock(mu_);
      lock.wait(cv_, [&] {
        mu_.assert_held();
        return !tasks_.empty();
      });
      t = std::move(tasks_.front());
      tasks_.pop_front();
    }
    switch (t.kind) {
      case Task::kQuit:
        // Said before and after: dropping the communicator waits on NCCL, and
        // a stop that does not end must show where it stands.
        log("leaving: dropping the cluster communicator");
        plane_.disconnect();
        log("left: communicator dropped");
        return;
      case Task::kDisconnect:
        plane_.disconnect();
        epoch_ = 0;
        break;
      case Task::kComm: {
        Status s = plane_.connect(t.comm, t.abort.get(), options_.connect_timeout_ms);
        if (s.ok()) {
          epoch_ = t.comm.epoch;
          log("epoch " + std::to_string(t.comm.epoch) + ": ranks " + std::to_string(t.comm.first_rank) + ".. of " +
              std::to_string(t.comm.nranks));
        } else {
          epoch_ = 0;
          log("epoch " + std::to_string(t.comm.epoch) + " failed: " + s.to_string());
        }
        v1::ClusterMemberMessage m;
        m.mutable_ready()->set_epoch(t.comm.epoch);
        m.mutable_ready()->set_ok(s.ok());
        m.mutable_ready()->set_error(s.ok() ? "" : s.to_string());
        t.session->write(m);
        break;
      }
      case Task::kJob: {
        v1::ClusterJob pj;
        pj.ParseFromString(t.job);
        v1::ClusterMemberMessage m;
        auto* done = m.mutable_done();
        done->set_job_id(pj.job_id());
        StatusOr<ClusterJobSpec> spec = job_from_proto(pj);
        Status s = spec.status();
        if (s.ok() && spec->epoch != epoch_.load())
          s = Unavailable("job for communicator epoch " + std::to_string(spec->epoch) + ", this member is on " +
                          std::to_string(epoch_.load()));
        if (s.ok() && !t.abort) s = Unavailable("no communicator");
        if (s.ok()) {
          StatusOr<ClusterRunResult> r = plane_.run_member(*spec, t.abort.get());
          s = r.status();
          if (r.ok()) {
            timings_to_proto(r->timings, done);
            kernel_rows_to_proto(r->kernel_rows, done);
          }
        }
        if (!s.ok()) {
          // The communicator may be broken: drop it; the coordinator builds a new one.
          plane_.disconnect();
          epoch_ = 0;
          log("job " + std::to_string(pj.job_id()) + " failed: " + s.to_string());
        }
        done->set_ok(s.ok());
        done->set_error(s.ok() ? "" : s.to_string());
        ++jobs_done_;
        t.session->write(m);
        break;
      }
    }
  }
}

}  // namespace sgemm
