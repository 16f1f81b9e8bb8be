// One Multiply stream's protocol, apart from who drives it (docs/transport.md,
// "Who drives a call"): StreamProtocol says what to write next (the header,
// then each input in chunks whose payload slices point into the caller's
// matrices) and decodes what comes back (chunks of C straight into the
// caller's buffer, the summary, a stripe grant). Two drivers use it:
//   - run_on_caller_thread(): the calling thread starts the call and polls its
//     completion queue itself, so no step of the call is handed between
//     threads (one stream per request: small and resident requests);
//   - the callback reactor in sgemm_client.cc, for requests striped over
//     several streams, which must run side by side.
//
// Threads: StreamProtocol is not thread-safe: its driver serializes the calls
// (the reactor under its mutex). run_on_caller_thread() blocks its caller.
#pragma once

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "client/wire_codec.h"
#include "common/status.h"
#include "sgemm/v1/sgemm.pb.h"

namespace sgemm {

class StreamProtocol {
 public:
  struct Input {
    wire::WireMatrix matrix;
    const float* data;   // the whole matrix
    int64_t begin, end;  // elements [begin, end) to send (a stripe's block, or all)
  };

  // `on_sent` (may be empty) is told each write's payload bytes as it completes.
  StreamProtocol(const v1::MultiplyRequest& header, std::vector<Input> inputs, int64_t chunk_elems, float* c,
                 int64_t c_elements, std::function<void(int64_t, int64_t)> on_chunk, wire::SliceRefs* refs,
                 std::function<void(int64_t)> on_sent = {});

  // The first message (the header, or a stripe's attach).
  grpc::ByteBuffer& header() { return out_; }
  // After a write completed: the next chunk into *out (true, *last when no
  // other follows), or false when the upload is complete.
  bool next_write(grpc::ByteBuffer** out, bool* last);
  // A write completed (its payload counts as sent).
  void write_done();
  // The half-close has been sent (or is on its way).
  void mark_upload_done() { upload_done_ = true; }
  // Whether anything follows the header.
  bool has_input() const { return first_input_ < inputs_.size(); }
  // One message read; a protocol error (the server's bug) is kept and returned.
  Status on_read(grpc::ByteBuffer& in);
  // The call has ended: drop the last payload slice (gRPC may still hold it).
  void clear() { out_.Clear(); }

  bool upload_done() const { return upload_done_; }
  int64_t bytes_sent() const { return bytes_sent_; }
  int64_t bytes_received() const { return bytes_received_; }
  const Status& protocol_error() const { return protocol_error_; }
  bool have_summary() const { return have_summary_; }
  bool have_grant() const { return have_grant_; }
  const std::string& grant_token() const { return grant_token_; }
  const v1::MultiplyResponse& summary() const { return summary_; }
  bool first_c_before_upload_end() const { return first_c_before_upload_end_; }

 private:
  const std::vector<Input> inputs_;
  const int64_t chunk_elems_;
  float* const c_;
  const int64_t c_elements_;
  const std::function<void(int64_t, int64_t)> on_chunk_;
  const std::function<void(int64_t)> on_sent_;
  wire::SliceRefs* const refs_;
  std::size_t first_input_ = 0;  // the first input with elements to send
  grpc::ByteBuffer out_;
  std::size_t input_ = 0;    // the input being sent
  int64_t next_offset_ = 0;  // its next element
  int64_t pending_bytes_ = 0, bytes_sent_ = 0, bytes_received_ = 0;
  bool upload_done_ = false, have_summary_ = false, first_c_before_upload_end_ = false;
  bool have_grant_ = false;
  std::string grant_token_;
  Status protocol_error_;
  v1::MultiplyResponse summary_;
};

// Runs the stream `p` as a Multiply call through `stub` on this thread, with
// a completion queue of its own; returns when gRPC is done with the call.
grpc::Status run_on_caller_thread(grpc::TemplatedGenericStub<grpc::ByteBuffer, grpc::ByteBuffer>& stub,
                                  grpc::ClientContext* ctx, StreamProtocol& p);

}  // namespace sgemm
