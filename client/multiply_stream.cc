#include "client/multiply_stream.h"

#include <algorithm>

#include "sgemm/v1/sgemm.grpc.pb.h"

namespace sgemm {

StreamProtocol::StreamProtocol(const v1::MultiplyRequest& header, std::vector<Input> inputs, int64_t chunk_elems,
                               float* c, int64_t c_elements, std::function<void(int64_t, int64_t)> on_chunk,
                               wire::SliceRefs* refs, std::function<void(int64_t)> on_sent)
    : inputs_(std::move(inputs)),
      chunk_elems_(chunk_elems),
      c_(c),
      c_elements_(c_elements),
      on_chunk_(std::move(on_chunk)),
      on_sent_(std::move(on_sent)),
      refs_(refs) {
  while (first_input_ < inputs_.size() && inputs_[first_input_].begin >= inputs_[first_input_].end) ++first_input_;
  input_ = first_input_;
  if (input_ < inputs_.size()) next_offset_ = inputs_[input_].begin;
  bool own = false;
  [[maybe_unused]] grpc::Status st = grpc::SerializationTraits<v1::MultiplyRequest>::Serialize(header, &out_, &own);
}

bool StreamProtocol::next_write(grpc::ByteBuffer** out, bool* last) {
  // Past the inputs (or their ends) already sent.
  auto skip_sent = [&] {
    while (input_ < inputs_.size() && next_offset_ >= inputs_[input_].end) {
      ++input_;
      if (input_ < inputs_.size()) next_offset_ = inputs_[input_].begin;
    }
  };
  skip_sent();
  if (input_ == inputs_.size()) return false;
  const Input& in = inputs_[input_];
  const int64_t count = std::min(chunk_elems_, in.end - next_offset_);
  out_ = wire::encode_chunk(in.matrix, in.data, next_offset_, count, refs_);
  next_offset_ += count;
  pending_bytes_ = count * int64_t(sizeof(float));
  skip_sent();
  *last = input_ == inputs_.size();
  *out = &out_;
  return true;
}

void StreamProtocol::write_done() {
  bytes_sent_ += pending_bytes_;
  if (on_sent_ && pending_bytes_ > 0) on_sent_(pending_bytes_);
  pending_bytes_ = 0;
}

Status StreamProtocol::on_read(grpc::ByteBuffer& in) {
  auto r = wire::decode_response(in, c_, c_elements_, &summary_);
  if (!r.ok()) {
    protocol_error_ = r.status();
    return protocol_error_;
  }
  if (r->kind == wire::Response::Kind::kChunk) {
    if (bytes_received_ == 0 && !upload_done_) first_c_before_upload_end_ = true;
    bytes_received_ += r->count * int64_t(sizeof(float));
    if (on_chunk_) on_chunk_(r->offset, r->count);
  } else if (r->kind == wire::Response::Kind::kSummary) {
    have_summary_ = true;
  } else if (r->kind == wire::Response::Kind::kStripeGrant) {
    grant_token_ = summary_.stripe_grant().token();
    have_grant_ = true;
  }
  return Status::Ok();
}

grpc::Status run_on_caller_thread(grpc::TemplatedGenericStub<grpc::ByteBuffer, grpc::ByteBuffer>& stub,
                                  grpc::ClientContext* ctx, StreamProtocol& p) {
  // Each operation's tag; at most one of each is outstanding.
  enum Op : intptr_t { kStart = 1, kWrite, kRead, kFinish };
  auto tag = [](Op op) { return reinterpret_cast<void*>(op); };
  grpc::CompletionQueue cq;
  grpc::Status status;
  {
    // The call's metadata waits for the header and goes with it (one write,
    // and StartCall's tag never comes back: the first Write carries both).
    ctx->set_initial_metadata_corked(true);
    auto call = stub.PrepareCall(ctx, "/sgemm.v1.Sgemm/Multiply", &cq);
    call->StartCall(tag(kStart));
    // The header, and with nothing to upload (every operand named) the half-close with it.
    int outstanding = 2;
    bool last_written = false;  // the write in flight ends the upload
    if (p.has_input()) {
      call->Write(p.header(), tag(kWrite));
    } else {
      call->WriteLast(p.header(), grpc::WriteOptions(), tag(kWrite));
      last_written = true;
      p.mark_upload_done();
    }
    grpc::ByteBuffer in;
    call->Read(&in, tag(kRead));
    while (outstanding > 0) {
      void* got = nullptr;
      bool ok = false;
      if (!cq.Next(&got, &ok)) break;  // not shut down before the loop ends
      --outstanding;
      switch (static_cast<Op>(reinterpret_cast<intptr_t>(got))) {
        case kStart:  // not issued while the metadata is corked
          break;
        case kWrite: {
          if (!ok) break;  // the call is ending: the read sees it
          p.write_done();
          if (last_written) break;
          grpc::ByteBuffer* out = nullptr;
          bool last = false;
          if (p.next_write(&out, &last)) {
            if (last) {
              call->WriteLast(*out, grpc::WriteOptions(), tag(kWrite));
              last_written = true;
              p.mark_upload_done();
            } else {
              call->Write(*out, tag(kWrite));
            }
          } else {
            call->WritesDone(tag(kWrite));
            last_written = true;
            p.mark_upload_done();
          }
          ++outstanding;
          break;
        }
        case kRead:
          if (ok && p.on_read(in).ok()) {
            call->Read(&in, tag(kRead));
          } else {
            if (ok) ctx->TryCancel();  // a malformed message: protocol_error() says what
            call->Finish(&status, tag(kFinish));
          }
          ++outstanding;
          break;
        case kFinish:
          break;
      }
    }
  }  // the call is released before its queue is shut down
  cq.Shutdown();
  void* got = nullptr;
  bool ok = false;
  while (cq.Next(&got, &ok)) {
  }
  p.clear();
  return status;
}

}  // namespace sgemm
