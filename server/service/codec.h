// Every conversion between sgemm.v1 messages and the service's plain structs,
// in one place: requests arrive as raw grpc::ByteBuffers (so the service, not
// gRPC, answers oversized and unparsable messages) and C goes back as
// ByteBuffers encoded here with one copy of the payload.
//
// Threads: pure functions, callable from any thread.
#pragma once

#include <grpcpp/support/byte_buffer.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "server/engine/engine.h"
#include "server/service/device_operands.h"
#include "server/service/region_operands.h"
#include "server/service/request_assembly.h"
#include "server/service/resident_operands.h"
#include "sgemm/v1/sgemm.pb.h"

namespace sgemm {

// One decoded MultiplyRequest message.
struct RequestMessage {
  enum class Kind { kHeader, kChunk, kAttach, kEmpty };
  Kind kind = Kind::kEmpty;
  GemmRequest header;              // kind == kHeader (already converted; enums checked)
  int stripes = 0;                 // kind == kHeader: GemmHeader.stripes (0 or 1: one stream)
  int64_t stripe_rows = 0;         // kind == kHeader: GemmHeader.stripe_rows
  std::string token;               // kind == kAttach: StripeAttach.token
  int stripe = 0;                  // kind == kAttach: StripeAttach.stripe
  RegionOperands regions;          // kind == kHeader: shared-memory operands, if any
  ResidentOperands resident;       // kind == kHeader: operands named by handle, keep_result
  DeviceRefs device;               // kind == kHeader: operands in a caller's device memory (CUDA IPC)
  bool trace = false;              // kind == kHeader: header.trace asks for a trace in the summary
  MatrixId matrix = MatrixId::kA;  // kind == kChunk
  int64_t offset = 0;
  // The chunk's payload (little-endian fp32), left where gRPC received it:
  // `data_bytes` bytes starting `data_offset` bytes into `slices`.
  std::vector<grpc::Slice> slices;
  std::size_t data_offset = 0;
  std::size_t data_bytes = 0;
  // Copies the payload to `dst`: the one copy of a chunk's bytes on the server.
  void copy_data(void* dst) const;
};

// Parses message number `index` (1-based, for messages) of a Multiply stream.
// A chunk's payload is not copied: the message's wire fields are read in
// place, falling back to the protobuf parser for anything unusual (fields
// repeated, out of the usual order).
// INVALID_ARGUMENT for a message over `max_message_bytes` (it says to chunk and
// gives the limit), for bytes that are not a MultiplyRequest, and for unknown
// enum values in the header or chunk.
StatusOr<RequestMessage> decode_request(grpc::ByteBuffer& buffer, int64_t index, int64_t max_chunk_bytes);

// MultiplyUnary's limit on the matrix payload each way (sgemm.proto,
// Limits.max_unary_bytes): with the header or the summary, each message fits
// gRPC's default 4 MiB message limit.
inline constexpr int64_t kMaxUnaryBytes = (int64_t{4} << 20) - (int64_t{64} << 10);

// Parses a MultiplyUnaryRequest: its top-level fields in order, each read in
// place as the MultiplyRequest of that one field (MultiplyUnaryRequest has
// MultiplyRequest's field numbers), with decode_request()'s checks and
// statuses; errors name the field ("chunks[1]"). Fields it does not know are
// skipped, as protobuf does.
StatusOr<std::vector<RequestMessage>> decode_unary_request(const grpc::ByteBuffer& buffer, int64_t max_chunk_bytes);

// One message of `first`'s bytes followed by `second`'s, without copying:
// MultiplyResponse{chunk} then MultiplyResponse{summary} is MultiplyUnaryResponse{c, summary}.
grpc::ByteBuffer concat_messages(grpc::ByteBuffer& first, grpc::ByteBuffer& second);

// Converts the wire header; unknown enum values are INVALID_ARGUMENT.
StatusOr<GemmRequest> header_from_proto(const sgemm::v1::GemmHeader& h);
StatusOr<MatrixId> matrix_from_proto(sgemm::v1::Matrix m);
sgemm::v1::Split split_to_proto(SplitMode s);
sgemm::v1::Precision precision_to_proto(Precision p);

// A MultiplyResponse carrying elements [offset, offset + count) of C, encoded
// by hand. With `keep` (what owns C's memory) the payload is not copied: the
// buffer's second slice points at `c + offset` and holds `keep` until gRPC
// has written it. Without, the payload is copied once into the buffer.
grpc::ByteBuffer encode_c_chunk(const float* c, int64_t offset, int64_t count,
                                std::shared_ptr<const void> keep = nullptr);

// MultiplyResponse{stripe_grant}: stripe 0's first answer to a striped header.
grpc::ByteBuffer encode_stripe_grant(const std::string& token, int stripes);

// Per-request figures the summary reports besides the engine's.
struct SummaryFigures {
  std::string request_id;
  double queue_ms = 0, receive_ms = 0, compute_ms = 0, total_ms = 0;
  int64_t bytes_received = 0, bytes_sent = 0;
  double send_ms = 0;
  std::string trace_json;                  // "" unless the request asked for a trace
  int stripes = 0;                         // streams the request used (GemmHeader.stripes); 0 = one
  std::string result_handle;               // header.keep_result: the kept C's handle
  std::shared_ptr<const BatchSpec> batch;  // a batch or group: its products, for their statuses
  int launch_products = 1;                 // products that shared the request's engine launch (coalescing)
};
grpc::ByteBuffer encode_summary(const GemmReport& report, const SummaryFigures& figures);

// One decoded PutMatrixRequest message (docs/resident.md): the header, or a
// chunk read in place as decode_request() does (`matrix` is ignored).
struct PutMessage {
  bool is_header = false;
  sgemm::v1::PutMatrixHeader header;
  RequestMessage chunk;  // kind kChunk, or kEmpty
};
StatusOr<PutMessage> decode_put_request(grpc::ByteBuffer& buffer, int64_t index);

// GetInfo's answer from the engine and the service's limits and load.
struct InfoFigures {
  std::string version;
  std::vector<std::string> backends;
  int64_t max_matrix_elements = 0, max_chunk_bytes = 0, host_memory_bytes = 0;
  int max_in_flight = 0, max_queued = 0;
  int max_stripes = 0;
  int in_flight = 0, queued = 0, open_streams = 0;
  int64_t requests_total = 0, requests_failed = 0, host_bytes_in_use = 0;
  // The caller, when the server checks tokens: its name, quotas and what it holds.
  std::string client;
  int client_max_in_flight = 0, client_in_flight = 0;
  int64_t client_max_bytes_in_flight = 0, client_bytes_in_flight = 0;
};
void info_to_proto(const EngineInfo& engine, const InfoFigures& f, sgemm::v1::GetInfoResponse* out);

}  // namespace sgemm
