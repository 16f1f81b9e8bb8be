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
//
// A request's rows are made at its header (make_input_sources): the region
// row or the resident row when the header names them, then the upload row
// for the rest (none when the regions hold every operand). Each row:
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
#include "server/engine/engine.h"
#include "server/engine/resident_store.h"
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

// Operands in shared-memory regions. C's destination is the output region
// when the header names one (out()), else a buffer the request sends back.
class RegionSource final : public InputSource {
 public:
  explicit RegionSource(RegionOperands refs) : refs_(std::move(refs)) {}
  const char* name() const override { return "region"; }
  Status bind(const SourceContext& ctx, GemmJob& job) override;
  bool provides(MatrixId m) const override { return m != MatrixId::kC || bound_.c_in; }
  int64_t footprint(const GemmShape&) const override { return 0; }
  bool ready() const override { return true; }
  void release() override;
  // After the engine ran, before release(): a region whose owner shrank it
  // while it was read or written voids the result (FAILED_PRECONDITION naming it).
  Status check_after_run() const;
  // After bind(): where C is read from and written to.
  const BoundOperands& bound() const { return bound_; }

 private:
  const RegionOperands refs_;
  BoundOperands bound_;
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

// The rows a header asks for, in binding order: the region row (which leaves
// nothing to upload) or the resident row, then the upload row over
// `assembler` (the request's). INVALID_ARGUMENT for a header that names both
// regions and handles.
StatusOr<std::vector<std::unique_ptr<InputSource>>> make_input_sources(const RegionOperands& regions,
                                                                       const ResidentOperands& resident,
                                                                       MatrixAssembler* assembler);

}  // namespace sgemm
