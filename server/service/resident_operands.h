// A Multiply's resident operands (docs/resident.md): the header's handles for
// A, B and C, and whether to keep C resident. Converted from the wire by
// resident_operands_from_proto(); MultiplyCall binds them against the
// engine's ResidentStore (the resident row, resident_source.cc).
#pragma once

#include <optional>
#include <string>

#include "server/engine/engine.h"
#include "sgemm/v1/sgemm.pb.h"

namespace sgemm {

struct ResidentOperands {
  std::string a, b, c;  // handles; "" = sent as chunks (or absent, for C)
  // Submatrices (GemmHeader.a_at ...): where each operand starts inside its
  // handle's matrix; unset = the whole matrix, which must then fit exactly.
  std::optional<MatrixOffset> a_at, b_at, c_at;
  bool keep = false;  // keep C resident; the summary carries its handle
  bool keep_evictable = false;
  bool send_c = false;  // with keep: also send C's bytes
  bool named() const { return !a.empty() || !b.empty() || !c.empty(); }
  bool offsets() const { return a_at || b_at || c_at; }
  bool any() const { return named() || keep; }
};

ResidentOperands resident_operands_from_proto(const sgemm::v1::GemmHeader& h);

}  // namespace sgemm
