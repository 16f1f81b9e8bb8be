// How one Multiply request is spread over several connections
// (GemmHeader.stripes, docs/transport.md "One request over several
// connections"): which blocks of rows each stripe sends, in which order.
// The server's rule, mirrored: every matrix's STORED rows (A is k x m under
// op_a = kT, B is n x k under op_b = kT) are cut into blocks of
// `stripe_rows` rows and block j travels on stripe j % stripes; each stripe
// sends its blocks of B, then of C (when given), then of A, and receives C's
// rows of its own blocks.
//
// Threads: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "common/gemm_types.h"

namespace sgemm {

// Payload below which one connection is used when ClientOptions::connections
// is 0 (A + B + C in, plus C out): measured in docs/transport.md.
inline constexpr int64_t kStripeAutoThresholdBytes = int64_t{16} << 20;
// Connections a large request uses when ClientOptions::connections is 0.
inline constexpr int kStripeAutoConnections = 4;

// The connections a request uses: `requested` when > 0, else 1 below
// kStripeAutoThresholdBytes of payload and kStripeAutoConnections above.
int stripes_for(const GemmShape& shape, bool has_c, int requested);

enum class StripeMatrix { kA, kB, kC };

// Elements [begin, end) of a matrix: one block (or the whole matrix with one stripe).
struct StripeRange {
  StripeMatrix matrix;
  int64_t begin, end;
};

struct StripePlan {
  int stripes = 1;
  int64_t stripe_rows = 0;                           // rows per block (0 with one stripe)
  std::vector<std::vector<StripeRange>> per_stripe;  // what each stripe sends, in order
};

// The plan for `stripes` connections: blocks of stored rows that hold at
// most `chunk_bytes` of the widest stored matrix (so a block is one chunk
// there), and no more stripes than C has blocks (each stripe answers with its
// rows of C). Ranges are elements of the stored matrices. One stripe: B, C, A
// whole, as one stream.
StripePlan plan_stripes(const GemmShape& shape, bool has_c, int stripes, int64_t chunk_bytes, Op op_a = Op::kN,
                        Op op_b = Op::kN);

}  // namespace sgemm
