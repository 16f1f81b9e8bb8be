// SgemmService's resident-matrix RPCs (docs/resident.md): PutMatrix (a read
// reactor, PutMatrixCall), DeleteMatrix and ListMatrices. The matrices live
// in the engine's ResidentStore; with --auth-tokens each belongs to the
// client that put it.
#include <spdlog/fmt/fmt.h>

#include "proto/grpc_status.h"
#include "server/service/codec.h"
#include "server/service/put_matrix_call.h"
#include "server/service/region_operands.h"

namespace sgemm {

namespace {

constexpr std::size_t kMaxLabel = 128;

}  // namespace

Status check_resident_quota(const AuthClient* client, const ResidentStore& store, int64_t bytes) {
  if (!client || client->quota().max_resident_bytes <= 0) return Status::Ok();
  return client->check_resident(bytes, store.owner_bytes(client->name()));
}

StatusOr<AuthClient::ResidentCharge> charge_resident_quota(AuthClient* client, const ResidentStore& store,
                                                           int64_t bytes) {
  if (!client) return AuthClient::ResidentCharge();
  return client->charge_resident(bytes, [&] { return store.owner_bytes(client->name()); });
}

PutMatrixCall::PutMatrixCall(ServiceShared& shared, grpc::CallbackServerContext* ctx, grpc::ByteBuffer* response,
                             Status refuse, AuthClient* client, RegionCaller caller, StreamAdmission::Ticket ticket)
    : shared_(shared),
      ctx_(ctx),
      response_(response),
      client_(client),
      owner_(client ? client->name() : std::string()),
      caller_(std::move(caller)),
      t_start_(Clock::now()),
      read_since_(t_start_),
      stream_ticket_(std::move(ticket)) {
  // Every member is set before the call is published to the watchdog (which
  // then reads them under mu_): a put is an open stream like a Multiply, under
  // the same bounds (stream_admission.h), and idle from its start.
  {
    std::lock_guard lock(shared_.calls_mu);
    shared_.puts.insert(this);
  }
  std::lock_guard lock(mu_);
  if (!refuse.ok()) {
    finish(refuse);
    return;
  }
  StartRead(&in_);
}

void PutMatrixCall::finish(const Status& st) {
  if (phase_ == Phase::kFinished) return;
  phase_ = Phase::kFinished;
  stream_ticket_.reset();
  if (!st.ok()) {
    // Nothing is kept: the buffer, the host bytes and the resident bytes go back.
    buffer_.reset();
    resident_bytes_.reset();
    quota_charge_.reset();
    shared_.log.write(
        spdlog::level::warn,
        fmt::format("put_matrix peer={} client={} rows={} cols={} status={} error=\"{}\"", ctx_->peer(),
                    owner_.empty() ? "-" : owner_, rows_, cols_, status_code_name(st.code()), log_field(st.message())));
  }
  host_bytes_.reset();
  Finish(to_grpc(st));
}

void PutMatrixCall::OnReadDone(bool ok) {
  std::lock_guard lock(mu_);
  if (phase_ == Phase::kFinished) return;
  if (!ok) {
    if (ctx_->IsCancelled()) return finish(Cancelled("client cancelled or went away during PutMatrix"));
    if (phase_ == Phase::kHeader) return finish(InvalidArgument("the PutMatrix stream ended before its header"));
    if (received_ < rows_ * cols_)
      return finish(InvalidArgument("the PutMatrix stream ended after " + std::to_string(received_) + " of " +
                                    std::to_string(rows_ * cols_) + " elements"));
    return finish(complete());
  }
  ++messages_;
  auto msg = decode_put_request(in_, messages_);
  Status st = msg.status();
  if (st.ok()) {
    if (msg->is_header) {
      st = phase_ != Phase::kHeader ? InvalidArgument("a PutMatrix stream carries one header; message " +
                                                      std::to_string(messages_) + " is a second `header`")
                                    : on_header(msg->header);
    } else if (msg->chunk.kind == RequestMessage::Kind::kChunk) {
      st = phase_ != Phase::kHeader
               ? on_chunk(msg->chunk)
               : InvalidArgument("the first message of a PutMatrix stream must carry `header`, not `chunk`");
    } else {
      st = InvalidArgument("message " + std::to_string(messages_) +
                           " of the stream is an empty PutMatrixRequest: it carries neither `header` nor `chunk`");
    }
  }
  if (!st.ok()) return finish(st);
  if (phase_ == Phase::kFinished) return;  // a region's matrix: already complete
  read_since_ = Clock::now();
  in_.Clear();
  StartRead(&in_);
}

Status PutMatrixCall::on_header(const v1::PutMatrixHeader& h) {
  phase_ = Phase::kChunks;
  rows_ = h.rows();
  cols_ = h.cols();
  evictable_ = h.evictable();
  label_ = h.label();
  if (rows_ < 1 || cols_ < 1)
    return InvalidArgument("PutMatrix header: rows and cols must be >= 1 (got " + std::to_string(rows_) + " x " +
                           std::to_string(cols_) + ")");
  if (label_.size() > kMaxLabel)
    return InvalidArgument("PutMatrix header: label has " + std::to_string(label_.size()) + " characters; at most " +
                           std::to_string(kMaxLabel));
  const int64_t max = shared_.options.limits.max_matrix_elements;
  if (rows_ > max / cols_)
    return ResourceExhausted("PutMatrix: the matrix has " + std::to_string(rows_) + " x " + std::to_string(cols_) +
                             " elements, over the server's limit of " + std::to_string(max) +
                             " (--max-matrix-elements)");
  const int64_t bytes = rows_ * cols_ * int64_t(sizeof(float));
  if (const ResidentStore* store = shared_.engine.resident_store())
    SGEMM_RETURN_IF_ERROR(check_resident_quota(client_, *store, bytes));
  // Memory comes with the data (reserve()): a header alone holds no budget and evicts nothing.
  if (!h.has_region()) return Status::Ok();
  SGEMM_RETURN_IF_ERROR(reserve());
  // From a shared-memory region: one copy here, no chunk follows.
  if (!caller_.unix_socket || !shared_.regions) return regions_need_unix_socket("a PutMatrix naming a region");
  SGEMM_ASSIGN_OR_RETURN(auto region, shared_.regions->acquire(caller_, h.region().region()));
  const int64_t off = h.region().offset();
  SGEMM_ASSIGN_OR_RETURN(const int64_t ld,
                         check_region_layout("PutMatrix header.region", h.region().region(), region->bytes(), rows_,
                                             cols_, off, h.region().ld(), shared_.engine.max_leading_dimension()));
  const float* src = reinterpret_cast<const float*>(region->data() + off);
  for (int64_t i = 0; i < rows_; ++i) std::copy(src + i * ld, src + i * ld + cols_, buffer_->floats() + i * cols_);
  SGEMM_RETURN_IF_ERROR(region->check_intact());  // its owner may have shrunk it during the copy
  received_ = rows_ * cols_;
  finish(complete());
  return Status::Ok();
}

// The matrix's room: the resident budget first (a put that cannot be kept
// fails before the rest of it moves), then its host bytes while it arrives.
Status PutMatrixCall::reserve() {
  const int64_t bytes = rows_ * cols_ * int64_t(sizeof(float));
  if (const ResidentStore* store = shared_.engine.resident_store()) {
    SGEMM_ASSIGN_OR_RETURN(quota_charge_, charge_resident_quota(client_, *store, bytes));
  }
  t_reserved_ = Clock::now();
  SGEMM_ASSIGN_OR_RETURN(
      resident_bytes_,
      shared_.engine.reserve_resident(bytes, "PutMatrix of " + std::to_string(rows_) + " x " + std::to_string(cols_) +
                                                 " (" + std::to_string(bytes) + " bytes)"));
  auto r = shared_.budget.try_reserve(bytes);
  if (!r)
    return ResourceExhausted("the host memory budget has no room for the matrix's " + std::to_string(bytes) +
                             " bytes while it arrives (--host-memory-bytes " +
                             std::to_string(shared_.budget.capacity()) + ", " +
                             std::to_string(shared_.budget.in_use()) + " in use); retry later");
  host_bytes_ = std::move(*r);
  auto got = shared_.engine.host_allocator().allocate(std::size_t(bytes));
  if (!got.ok()) return got.status().with_context("allocating the matrix");
  buffer_ = std::make_shared<HostBuffer>(std::move(got).value());
  return Status::Ok();
}

Status PutMatrixCall::on_chunk(const RequestMessage& chunk) {
  const int64_t limit = shared_.options.limits.max_chunk_bytes;
  if (chunk.data_bytes == 0 || chunk.data_bytes % sizeof(float) != 0 || int64_t(chunk.data_bytes) > limit)
    return InvalidArgument("PutMatrix chunk at offset " + std::to_string(chunk.offset) + " has " +
                           std::to_string(chunk.data_bytes) + " bytes; a chunk carries 4 to " + std::to_string(limit) +
                           " bytes, a multiple of 4");
  if (chunk.offset != received_)
    return InvalidArgument("PutMatrix chunk starts at offset " + std::to_string(chunk.offset) + " but " +
                           std::to_string(received_) +
                           " elements have arrived; chunks must arrive in order without gaps or overlaps");
  const int64_t count = int64_t(chunk.data_bytes / sizeof(float));
  if (count > rows_ * cols_ - received_)
    return InvalidArgument("PutMatrix chunk overruns the matrix: offset " + std::to_string(chunk.offset) + " + " +
                           std::to_string(count) + " values > " + std::to_string(rows_ * cols_) + " elements");
  if (!buffer_) SGEMM_RETURN_IF_ERROR(reserve());  // the first chunk: a bad one costs nothing
  chunk.copy_data(buffer_->floats() + received_);
  received_ += count;
  return Status::Ok();
}

Status PutMatrixCall::complete() {
  SGEMM_ASSIGN_OR_RETURN(auto data,
                         shared_.engine.make_resident(std::move(buffer_), rows_, cols_, std::move(resident_bytes_)));
  ResidentStore* store = shared_.engine.resident_store();
  if (!store) return Internal("an engine without a resident store made a resident matrix");
  const Layout layout = data->layout();
  auto m = store->add(owner_, label_, rows_, cols_, evictable_, std::move(data));
  quota_charge_.reset();  // the store counts it now
  v1::PutMatrixResponse resp;
  resp.set_handle(m->handle);
  resp.set_bytes(m->bytes());
  resp.set_placement(describe_layout(layout));
  bool own = false;
  [[maybe_unused]] grpc::Status s = grpc::SerializationTraits<v1::PutMatrixResponse>::Serialize(resp, response_, &own);
  shared_.log.logger().info(
      "put_matrix peer={} client={} rows={} cols={} evictable={} handle={} placement=\"{}\" total_ms={:.3f}",
      ctx_->peer(), owner_.empty() ? "-" : owner_, rows_, cols_, evictable_, m->handle, describe_layout(layout),
      std::chrono::duration<double, std::milli>(Clock::now() - t_start_).count());
  return Status::Ok();
}

void PutMatrixCall::OnCancel() {
  std::lock_guard lock(mu_);
  finish(Cancelled("client cancelled or went away during PutMatrix"));
}

void PutMatrixCall::check_idle(Clock::time_point now) {
  std::lock_guard lock(mu_);
  if (phase_ == Phase::kFinished) return;
  const auto idle = shared_.options.idle_timeout;
  if (now - read_since_ >= idle) {
    finish(DeadlineExceeded("no message from the client for " + std::to_string(idle.count()) +
                            " ms (--idle-timeout) during PutMatrix"));
  } else if (buffer_ && received_ < rows_ * cols_) {
    Status pace = check_upload_pace(received_ * int64_t(sizeof(float)), now - t_reserved_, idle, host_bytes_.bytes(),
                                    shared_.options.limits, "PutMatrix");
    if (!pace.ok()) finish(pace);  // its memory and resident room go back now
  }
}

void PutMatrixCall::abort(const Status& why) {
  std::lock_guard lock(mu_);
  finish(why);
}

void PutMatrixCall::abort_if_no_header(const Status& why) {
  std::lock_guard lock(mu_);
  if (phase_ == Phase::kHeader) finish(why);
}

void PutMatrixCall::OnDone() {
  // Taking mu_ orders this thread after the constructor's (gRPC hands the
  // call between threads through its core, which TSan does not see).
  { std::lock_guard lock(mu_); }
  {
    std::lock_guard lock(shared_.calls_mu);
    shared_.puts.erase(this);
  }
  shared_.calls_cv.notify_all();  // shutdown waits for puts too
  delete this;
}

grpc::ServerReadReactor<grpc::ByteBuffer>* SgemmService::PutMatrix(grpc::CallbackServerContext* ctx,
                                                                   grpc::ByteBuffer* response) {
  const HandlerScope scope(*this);
  Status refuse;
  auto client = authenticate(ctx);
  RegionCaller caller;
  auto ticket = admit_stream(ctx, client);
  if (!ticket.ok()) {
    refuse = ticket.status();
  } else if (!shared_->engine.resident_store()) {
    refuse = FailedPrecondition("this server's backend keeps no resident matrices");
  } else if (*client && !(*client)->quota().multiply) {
    refuse =
        PermissionDenied("client '" + (*client)->name() + "' may not put matrices (its token has multiply: false)");
  } else {
    caller = connections_->find(ctx->peer());
    if (*client) caller.client = (*client)->name();
  }
  return new PutMatrixCall(*shared_, ctx, response, refuse, client.ok() ? *client : nullptr, caller,
                           refuse.ok() ? std::move(ticket).value() : StreamAdmission::Ticket());
}

grpc::ServerUnaryReactor* SgemmService::DeleteMatrix(grpc::CallbackServerContext* ctx,
                                                     const v1::DeleteMatrixRequest* req,
                                                     v1::DeleteMatrixResponse* resp) {
  const HandlerScope scope(*this);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  auto client = authenticate(ctx);
  ResidentStore* store = shared_->engine.resident_store();
  Status st = client.status();
  if (st.ok() && !store) st = FailedPrecondition("this server's backend keeps no resident matrices");
  if (st.ok()) {
    auto using_now = store->remove(req->handle(), *client ? (*client)->name() : std::string());
    st = using_now.status();
    if (st.ok()) resp->set_requests_using(*using_now);
  }
  reactor->Finish(to_grpc(st));
  return reactor;
}

grpc::ServerUnaryReactor* SgemmService::ListMatrices(grpc::CallbackServerContext* ctx, const v1::ListMatricesRequest*,
                                                     v1::ListMatricesResponse* resp) {
  const HandlerScope scope(*this);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  auto client = authenticate(ctx);
  if (!client.ok()) {
    reactor->Finish(to_grpc(client.status()));
    return reactor;
  }
  if (ResidentStore* store = shared_->engine.resident_store()) {
    resp->set_budget_bytes(store->capacity());
    resp->set_bytes_in_use(store->in_use_total());
    for (const ResidentRow& row : store->list(*client ? (*client)->name() : std::string())) {
      v1::MatrixInfo* m = resp->add_matrices();
      m->set_handle(row.handle);
      m->set_rows(row.rows);
      m->set_cols(row.cols);
      m->set_bytes(row.bytes);
      for (const Piece& p : row.layout) {
        v1::MatrixPiece* piece = m->add_pieces();
        piece->set_device(p.device);
        piece->set_row_begin(p.row_begin);
        piece->set_row_end(p.row_end);
      }
      m->set_idle_s(row.idle_s);
      m->set_evictable(row.evictable);
      m->set_owner(row.owner);
      m->set_label(row.label);
      m->set_requests_using(row.in_use);
      m->set_uses(row.uses);
    }
  }
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace sgemm
