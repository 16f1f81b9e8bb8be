#include "server/cluster/member_reactor.h"

#include "server/cluster/coordinator.h"

namespace sgemm {

MemberReactor::MemberReactor(ClusterCoordinator* c) : c_(c) { StartRead(&in_); }

// StartWrite and Finish are called outside mu_: gRPC may run reactions on
// other threads at once, and one write at a time is guaranteed by writing_.
void MemberReactor::send(const v1::ClusterCoordinatorMessage& msg) {
  const v1::ClusterCoordinatorMessage* start = nullptr;
  {
    MutexLock lock(mu_);
    if (finishing_) return;
    out_.push_back(msg);
    if (!writing_) {
      writing_ = true;
      start = &out_.front();
    }
  }
  if (start) StartWrite(start);
}

void MemberReactor::finish(grpc::Status s) {
  {
    MutexLock lock(mu_);
    if (finishing_) return;
    finishing_ = true;
    final_ = s;
    if (writing_) return;  // OnWriteDone finishes
  }
  Finish(std::move(s));
}

void MemberReactor::OnReadDone(bool ok) {
  if (!ok) {
    c_->on_left(this, "closed its stream");
    finish(grpc::Status::OK);
    return;
  }
  c_->on_message(this, in_);
  StartRead(&in_);
}

void MemberReactor::OnWriteDone(bool ok) {
  const v1::ClusterCoordinatorMessage* next = nullptr;
  grpc::Status finish_with;
  bool finish_now = false;
  {
    MutexLock lock(mu_);
    out_.pop_front();
    if (ok && !out_.empty() && !finishing_) {
      next = &out_.front();
    } else {
      writing_ = false;
      finish_now = finishing_;
      if (finish_now) finish_with = final_;
    }
  }
  if (next) StartWrite(next);
  if (finish_now) Finish(std::move(finish_with));
}

void MemberReactor::OnCancel() { c_->on_left(this, "its connection was lost"); }

void MemberReactor::OnDone() {
  c_->forget(this);
  // gRPC runs OnDone after every other reaction has returned; taking mu_
  // once shows that order to ThreadSanitizer before the queue is destroyed.
  { MutexLock lock(mu_); }
  delete this;
}

}  // namespace sgemm
