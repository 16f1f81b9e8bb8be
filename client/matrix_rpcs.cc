#include "client/matrix_rpcs.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "client/wire_codec.h"
#include "proto/grpc_status.h"
#include "sgemm/v1/sgemm.grpc.pb.h"

namespace sgemm::matrix_rpcs {

namespace v1 = ::sgemm::v1;

namespace {

// One PutMatrix call: the header, then the matrix in chunks (payload slices
// over the caller's memory), then half-close; one response. A client-streaming
// method driven as a raw bidi call (the wire does not tell them apart).
class PutStream final : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  PutStream(const v1::PutMatrixRequest& header, const float* data, int64_t elements, int64_t chunk_elems,
            wire::SliceRefs* refs)
      : data_(data), elements_(elements), chunk_elems_(chunk_elems), refs_(refs) {
    bool own = false;
    [[maybe_unused]] grpc::Status st = grpc::SerializationTraits<v1::PutMatrixRequest>::Serialize(header, &out_, &own);
  }

  void start() {
    std::lock_guard lock(mu_);
    StartWrite(&out_);
    StartRead(&in_);
    StartCall();
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard lock(mu_);
    if (!ok) return;
    if (next_ >= elements_) {
      StartWritesDone();
      return;
    }
    const int64_t count = std::min(chunk_elems_, elements_ - next_);
    out_ = wire::encode_chunk(wire::WireMatrix::kA, data_, next_, count, refs_);
    next_ += count;
    StartWrite(&out_);
  }

  void OnReadDone(bool ok) override {
    std::lock_guard lock(mu_);
    if (!ok) return;
    grpc::ProtoBufferReader reader(&in_);
    have_response_ = response_.ParseFromZeroCopyStream(&reader);
  }

  void OnDone(const grpc::Status& s) override {
    std::lock_guard lock(mu_);
    status_ = s;
    out_.Clear();
    done_ = true;
    cv_.notify_all();
  }

  grpc::Status wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return done_; });
    return status_;
  }
  bool have_response() const { return have_response_; }
  const v1::PutMatrixResponse& response() const { return response_; }

 private:
  const float* const data_;
  const int64_t elements_, chunk_elems_;
  wire::SliceRefs* const refs_;
  std::mutex mu_;
  std::condition_variable cv_;
  grpc::ByteBuffer out_, in_;
  int64_t next_ = 0;  // guarded by mu_, as is everything below
  bool have_response_ = false, done_ = false;
  v1::PutMatrixResponse response_;
  grpc::Status status_;
};

// The header of a PutMatrix stream: the matrix's shape and how it is kept.
v1::PutMatrixHeader* put_header(int64_t rows, int64_t cols, const PutOptions& options, v1::PutMatrixRequest* req) {
  v1::PutMatrixHeader* h = req->mutable_header();
  h->set_rows(rows);
  h->set_cols(cols);
  h->set_evictable(options.evictable);
  h->set_label(options.label);
  return h;
}

}  // namespace

StatusOr<PutResult> put(const std::shared_ptr<grpc::Channel>& channel, const Prepare& prepare, int64_t chunk_bytes,
                        int64_t rows, int64_t cols, const float* data, const PutOptions& options) {
  if (rows < 1 || cols < 1) return InvalidArgument("put: rows and cols must be >= 1");
  if (!data) return InvalidArgument("put: no data");
  const auto t0 = std::chrono::steady_clock::now();
  v1::PutMatrixRequest req;
  put_header(rows, cols, options, &req);
  wire::SliceRefs refs;  // outlives the call: gRPC may drop the last payload slice after it ends
  grpc::Status gst;
  PutResult out;
  bool have = false;
  {
    grpc::ClientContext ctx;
    prepare(ctx);
    if (options.timeout.count() > 0) ctx.set_deadline(std::chrono::system_clock::now() + options.timeout);
    grpc::TemplatedGenericStub<grpc::ByteBuffer, grpc::ByteBuffer> stub(channel);
    PutStream call(req, data, rows * cols, std::max<int64_t>(1, chunk_bytes / int64_t(sizeof(float))), &refs);
    stub.PrepareBidiStreamingCall(&ctx, "/sgemm.v1.Sgemm/PutMatrix", grpc::StubOptions(), &call);
    call.start();
    gst = call.wait();
    have = call.have_response();
    if (have) {
      out.handle = call.response().handle();
      out.bytes = call.response().bytes();
      out.placement = call.response().placement();
    }
  }
  refs.wait_zero();
  SGEMM_RETURN_IF_ERROR(from_grpc(gst));
  if (!have || out.handle.empty()) return Internal("the server answered PutMatrix without a handle");
  out.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

StatusOr<PutResult> put_region(const std::shared_ptr<grpc::Channel>& channel, const Prepare& prepare, int64_t rows,
                               int64_t cols, const RegionMatrix& matrix, const PutOptions& options) {
  if (!matrix.region) return InvalidArgument("put_region: the RegionMatrix needs its region");
  const auto t0 = std::chrono::steady_clock::now();
  auto stub = v1::Sgemm::NewStub(channel);
  grpc::ClientContext ctx;
  prepare(ctx);
  if (options.timeout.count() > 0) ctx.set_deadline(std::chrono::system_clock::now() + options.timeout);
  v1::PutMatrixResponse resp;
  auto writer = stub->PutMatrix(&ctx, &resp);
  v1::PutMatrixRequest req;
  v1::PutMatrixHeader* h = put_header(rows, cols, options, &req);
  h->mutable_region()->set_region(matrix.region->name());
  h->mutable_region()->set_offset(matrix.offset);
  h->mutable_region()->set_ld(matrix.ld);
  writer->Write(req);  // a failed write shows in Finish's status
  writer->WritesDone();
  SGEMM_RETURN_IF_ERROR(from_grpc(writer->Finish()));
  PutResult out;
  out.handle = resp.handle();
  out.bytes = resp.bytes();
  out.placement = resp.placement();
  out.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

StatusOr<int> remove(const std::shared_ptr<grpc::Channel>& channel, const Prepare& prepare, const std::string& handle) {
  auto stub = v1::Sgemm::NewStub(channel);
  grpc::ClientContext ctx;
  prepare(ctx);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::DeleteMatrixRequest req;
  req.set_handle(handle);
  v1::DeleteMatrixResponse resp;
  SGEMM_RETURN_IF_ERROR(from_grpc(stub->DeleteMatrix(&ctx, req, &resp)));
  return resp.requests_using();
}

StatusOr<MatrixList> list(const std::shared_ptr<grpc::Channel>& channel, const Prepare& prepare) {
  auto stub = v1::Sgemm::NewStub(channel);
  grpc::ClientContext ctx;
  prepare(ctx);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::ListMatricesRequest req;
  v1::ListMatricesResponse resp;
  SGEMM_RETURN_IF_ERROR(from_grpc(stub->ListMatrices(&ctx, req, &resp)));
  MatrixList out;
  out.budget_bytes = resp.budget_bytes();
  out.bytes_in_use = resp.bytes_in_use();
  for (const auto& m : resp.matrices()) {
    MatrixInfo i;
    i.handle = m.handle();
    i.owner = m.owner();
    i.label = m.label();
    i.rows = m.rows();
    i.cols = m.cols();
    i.bytes = m.bytes();
    for (const auto& p : m.pieces()) i.pieces.push_back({p.device(), p.row_begin(), p.row_end()});
    i.idle_s = m.idle_s();
    i.evictable = m.evictable();
    i.requests_using = m.requests_using();
    i.uses = m.uses();
    out.matrices.push_back(std::move(i));
  }
  return out;
}

void set_header_fields(const MultiplyOptions& o, v1::GemmHeader* h) {
  if (o.op_a == Op::kT) h->set_op_a(v1::OP_T);
  if (o.op_b == Op::kT) h->set_op_b(v1::OP_T);
  if (!o.a_handle.empty()) h->set_a_handle(o.a_handle);
  if (!o.b_handle.empty()) h->set_b_handle(o.b_handle);
  if (!o.c_handle.empty()) h->set_c_handle(o.c_handle);
  auto set_at = [](const std::optional<MatrixOffset>& at, v1::MatrixOffset* out) {
    out->set_row(at->row);
    out->set_col(at->col);
  };
  if (o.a_at) set_at(o.a_at, h->mutable_a_at());
  if (o.b_at) set_at(o.b_at, h->mutable_b_at());
  if (o.c_at) set_at(o.c_at, h->mutable_c_at());
  if (o.keep_result) {
    h->set_keep_result(true);
    h->set_keep_evictable(o.keep_evictable);
    h->set_send_c(o.send_c);
  }
}

}  // namespace sgemm::matrix_rpcs
