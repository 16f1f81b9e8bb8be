// A Multiply's operands in shared-memory regions: the header's RegionRefs,
// converted (region_operands_from_proto) and then resolved against the
// registry (bind_region_operands) into host pointers and leading dimensions
// for the GemmJob, with a reference on every region used, held until the
// engine is done with them.
//
// Rules (INVALID_ARGUMENT naming the field): when any ref is set, A and B must
// be regions, C must be one exactly when has_c; offsets are >= 0 and a multiple
// of 4; ld is 0 (dense) or at least the matrix's width and at most the
// engine's max_leading_dimension() (the integer its libraries index with);
// each matrix must lie inside its region (computed without overflow, for any
// int64 the wire can carry). For a batch (GemmRequest::batch) each ref covers
// the products' concatenated operand, dense (one row of that many elements).
// The output may be C's own bytes (C in place) or another
// region, or absent (C then comes back as chunks).
//
// Threads: pure functions plus the registry's own locking.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "server/engine/engine.h"
#include "server/service/region_registry.h"
#include "sgemm/v1/sgemm.pb.h"

namespace sgemm {

struct RegionRef {
  std::string region;  // the registration name
  int64_t offset = 0;  // bytes
  int64_t ld = 0;      // elements; 0 = dense
};

struct RegionOperands {
  std::optional<RegionRef> a, b, c, out;
  bool any() const { return a || b || c || out; }
};

RegionOperands region_operands_from_proto(const sgemm::v1::GemmHeader& h);

struct BoundOperands {
  std::vector<std::shared_ptr<const MappedRegion>> held;  // one reference per region named
  const float* a = nullptr;
  const float* b = nullptr;
  const float* c_in = nullptr;                       // null without has_c
  float* out = nullptr;                              // null: C goes back as chunks
  int64_t lda = 0, ldb = 0, ldc_in = 0, ld_out = 0;  // resolved (never 0)
  int64_t c_rows = 0, c_cols = 0;                    // C's extent: m x n, or 1 x elements for a batch
  bool c_in_place() const { return c_in && c_in == out && ldc_in == ld_out; }
};

// `max_ld`: the engine's max_leading_dimension().
StatusOr<BoundOperands> bind_region_operands(const RegionRegistry& registry, const RegionCaller& caller,
                                             const GemmRequest& request, const RegionOperands& ops, int64_t max_ld);

// The layout checks of one matrix of rows x cols (rows, cols >= 1) at byte
// `offset` with leading dimension `ld` (0 = dense) inside a region of
// `region_bytes` named `region`: INVALID_ARGUMENT naming `field`. Returns the
// resolved ld.
StatusOr<int64_t> check_region_layout(const std::string& field, const std::string& region, int64_t region_bytes,
                                      int64_t rows, int64_t cols, int64_t offset, int64_t ld, int64_t max_ld);

// Copies a rows x cols matrix between strided host layouts (C into the output
// when they differ).
void copy_matrix(float* dst, int64_t ld_dst, const float* src, int64_t ld_src, int64_t rows, int64_t cols);

}  // namespace sgemm
