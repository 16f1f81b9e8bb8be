// The service's side of batched and grouped products (server/engine/batch.h,
// GemmHeader.batch / group): the wire header becomes a BatchSpec, the
// service's limits apply to the concatenated operands, and the summary
// reports each product's status. Protobuf in, plain structs out.
//
// Threads: pure functions, callable from any thread.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "server/engine/engine.h"
#include "server/service/request_assembly.h"
#include "sgemm/v1/sgemm.pb.h"

namespace sgemm {

// Fills out->batch from h.batch / h.group (leaves it null for a single
// product). INVALID_ARGUMENT naming the field for: batch < 0, batch and group
// both set, more than kMaxBatchProducts products, m, n or k of the header set
// with a group, a batch that names a device buffer, a C handle, a submatrix
// offset, keep_result or stripes > 1, a region ref with an ld, an A or B
// handle on a group, and fail_fast or check_finite without a batch. An A or B
// handle on a strided batch makes that operand shared (share_batch_operand);
// regions hold the concatenated operands (region_operands.h).
// The products' shapes are the engine's to check (check_batch_request).
Status batch_from_proto(const sgemm::v1::GemmHeader& h, GemmRequest* out);

// The service's limits on a batch: each concatenated operand within
// --max-matrix-elements (RESOURCE_EXHAUSTED naming it and the product count)
// and C within the output bound of its inputs (check_output_bound's rule,
// summed over the products) unless `c_in_caller_memory` (an out region).
Status check_batch_limits(const GemmRequest& request, const RequestLimits& limits, bool c_in_caller_memory);

// Elements of `matrix` the request holds on the server: the concatenated
// operand for a batch, else matrix_elements(request.shape, matrix).
int64_t request_matrix_elements(const GemmRequest& request, MatrixId matrix);

// The elements of C one "row" of OutputSink::rows_ready covers: n for a
// single product, 1 for a batch (batch.h: the sink counts elements).
int64_t c_row_elements(const GemmRequest& request);

// For timings.jsonl: `,"batch":{"kind":"strided"|"group","products":N,
// "products_failed":F,"flops":X}` for a batch (its record's shape is the first
// product's), "" for a single product.
std::string batch_timing_json(const GemmRequest& request, const GemmReport& report);

// MultiplySummary.products and products_failed from the engine's per-product
// statuses (nothing for a single product).
void products_to_proto(const GemmReport& report, const BatchSpec* spec, sgemm::v1::MultiplySummary* sum);

}  // namespace sgemm
