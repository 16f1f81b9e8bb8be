#include "server/cluster/member_reactor.h"

#include "proto/grpc_status.h"
#include "server/cluster/coordinator.h"

namespace sgemm {

MemberReactor::MemberReactor(ClusterCoordinator* c) : c_(c) {
  MutexLock lock(mu_);
  StartRead(&in_);
}

// StartWrite and Finish are called outside mu_: gRPC may run reactions on
// other threads at once, and one write at a time is guaranteed by writing_.
void MemberReactor::send(const v1::ClusterCoordinatorMessage& msg) {
  grpc::ByteBuffer bytes;
  bool own = false;
  if (!grpc::SerializationTraits<v1::ClusterCoordinatorMessage>::Serialize(msg, &bytes, &own).ok()) return;
  const grpc::ByteBuffer* start = nullptr;
  {
    MutexLock lock(mu_);
    if (finishing_) return;
    out_.push_back(std::move(bytes));
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
  v1::ClusterMemberMessage msg;
  bool parsed = false, finishing = false;
  {
    MutexLock lock(mu_);
    finishing = finishing_;
    if (ok && !finishing) parsed = grpc::SerializationTraits<v1::ClusterMemberMessage>::Deserialize(&in_, &msg).ok();
    in_.Clear();
  }
  if (!ok) {
    c_->on_left(this, "closed its stream");
    finish(grpc::Status::OK);
    return;
  }
  // A stream being finished (a Join refused when it opened, before its hello was read, or
  // a member the coordinator ends) is not acted on: its hello must not make it a member.
  if (finishing) return;
  if (!parsed) {
    c_->on_left(this, "sent a message that does not parse");
    finish(to_grpc(InvalidArgument("a Join message does not parse as ClusterMemberMessage")));
    return;
  }
  c_->on_message(this, msg);
  MutexLock lock(mu_);
  StartRead(&in_);
}

void MemberReactor::OnWriteDone(bool ok) {
  const grpc::ByteBuffer* next = nullptr;
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

void MemberReactor::OnCancel() {
  { MutexLock lock(mu_); }  // ordered after the constructor, like every reaction
  c_->on_left(this, "its connection was lost");
}

void MemberReactor::OnDone() {
  // gRPC runs OnDone after every other reaction has returned; taking mu_
  // once shows that order to ThreadSanitizer before the queue is destroyed.
  { MutexLock lock(mu_); }
  c_->forget(this);
  delete this;
}

}  // namespace sgemm
