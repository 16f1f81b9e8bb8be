// The wire side of Client::multiply_batch (sgemm_client.h): a batch's header
// fields and the per-product statuses of its summary. Private to sgemm_client.
#pragma once

#include <cstdint>
#include <vector>

#include "client/sgemm_client.h"
#include "common/status.h"
#include "sgemm/v1/sgemm.pb.h"

namespace sgemm::batch_call {

// GemmHeader.batch (with m, n, k) or .group, fail_fast, check_finite.
// INVALID_ARGUMENT for a batch with neither a count nor a group, or both.
Status set_batch_fields(const BatchProducts& batch, v1::GemmHeader* h);

// One ProductResult per product from the summary, checked against the layout:
// every product reported once, at its own offset, and the C bytes received
// exactly those of the products that succeeded, or none when !c_sent (C went
// to an output region) (INTERNAL otherwise: a server bug).
StatusOr<std::vector<ProductResult>> products_from_proto(const v1::MultiplySummary& s, const BatchLayout& layout,
                                                         int64_t c_bytes_received, bool c_sent);

}  // namespace sgemm::batch_call
