// sgemm::Client: a small C++ library for sgemm-server (sgemm.v1).
//
//   auto client = sgemm::Client::connect("localhost:50051");
//   auto result = (*client)->multiply({m, n, k}, a, b, /*c=*/nullptr, {});
//   if (result.ok()) use(result->c, result->summary.devices);
//
// Over TCP it streams B (and C), then A, in chunks straight from the caller's
// memory (no copy into protobuf messages), and reads C's chunks while it
// writes, straight into the result; or, on the server's Unix socket
// ("unix:/path"), passes them through shared memory (docs/transport.md):
//
//   auto client = sgemm::Client::connect("unix:/run/sgemm/sgemm.sock");
//   auto a = client->create_region(m * k * 4);        // mapped here, registered there
//   fill((*a)->floats());  ...same for b and c...
//   auto r = client->multiply_regions({m, n, k}, {a->get()}, {b->get()}, RegionMatrix{c->get()},
//                                     RegionMatrix{c->get()}, opts);   // C in place: no matrix byte on gRPC
//
// Thread-safe: one Client may serve many threads (gRPC channels are).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/gemm_types.h"
#include "common/status.h"

namespace sgemm {

// Retries of a Multiply that got UNAVAILABLE (server busy, shutting down, not
// reachable): bounded exponential backoff with +-20% jitter, within the
// request's deadline. docs/lifecycle.md gives the same policy as a gRPC
// service config for clients in other languages.
struct RetryPolicy {
  int max_attempts = 5;                           // attempts in all; 1 = never retry (--no-retry)
  std::chrono::milliseconds initial_backoff{50};  // wait before the first retry
  std::chrono::milliseconds max_backoff{2000};    // the longest wait between attempts
  double multiplier = 2.0;                        // each wait is this times the previous one
};

// How multiply() moves the matrices.
enum class Transport {
  kAuto,  // shared memory when the target is the server's Unix socket and it offers regions, else gRPC
  kGrpc,  // chunks on the gRPC stream
  kShm,   // a shared-memory region of this client's (FAILED_PRECONDITION where regions are not offered)
};
const char* transport_name(Transport t);
std::optional<Transport> parse_transport(std::string_view name);  // "auto", "grpc", "shm"
// Which RPC multiply() uses for a product sent as data (docs/transport.md,
// "One product in one message").
enum class MultiplyRpc {
  kAuto,    // MultiplyUnary when the product fits it (A + B (+ C) and C each at most
            // Limits.max_unary_bytes, no handle, one connection, transport not kShm), else the stream
  kStream,  // always the Multiply stream
  kUnary,   // always MultiplyUnary (a product over its limit is refused: INVALID_ARGUMENT)
  kRing,    // as kUnary, but each request and answer go through a request ring in shared memory (the
            // server's Unix socket only; docs/transport.md "Request rings"): no gRPC call per product.
            // The ring is opened on first use; a product whose message or answer does not fit its
            // slots (1 MiB each), or that asks for a trace, goes as MultiplyUnary.
};
const char* multiply_rpc_name(MultiplyRpc rpc);
std::optional<MultiplyRpc> parse_multiply_rpc(std::string_view name);  // "auto", "stream", "unary", "ring"

// TLS to the server (docs/security.md). Used when `enabled` or any file is set.
struct TlsClientOptions {
  bool enabled = false;     // TLS with the system's root CAs even when no file is given
  std::string ca_file;      // PEM CA(s) that signed the server's certificate; "" = the system's roots
  std::string cert_file;    // this client's PEM certificate, for servers that require one (mutual TLS)
  std::string key_file;     // its PEM private key
  std::string server_name;  // check the server's certificate for this name, not the target's host
  bool used() const { return enabled || !ca_file.empty() || !cert_file.empty() || !key_file.empty(); }
};

struct ClientOptions {
  int64_t chunk_bytes = 1 << 20;  // payload of each chunk sent (1 MiB: docs/transport.md)
  RetryPolicy retry;              // for Multiply's UNAVAILABLE
  TlsClientOptions tls;           // plaintext unless used()
  std::string token;              // bearer token sent with every call (`authorization: Bearer ...`); "" = none
  Transport transport = Transport::kAuto;
  // Extra integer gRPC channel arguments (name, value), after the library's
  // own (docs/transport.md); a distinct unknown name gives a connection of its own.
  std::vector<std::pair<std::string, int>> channel_args;
  // Connections one gRPC Multiply spreads over (GemmHeader.stripes,
  // docs/transport.md "One request over several connections"); 0 = by size:
  // 1 below 16 MiB of payload (A + B + C in and C out), else 4. Capped at A's
  // blocks of rows; with more than one, MultiplyOptions::on_chunk is called
  // from several gRPC threads at once.
  int connections = 0;
  // Whether a request on one stream runs on the calling thread, which polls
  // the call's own completion queue (docs/transport.md, "Who drives a call"):
  // no hand-off between gRPC's threads and the caller at each step. false:
  // gRPC's callback threads drive it, as they drive striped requests.
  bool caller_thread_calls = true;
  // The RPC for products sent as data: MultiplyUnary for those that fit
  // (kAuto), or forced either way.
  MultiplyRpc rpc = MultiplyRpc::kAuto;
};

// A POSIX shared-memory object this client created, mapped here and
// registered with the server (Client::create_region). The destructor
// unregisters it (the server answers once no request uses it), unmaps it and
// unlinks it. Registrations belong to the Unix connection that made them: if
// the connection drops, the server forgets the region (multiplies naming it
// then get NOT_FOUND).
class Region {
 public:
  virtual ~Region() = default;
  virtual const std::string& name() const = 0;  // the registration name (also the shm_open name)
  virtual void* data() const = 0;               // page-aligned
  float* floats() const { return static_cast<float*>(data()); }
  virtual int64_t bytes() const = 0;
  // Unregisters now (the destructor does it otherwise); returns how many
  // requests the server waited for.
  virtual StatusOr<int> unregister() = 0;
};

// A matrix inside a region: element (i, j) at byte `offset` + 4 * (i * ld + j).
struct RegionMatrix {
  const Region* region = nullptr;
  int64_t offset = 0;  // bytes, a multiple of 4
  int64_t ld = 0;      // elements; 0 = dense (the matrix's width)
};

// A matrix in CUDA device memory of a process on the server's host (CUDA IPC,
// the server's Unix socket only): the server opens the allocation once per
// connection and reads and writes it on that GPU, so no matrix byte crosses
// gRPC or host memory. Element (i, j) at byte `offset` + 4 * (i * ld + j) of
// the allocation. The caller has finished writing the inputs (its stream
// synchronised) before multiply_device(), and reads C after it returns.
struct DeviceBufferMatrix {
  std::string ipc_handle;  // the 64 bytes of the allocation's cudaIpcMemHandle_t (cudaIpcGetMemHandle)
  std::string device;      // the GPU holding it: UUID ("GPU-...") or PCI bus id (cudaDeviceGetPCIBusId)
  int64_t offset = 0;      // bytes from the allocation's start (cuMemGetAddressRange's base), a multiple of 4
  int64_t ld = 0;          // elements; 0 = dense (the matrix's width)
  bool release = false;    // the server closes its mapping once this request ends (before the caller frees it)
};

struct MultiplyOptions {
  float alpha = 1.0f;
  float beta = 0.0f;                       // applies to C when C is given
  Precision precision = Precision::kFp32;  // tf32 and fp32x3 run their own kernels (leave kernel unset)
  std::optional<KernelKind> kernel;        // nullopt: the server chooses per shape
  SplitMode split = SplitMode::kAuto;      // kAuto: the server's planner decides
  std::chrono::milliseconds timeout{0};    // 0 = no deadline
  bool trace = false;                      // ask for a Chrome trace of the request (MultiplySummary::trace_json)
  // BLAS's transa / transb: Op::kT means the operand passed (or named by
  // handle, or in a region) is stored transposed, A as k x m and B as n x k
  // row-major, and the product uses its transpose. A column-major m x k A is
  // exactly a row-major k x m one: pass it as it is with op_a = kT, no copy.
  // Stripes (ClientOptions::connections) cut a transposed operand by its
  // stored rows, as the server does.
  Op op_a = Op::kN;
  Op op_b = Op::kN;
  // Called as rows of C arrive, on a gRPC thread (while the upload may still
  // be running; with ClientOptions::connections > 1, on several threads at
  // once): elements [offset, offset + count) are final.
  std::function<void(int64_t offset, int64_t count)> on_chunk;
  // Called as each chunk of A, B and C has been written to the connection
  // (its payload bytes), on the thread that wrote it (several at once with
  // connections > 1); a retried request sends, and reports, its bytes again.
  // Not called for shared-memory transfers (nothing is written).
  std::function<void(int64_t bytes)> on_sent;
  // Where C goes (m x n floats, the caller's memory): MultiplyResult::c stays
  // empty. nullptr: into MultiplyResult::c.
  float* c_out = nullptr;
  // Resident matrices (docs/resident.md): name an operand by the handle
  // put() returned instead of sending it (its pointer may then be null); a
  // C handle is an input C (beta applies). keep_result keeps C on the
  // server (MultiplySummary::result_handle); its bytes come back only with
  // send_c. keep_evictable: the kept C may be evicted.
  std::string a_handle, b_handle, c_handle;
  // Submatrices of resident operands: the operand is the block of its stored
  // shape at this element of the handle's matrix (&X[row][col] with X's own
  // leading dimension, as BLAS callers pass it). nullopt: the whole matrix.
  std::optional<MatrixOffset> a_at, b_at, c_at;
  bool keep_result = false;
  bool keep_evictable = false;
  bool send_c = false;
};

// Client::put's options.
struct PutOptions {
  bool evictable = false;                // may be evicted (least recently used first) when the server needs room
  std::string label;                     // shown by list()
  std::chrono::milliseconds timeout{0};  // 0 = no deadline
};

struct PutResult {
  std::string handle;  // 32 hex digits; name it in MultiplyOptions::a_handle / b_handle / c_handle
  int64_t bytes = 0;
  std::string placement;  // where the server put it ("GPU 0 rows 0-4096")
  double wall_ms = 0;
};

// One resident matrix as list() reports it.
struct MatrixInfo {
  struct Piece {
    int device = -1;  // CUDA ordinal; -1 = host memory
    int64_t row_begin = 0, row_end = 0;
  };
  std::string handle, owner, label;
  int64_t rows = 0, cols = 0, bytes = 0;
  std::vector<Piece> pieces;  // where it lives (whole on one GPU, replicated, K-sharded)
  double idle_s = 0;          // since its last use
  bool evictable = false;
  int requests_using = 0;
  int64_t uses = 0;
};

struct MatrixList {
  std::vector<MatrixInfo> matrices;  // most recently used first
  int64_t budget_bytes = 0;          // --resident-bytes (per GPU; host memory on the cpu backend)
  int64_t bytes_in_use = 0;          // every client's, all devices
};

struct DeviceTimingResult {
  int index = -1;
  std::string name;
  int64_t row_begin = 0, row_end = 0, k_begin = 0, k_end = 0;
  // Working time per phase; reduce_ms excludes waiting for peers.
  double copy_in_ms = 0, kernel_ms = 0, reduce_ms = 0, copy_out_ms = 0;
  // Waiting per phase: for input, for copies in, for peer GPUs, for kernels;
  // and for the NCCL order (docs/observability.md).
  double copy_in_wait_ms = 0, kernel_wait_ms = 0, reduce_wait_ms = 0, copy_out_wait_ms = 0, order_wait_ms = 0;
  std::string host{};  // the server owning the GPU in a cluster (docs/cluster.md); "" = the one asked
};

// A concrete kernel the server launched for the request, and how many times.
struct KernelRowResult {
  std::string name;
  int64_t launches = 0;
};

struct MultiplySummary {
  std::string request_id, backend, kernel, split, plan_reason;
  // Every concrete kernel that ran, in the order of first use, with its
  // launches; `kernel` is the one with the most. Empty from an older server.
  std::vector<KernelRowResult> kernel_rows;
  std::string precision;  // the arithmetic that ran: "fp32", "tf32", "fp32x3"
  std::vector<DeviceTimingResult> devices;
  double queue_ms = 0, receive_ms = 0, compute_ms = 0, total_ms = 0;
  double send_ms = 0;                   // first chunk of C sent to the summary
  int64_t bytes_in = 0, bytes_out = 0;  // matrix payload the server received and sent
  std::string trace_json;               // Chrome trace-event JSON when MultiplyOptions::trace
  int stripes = 1;                      // connections the request used (ClientOptions::connections)
  std::string result_handle;            // MultiplyOptions::keep_result: the kept C's handle
  int launch_products = 1;              // products that shared the request's engine launch (server coalescing)
};

struct MultiplyResult {
  std::vector<float> c;  // m x n, row-major (empty when MultiplyOptions::c_out was given or multiply_regions
                         // wrote C into a region)
  MultiplySummary summary;
  int64_t bytes_sent = 0;      // matrix payload sent
  int64_t bytes_received = 0;  // matrix payload received
  double wall_ms = 0;          // as the client saw it, connect excluded, retries included
  int attempts = 1;            // 1 + retries after UNAVAILABLE
  // The first chunk of C arrived before the client had written all of its
  // input (the server started computing during the upload).
  bool first_c_before_upload_end = false;
  MultiplyRpc rpc = MultiplyRpc::kStream;  // what carried it: kStream, kUnary or kRing
};

// Many products in one request (docs/transport.md, "Batches and groups"): a
// strided batch of `count` products of `shape`, or a group of products of the
// shapes in `group` (then count stays 0). Every product shares the options'
// alpha, beta, op_a, op_b, precision and kernel.
struct BatchProducts {
  GemmShape shape{};
  int64_t count = 0;
  std::vector<GemmShape> group;
  // A failing product fails the whole request (its status, naming it);
  // otherwise it is reported in BatchResult::products and the rest return.
  bool fail_fast = false;
  // The server checks each product's inputs for NaN and infinity and does
  // not compute a product that holds one (INVALID_ARGUMENT in its status).
  bool check_finite = false;
  // Every product's shape, in order.
  std::vector<GemmShape> shapes() const;
};

// Where each product's operands sit in the concatenated A, B and C that
// multiply_batch() takes and returns: product i's stored A (m x k, or k x m
// with op_a = kT) starts at element a_offset[i] of A, and so on; dense, in
// product order.
struct BatchLayout {
  std::vector<int64_t> a_offset, b_offset, c_offset;
  int64_t a_elements = 0, b_elements = 0, c_elements = 0;
};
BatchLayout batch_layout(const BatchProducts& batch);

struct ProductResult {
  int index = 0;
  Status status;  // OK: its C is in BatchResult::c; else why it was not computed
  int64_t c_offset = 0, c_elements = 0;
};

struct BatchResult {
  // Every product's C, concatenated as BatchLayout says (empty when
  // MultiplyOptions::c_out was given). A failed product's elements are 0.
  std::vector<float> c;
  std::vector<ProductResult> products;  // one per product, in order
  int products_failed = 0;
  MultiplySummary summary;
  int64_t bytes_sent = 0, bytes_received = 0;
  double wall_ms = 0;  // as the client saw it, retries included
  int attempts = 1;
};

struct ServerInfo {
  struct Device {
    int index = -1;
    std::string name;
    int64_t memory_bytes = 0;
    int sm_count = 0, compute_major = 0, compute_minor = 0;
    bool unhealthy = false;     // taken out of service by a GPU fault
    std::string health_reason;  // why
  };
  std::string version, backend;
  std::vector<std::string> backends, kernels;
  std::vector<std::string> precisions;  // what the running backend offers, fp32 first
  // Per precision offered: what it promises and the kernels that serve it (docs/kernels.md).
  struct Contract {
    std::string precision, promise;
    std::vector<std::string> kernels;
  };
  std::vector<Contract> contracts;
  std::vector<Device> devices;
  int64_t max_matrix_elements = 0, max_chunk_bytes = 0;
  int64_t host_memory_bytes = 0;
  int64_t region_bytes = 0, region_bytes_in_use = 0;  // the server's region budget and what is registered
  bool regions_available = false;                     // this connection can use shared-memory regions
  int max_in_flight = 0, max_queued = 0;
  int max_stripes = 0;  // most connections one request may use (ClientOptions::connections)
  int in_flight = 0, queued = 0, open_streams = 0;
  int64_t requests_total = 0, requests_failed = 0, host_bytes_in_use = 0;
  double startup_ms = 0;          // the engine's start-up, warm-up included
  int64_t pinned_pool_bytes = 0;  // page-locked memory pinned at start-up for requests
  // Resident matrices (docs/resident.md): the budget per GPU (host on cpu), bytes held, how many.
  int64_t resident_bytes = 0, resident_bytes_in_use = 0;
  int resident_matrices = 0;
  // With tokens (--auth-tokens): who the server takes us for, our quotas (0 = none) and what we hold.
  std::string client;
  int client_max_in_flight = 0, client_in_flight = 0;
  int64_t client_max_bytes_in_flight = 0, client_bytes_in_flight = 0;
};

class Client {
 public:
  virtual ~Client() = default;
  // Makes a channel to `target` ("host:port"); connects lazily. A TLS file
  // that cannot be read makes every call fail with INVALID_ARGUMENT naming it.
  static std::unique_ptr<Client> connect(const std::string& target, const ClientOptions& options = {});

  // C = alpha*op(A)*op(B) + beta*C on the server. `c` may be null (no C
  // input). Row-major, dense: a is m x k (k x m with MultiplyOptions::op_a =
  // kT), b is k x n (n x k with op_b = kT), c is m x n. UNAVAILABLE is
  // retried per ClientOptions::retry; the timeout covers every attempt.
  virtual StatusOr<MultiplyResult> multiply(const GemmShape& shape, const float* a, const float* b, const float* c,
                                            const MultiplyOptions& options) = 0;
  // Every product of `batch` in one request: `a`, `b` and `c` (null: no
  // input C) hold each product's operand concatenated densely in product
  // order (batch_layout()). MultiplyOptions' alpha, beta, ops, precision,
  // kernel, timeout, trace, on_chunk (offsets into the concatenated C),
  // on_sent and c_out (c_elements floats) apply; so do a_handle or b_handle
  // on a strided batch: that operand is one resident matrix (m x k or k x n
  // as stored) every product reads, and its pointer may be null. A C handle,
  // keep_result and split rows or K do not apply (INVALID_ARGUMENT).
  // UNAVAILABLE is retried as for multiply().
  virtual StatusOr<BatchResult> multiply_batch(const BatchProducts& batch, const float* a, const float* b,
                                               const float* c, const MultiplyOptions& options) = 0;
  // The same with every operand in shared-memory regions (the server's Unix
  // socket only): each RegionMatrix is where the concatenated operand starts
  // (batch_layout(); dense, ld 0). `c` is the input C (nullopt: none); `out`
  // is where the concatenated C goes (may be `c` itself: in place); without
  // `out` C comes back in BatchResult::c.
  virtual StatusOr<BatchResult> multiply_batch_regions(const BatchProducts& batch, const RegionMatrix& a,
                                                       const RegionMatrix& b, const std::optional<RegionMatrix>& c,
                                                       const std::optional<RegionMatrix>& out,
                                                       const MultiplyOptions& options) = 0;
  virtual StatusOr<ServerInfo> info(std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) = 0;
  // grpc.health.v1 Check for `service` ("" = the whole server): true when SERVING.
  virtual StatusOr<bool> serving(const std::string& service = "",
                                 std::chrono::milliseconds timeout = std::chrono::milliseconds(3000)) = 0;

  // ---- Shared-memory regions (the server's Unix socket only) ----
  // Which transport multiply() uses on this client (kAuto resolved: asks the
  // server once).
  virtual StatusOr<Transport> transport() = 0;
  // Creates a shared-memory object of `bytes` (mode 0600), maps it and
  // registers it. The Region keeps the channel open and may outlive the Client.
  virtual StatusOr<std::unique_ptr<Region>> create_region(int64_t bytes) = 0;
  // C = alpha*A*B + beta*C with every operand in regions. `c` is the input C
  // (beta applies; nullopt: none); `out` is where C goes (may be `c` itself:
  // C in place); without `out` C comes back in the result as usual.
  // ---- Resident matrices (docs/resident.md) ----
  // Uploads a rows x cols matrix (row-major) once; later multiplies name it
  // by the returned handle. The server loses every handle when it restarts:
  // on NOT_FOUND, put again.
  virtual StatusOr<PutResult> put(int64_t rows, int64_t cols, const float* data, const PutOptions& options = {}) = 0;
  // The same from a matrix in a shared-memory region (the server's Unix
  // socket only): no byte of it crosses gRPC, the server copies it.
  virtual StatusOr<PutResult> put_region(int64_t rows, int64_t cols, const RegionMatrix& matrix,
                                         const PutOptions& options = {}) = 0;
  // Deletes it (requests using it finish first); returns how many were using it.
  virtual StatusOr<int> remove(const std::string& handle) = 0;
  // This client's resident matrices.
  virtual StatusOr<MatrixList> list() = 0;

  virtual StatusOr<MultiplyResult> multiply_regions(const GemmShape& shape, const RegionMatrix& a,
                                                    const RegionMatrix& b, const std::optional<RegionMatrix>& c,
                                                    const std::optional<RegionMatrix>& out,
                                                    const MultiplyOptions& options) = 0;

  // ---- Device buffers (CUDA IPC; the server's Unix socket, a cuda backend) ----
  // C = alpha*A*B + beta*C with every operand in device buffers (untransposed).
  // `c` is the input C (nullopt: none); `out` is where C goes (may be `c`
  // itself: C in place); without `out` C comes back in the result as usual.
  // FAILED_PRECONDITION over TCP or from a server without GPUs.
  virtual StatusOr<MultiplyResult> multiply_device(const GemmShape& shape, const DeviceBufferMatrix& a,
                                                   const DeviceBufferMatrix& b,
                                                   const std::optional<DeviceBufferMatrix>& c,
                                                   const std::optional<DeviceBufferMatrix>& out,
                                                   const MultiplyOptions& options) = 0;
};

}  // namespace sgemm
