// One PutMatrix call (docs/resident.md): a gRPC callback read reactor that
// receives a matrix's chunks (or copies it from a shared-memory region) into
// a host buffer and hands it to the engine as a new resident matrix.
//
//   header   check the shape and the client's quota; nothing is reserved yet
//   chunks   the first charges the client's resident quota, reserves the
//            resident budget (evicting as the store allows: RESOURCE_EXHAUSTED
//            here) and the matrix's bytes of the host-memory budget, and
//            allocates (a region's header does so at once); each chunk is
//            copied once, in order, into the buffer; the upload must keep
//            --min-upload-rate (check_upload_pace) or it ends
//   end      Engine::make_resident (the CUDA engine copies it to its GPU),
//            the store names it, the response carries the handle
//
// Ownership: deletes itself in OnDone. Threads: reactions on gRPC's threads,
// check_idle() on the watchdog's, under the service's calls_mu; state guarded
// by mu_.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "server/service/sgemm_service.h"

namespace sgemm {

// A client's quota of resident bytes (ClientQuota::max_resident_bytes) for
// `bytes` more: PERMISSION_DENIED naming the client and the quota when over.
// OK without tokens or without the quota. check_ at a put's (or keep_result's)
// header, an early refusal; charge_ when its room is reserved, counting the
// matrices other calls are making, so concurrent puts cannot together exceed it.
Status check_resident_quota(const AuthClient* client, const ResidentStore& store, int64_t bytes);
StatusOr<AuthClient::ResidentCharge> charge_resident_quota(AuthClient* client, const ResidentStore& store,
                                                           int64_t bytes);

class PutMatrixCall final : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  using Clock = std::chrono::steady_clock;
  // `refuse` non-OK ends the call at once. `owner`: the caller's client ("" without tokens).
  // `ticket`: the call's place among the open streams (empty when `refuse` is not OK).
  PutMatrixCall(ServiceShared& shared, grpc::CallbackServerContext* ctx, grpc::ByteBuffer* response, Status refuse,
                AuthClient* client, RegionCaller caller, StreamAdmission::Ticket ticket);

  void OnReadDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;
  // Watchdog: ends the call after --idle-timeout without a message.
  void check_idle(Clock::time_point now);
  // Ends the call with `why` (shutdown). Called with the service's calls_mu held.
  void abort(const Status& why);
  // Shutdown: a put that has not sent its header yet ends at once; one under way gets the grace.
  void abort_if_no_header(const Status& why);

 private:
  Status on_header(const sgemm::v1::PutMatrixHeader& h);
  Status on_chunk(const RequestMessage& chunk);
  Status reserve();   // the matrix's resident and host room, and its buffer
  Status complete();  // the matrix is in: make it resident
  void finish(const Status& st);

  ServiceShared& shared_;
  grpc::CallbackServerContext* const ctx_;
  grpc::ByteBuffer* const response_;
  AuthClient* const client_;  // null without --auth-tokens
  const std::string owner_;
  const RegionCaller caller_;
  const Clock::time_point t_start_;

  // The call's phase (the stages listed at the top): kHeader until the header
  // is read, kChunks until it ends, kFinished once Finish was called.
  enum class Phase { kHeader, kChunks, kFinished };

  std::mutex mu_;
  Phase phase_ = Phase::kHeader;  // guarded by mu_, as is everything below
  int64_t messages_ = 0;
  Clock::time_point read_since_;
  grpc::ByteBuffer in_;
  int64_t rows_ = 0, cols_ = 0, received_ = 0;
  bool evictable_ = false;
  std::string label_;
  ResidentBytes resident_bytes_;
  StreamAdmission::Ticket stream_ticket_;    // one of the open streams (and the client's), until answered
  AuthClient::ResidentCharge quota_charge_;  // the client's resident quota, from reserve() until the store has it
  MemoryBudget::Reservation host_bytes_;
  Clock::time_point t_reserved_{};  // reserve(): the upload is paced from here (check_upload_pace)
  std::shared_ptr<HostBuffer> buffer_;
};

}  // namespace sgemm
