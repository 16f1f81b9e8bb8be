// One MultiplyUnary call (sgemm.proto; docs/transport.md, "One product in one
// message"): a product whose request and answer each fit in one message. The
// request is the bytes of MultiplyRequest{header} followed by one
// MultiplyRequest{chunk} per matrix (MultiplyUnaryRequest has their field
// numbers), each chunk's payload a slice over the caller's matrix (no copy);
// the answer's C is copied once, from gRPC's slices into the caller's C. The
// calling thread drives the call on a completion queue of its own, as
// run_on_caller_thread() drives a stream; or a request ring carries the same
// bytes through shared memory (request_ring.h).
//
// Threads: run_unary() blocks its caller; nothing is shared.
#pragma once

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "client/wire_codec.h"
#include "common/gemm_types.h"
#include "common/status.h"
#include "sgemm/v1/sgemm.pb.h"

namespace sgemm {

// MultiplyUnary's limit on the matrix payload each way (Limits.max_unary_bytes).
inline constexpr int64_t kUnaryMaxBytes = (int64_t{4} << 20) - (int64_t{64} << 10);

// Whether a product of `shape` fits MultiplyUnary when `sent_elements` floats
// of its operands travel in the request (those named by handle do not) and C
// comes back.
bool fits_unary(const GemmShape& shape, int64_t sent_elements);

struct UnaryInput {
  wire::WireMatrix matrix;
  const float* data;  // the whole stored matrix
  int64_t elements;
};

// What came back: C went into `c`; the summary.
struct UnaryOutcome {
  v1::MultiplySummary summary;
  int64_t bytes_sent = 0, bytes_received = 0;
};

// Carries one MultiplyUnary request's bytes to the server and its answer's
// back: the RPC (grpc_unary_exchange) or a request ring's slot (request_ring.h).
using UnaryExchange = std::function<Status(const grpc::ByteBuffer& request, grpc::ByteBuffer* response)>;

// The MultiplyUnary RPC on `ctx`, driven on the calling thread (its own
// completion queue). `stub` and `ctx` must outlive the exchange's use.
UnaryExchange grpc_unary_exchange(grpc::TemplatedGenericStub<grpc::ByteBuffer, grpc::ByteBuffer>& stub,
                                  grpc::ClientContext* ctx);

// Sends `header` (a MultiplyRequest carrying the header) and `inputs` as one
// MultiplyUnary request through `exchange` and waits for the answer: C
// (`c_elements` floats) is written to `c`. The payload slices count on `refs`
// until the transport lets go of them. The server's status, or INTERNAL for
// an answer that does not parse or has the wrong number of elements.
StatusOr<UnaryOutcome> run_unary(const UnaryExchange& exchange, const v1::MultiplyRequest& header,
                                 const std::vector<UnaryInput>& inputs, float* c, int64_t c_elements,
                                 wire::SliceRefs* refs);

}  // namespace sgemm
