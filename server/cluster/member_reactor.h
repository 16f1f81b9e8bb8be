// The coordinator's end of one member's Join stream (sgemm.v1.Cluster):
// transport only. Reads run back to back and each message goes to the
// coordinator; writes are queued and sent one at a time; finish() ends the
// stream once the queue is written. The membership, and what a message means,
// are the coordinator's (coordinator.h).
//
// Ownership and threads: gRPC owns the reactor; it deletes itself in OnDone,
// after telling the coordinator to forget it. send() and finish() may be
// called from any thread (the coordinator calls them under its own lock; they
// take only the reactor's). Reactions run on gRPC's threads.
#pragma once

#include <grpcpp/grpcpp.h>

#include <deque>

#include "common/thread_annotations.h"
#include "sgemm/v1/cluster.grpc.pb.h"

namespace sgemm {

class ClusterCoordinator;

// Messages travel as the bytes gRPC hands over and are parsed and serialized
// here, in a reaction that has taken mu_: the constructor holds mu_ while it
// starts the first read, so every reaction is ordered after it for
// ThreadSanitizer too.
class MemberReactor final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  explicit MemberReactor(ClusterCoordinator* c);

  // Queues `msg`; dropped once the stream is finishing.
  void send(const v1::ClusterCoordinatorMessage& msg) SGEMM_EXCLUDES(mu_);
  // Ends the stream with `s` once the queued messages are written. The first call wins.
  void finish(grpc::Status s) SGEMM_EXCLUDES(mu_);

  void OnReadDone(bool ok) override SGEMM_EXCLUDES(mu_);
  void OnWriteDone(bool ok) override SGEMM_EXCLUDES(mu_);
  void OnCancel() override SGEMM_EXCLUDES(mu_);
  void OnDone() override SGEMM_EXCLUDES(mu_);

 private:
  ClusterCoordinator* c_;
  Mutex mu_;
  // The read in flight (reads run one at a time): gRPC fills it between
  // StartRead and OnReadDone; reactions touch it under mu_.
  grpc::ByteBuffer in_ SGEMM_GUARDED_BY(mu_);
  std::deque<grpc::ByteBuffer> out_ SGEMM_GUARDED_BY(mu_);  // front is being written
  bool writing_ SGEMM_GUARDED_BY(mu_) = false;
  bool finishing_ SGEMM_GUARDED_BY(mu_) = false;
  // Set once under mu_ by finish(); read by whichever call then runs Finish.
  grpc::Status final_ SGEMM_GUARDED_BY(mu_);
};

}  // namespace sgemm
