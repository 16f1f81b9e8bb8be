// Where a Multiply's operands come from: one row per kind of source, each
// behind the same small interface, as the planner's split strategies are.
//
//   upload    (upload_source.cc)   chunks on the request's streams into host
//                                  buffers from the budget; the default for
//                                  every operand no other row provides
//   region    (region_source.cc)   shared-memory regions a caller on this host
//                                  registered (docs/transport.md); A and B,
//                                  and C when has_c; never uploaded
//   resident  (resident_source.cc) matrices kept on the server, named by
//                                  handle (docs/resident.md)
//   device    (device_source.cc)   CUDA device memory of a caller on this
//                                  host (CUDA IPC, docs/transport.md "Device
//                                  buffers"); A, B, and C when has_c; the
//                                  engine reads and writes them on the GPU
//
// A batch or group (server/engine/batch.h) has the same rows: its region refs
// cover the products' concatenated operands, and a resident A or B of a
// strided batch is one matrix every product reads (multiply_call_batch.cc).
//
// A request's rows are made at its header (make_input_sources): the region
// row, the device row or the resident row when the header names them, then
// the upload row for the rest (none when regions or device buffers hold every
// operand: those rows are CallerMemorySources). Each row:
//   bind()       resolves its operands into the GemmJob and holds what it
//                resolved (a pin, a mapping) until release()
//   provides()   the operands it supplies (the others come from another row)
//   footprint()  the bytes of the host-memory budget its operands need
//   ready()      its operands are all in place (an upload: every chunk in)
//   release()    the engine is done with the operands: pins and mappings go
//
// Threads: a request's rows are used under its lock; release() may run on
// the compute thread once the engine has returned.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "server/engine/device_memory.h"
#include "server/engine/engine.h"
#include "server/engine/resident_store.h"
#include "server/service/device_operands.h"
#include "server/service/region_operands.h"
#include "server/service/request_assembly.h"
#include "server/service/resident_operands.h"

namespace sgemm {

struct ServiceShared;
class AuthClient;

// What a row may use while it binds.
struct SourceContext {
  ServiceShared& shared;
  const AuthClient* client;  // null without --auth-tokens
  std::string peer;          // the caller's gRPC peer (a region caller is found by it)
  const GemmRequest& header;
};

class InputSource {
 public:
  virtual ~InputSource() = default;
  virtual const char* name() const = 0;
  virtual Status bind(const SourceContext& ctx, GemmJob& job) = 0;
  virtual bool provides(MatrixId m) const = 0;
  virtual int64_t footprint(const GemmShape& shape) const = 0;
  virtual bool ready() const = 0;
  virtual void release() = 0;
};

// Operands sent as chunks, assembled by `assembler` (owned by the request).
// It receives every matrix of the header that the rows bound before it left
// out of the job; a C it receives lands in C's own buffer, which the request
// counts with the output, so its footprint is A's and B's.
class UploadSource final : public InputSource {
 public:
  explicit UploadSource(MatrixAssembler* assembler) : assembler_(assembler) {}
  const char* name() const override { return "upload"; }
  Status bind(const SourceContext& ctx, GemmJob& job) override;
  bool provides(MatrixId m) const override { return receives_[static_cast<int>(m)]; }
  int64_t footprint(const GemmShape& shape) const override;
  bool ready() const override { return assembler_->complete(); }
  void release() override {}

 private:
  MatrixAssembler* const assembler_;
  bool receives_[3] = {false, false, false};
};

// A row that holds every operand in the caller's own memory (regions, device
// buffers): the request uploads nothing, computes at once, and C is written
// into the caller's memory (writes_c()) or comes back as chunks.
class CallerMemorySource : public InputSource {
 public:
  int64_t footprint(const GemmShape&) const override { return 0; }
  bool ready() const override { return true; }
  // After bind(): C is written into the caller's memory, so nothing but the
  // summary is sent.
  virtual bool writes_c() const = 0;
  // After bind(), before computing: the job's C. `host_c` is the request's
  // dense m x n buffer for C when !writes_c() (null otherwise); the input C
  // is put where the engine reads it.
  virtual void prepare_c(GemmJob& job, float* host_c) = 0;
  // After the engine ran, before release(): whether the result stands.
  virtual Status check_after_run() const = 0;
};

// Operands in shared-memory regions. C's destination is the output region
// when the header names one, else a buffer the request sends back.
class RegionSource final : public CallerMemorySource {
 public:
  explicit RegionSource(RegionOperands refs) : refs_(std::move(refs)) {}
  const char* name() const override { return "region"; }
  Status bind(const SourceContext& ctx, GemmJob& job) override;
  bool provides(MatrixId m) const override { return m != MatrixId::kC || bound_.c_in; }
  void release() override;
  bool writes_c() const override { return bound_.out != nullptr; }
  void prepare_c(GemmJob& job, float* host_c) override;
  // A region whose owner shrank it while it was read or written voids the
  // result (FAILED_PRECONDITION naming it).
  Status check_after_run() const override;

 private:
  const RegionOperands refs_;
  BoundOperands bound_;
};

// Operands in a caller's CUDA device memory, opened through the service's
// DeviceHandleRegistry (kept open for the connection) and held by reference
// from bind() until release(); a ref with `release` set lets the connection's
// hold go at release(). The engine reads them and writes C on the GPU: into
// the output buffer when the header names one, else into `host_c`.
class DeviceSource final : public CallerMemorySource {
 public:
  explicit DeviceSource(DeviceRefs refs) : refs_(std::move(refs)) {}
  ~DeviceSource() override { release(); }  // a request that ended before computing lets go too
  const char* name() const override { return "device"; }
  Status bind(const SourceContext& ctx, GemmJob& job) override;
  bool provides(MatrixId m) const override { return m != MatrixId::kC || bool(refs_.c); }
  void release() override;
  bool writes_c() const override { return bool(refs_.out); }
  void prepare_c(GemmJob& job, float* host_c) override;
  Status check_after_run() const override { return Status::Ok(); }

 private:
  const DeviceRefs refs_;
  DeviceOperands ops_;
  ServiceShared* shared_ = nullptr;  // set by bind()
  std::string client_;               // the caller's client, for release()
  uint64_t connection_ = 0;
  uid_t uid_ = 0;
};

// Operands kept on the server, pinned from bind() until release().
class ResidentSource final : public InputSource {
 public:
  explicit ResidentSource(ResidentOperands handles) : handles_(std::move(handles)) {}
  const char* name() const override { return "resident"; }
  Status bind(const SourceContext& ctx, GemmJob& job) override;
  bool provides(MatrixId m) const override { return bool(leases_[static_cast<int>(m)]); }
  int64_t footprint(const GemmShape&) const override { return 0; }
  bool ready() const override { return true; }
  void release() override;

 private:
  const ResidentOperands handles_;
  ResidentStore::Lease leases_[3];
};

// The rows a header asks for, in binding order: the region row or the device
// row (each leaves nothing to upload), or the resident row, then the upload
// row over `assembler` (the request's). INVALID_ARGUMENT for a header that
// names two of regions, device buffers and handles.
StatusOr<std::vector<std::unique_ptr<InputSource>>> make_input_sources(const RegionOperands& regions,
                                                                       const ResidentOperands& resident,
                                                                       const DeviceRefs& device,
                                                                       MatrixAssembler* assembler);

}  // namespace sgemm
