// Batched and grouped products: many GEMMs in one request (GemmRequest::batch).
//
// A strided batch is N products of one shape; a group is a list of products of
// their own shapes. Every product shares the request's alpha, beta, has_c, op_a,
// op_b and precision. Each operand is one host matrix holding every product's
// stored operand densely, in product order (BatchProduct's offsets say where
// each starts), so the service receives and sends them as it does any matrix.
//
// What an engine does with a batch (server/engine/engine.h, Engine::run):
//   - validate(): check_batch_request() and its own per-launch limits;
//   - run(): each product computed into its place of `job.c`; when asked,
//     every product's inputs go through check_product_finite() before any is
//     computed, and a product that fails it is not computed: its status goes
//     into GemmReport::product_status; with fail_fast the first such status
//     fails the run (naming the product) before anything is computed;
//   - the sink: rows_ready(begin, end) counts ELEMENTS of the concatenated C
//     (one element per row), reported once per computed product.
// Pure C++, no CUDA.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/gemm_types.h"
#include "common/status.h"

namespace sgemm {

struct GemmRequest;
struct GemmJob;
enum class MatrixId;  // engine.h

// The most products one request may carry (GemmHeader.batch, group): bounds the
// per-product arrays the engines build and the summary's size.
inline constexpr int64_t kMaxBatchProducts = 65536;

enum class BatchKind {
  kStrided,  // every product has the same shape (GemmHeader.batch)
  kGroup,    // each product has its own shape (GemmHeader.group)
};

struct BatchProduct {
  GemmShape shape;
  // Element offsets of the product's stored A, B and C inside the request's
  // concatenated host matrices.
  int64_t a_offset = 0, b_offset = 0, c_offset = 0;
  int64_t c_elements() const { return shape.m * shape.n; }
};

struct BatchSpec {
  BatchKind kind = BatchKind::kStrided;
  std::vector<BatchProduct> products;
  bool fail_fast = false;     // the first failing product fails the request
  bool check_finite = false;  // products with a non-finite input are not computed
  // A strided batch whose products all read one stored A (B): a resident
  // matrix named by handle (GemmHeader.a_handle / b_handle). Every product's
  // offset into it is 0 (stride 0) and the operand holds one product's matrix.
  bool shared_a = false, shared_b = false;
  // Elements of each concatenated matrix (C counted even without has_c).
  int64_t a_elements = 0, b_elements = 0, c_elements = 0;
  int64_t count() const { return int64_t(products.size()); }
  double flops() const;  // sum of 2 m n k over the products
};

// The spec for `shapes` (one per product) with operands stored as `op_a` /
// `op_b` say: offsets laid out densely in product order. Shapes are taken as
// given (check_batch_request() checks them); offsets saturate rather than
// overflow, so an absurd shape is refused by the size checks, not wrapped.
BatchSpec make_batch_spec(BatchKind kind, const std::vector<GemmShape>& shapes, Op op_a, Op op_b);

// Makes `matrix` (A or B) of a strided batch one matrix that every product
// reads (stride 0): each product's offset becomes 0 and the operand's element
// count that of one product. A group's products differ in shape and never share.
void share_batch_operand(BatchSpec& spec, MatrixId matrix);

// The rules every engine shares for a batch: between 1 and kMaxBatchProducts
// products, each m, n, k >= 1 (a strided batch's shape is the header's:
// "header.m"; a group's names the entry: "header.group[3].k"), alpha and beta
// finite, split unset or single (the engine splits a batch by product, never by
// rows or K). INVALID_ARGUMENT naming the field.
Status check_batch_request(const GemmRequest& request);

// The name of product `index`'s shape field for messages: "header.m" for a
// strided batch, "header.group[index].m" for a group.
std::string batch_shape_field(const BatchSpec& spec, std::size_t index, char dim);

// When spec.check_finite: OK when product `index`'s A and B (and C when the
// request has_c) hold only finite values, else INVALID_ARGUMENT naming the
// product, the matrix and the first bad element (stored row, column).
Status check_product_finite(const GemmJob& job, std::size_t index);

// "product 3 (17x33x29): " for messages about one product.
std::string product_label(const BatchSpec& spec, std::size_t index);

}  // namespace sgemm
