#include "server/engine/batch.h"

#include <cmath>
#include <limits>
#include <string>

#include "server/engine/engine.h"

namespace sgemm {
namespace {

// a + b, or int64's maximum where that would overflow (the size checks then refuse it).
int64_t add_saturating(int64_t a, int64_t b) {
  if (b > 0 && a > std::numeric_limits<int64_t>::max() - b) return std::numeric_limits<int64_t>::max();
  return a + b;
}
int64_t mul_saturating(int64_t a, int64_t b) {
  if (a <= 0 || b <= 0) return 0;
  if (a > std::numeric_limits<int64_t>::max() / b) return std::numeric_limits<int64_t>::max();
  return a * b;
}

}  // namespace

double BatchSpec::flops() const {
  double f = 0;
  for (const BatchProduct& p : products) f += p.shape.flops();
  return f;
}

BatchSpec make_batch_spec(BatchKind kind, const std::vector<GemmShape>& shapes, Op /*op_a*/, Op /*op_b*/) {
  // A stored operand has the same element count whichever way it is stored
  // (m x k or k x m): the offsets do not depend on op_a / op_b.
  BatchSpec spec;
  spec.kind = kind;
  spec.products.reserve(shapes.size());
  for (const GemmShape& s : shapes) {
    BatchProduct p;
    p.shape = s;
    p.a_offset = spec.a_elements;
    p.b_offset = spec.b_elements;
    p.c_offset = spec.c_elements;
    spec.a_elements = add_saturating(spec.a_elements, mul_saturating(s.m, s.k));
    spec.b_elements = add_saturating(spec.b_elements, mul_saturating(s.k, s.n));
    spec.c_elements = add_saturating(spec.c_elements, mul_saturating(s.m, s.n));
    spec.products.push_back(p);
  }
  return spec;
}

void share_batch_operand(BatchSpec& spec, MatrixId matrix) {
  if (spec.products.empty() || matrix == MatrixId::kC) return;
  const GemmShape& s = spec.products.front().shape;
  if (matrix == MatrixId::kA) {
    spec.shared_a = true;
    spec.a_elements = mul_saturating(s.m, s.k);
    for (BatchProduct& p : spec.products) p.a_offset = 0;
  } else {
    spec.shared_b = true;
    spec.b_elements = mul_saturating(s.k, s.n);
    for (BatchProduct& p : spec.products) p.b_offset = 0;
  }
}

std::string batch_shape_field(const BatchSpec& spec, std::size_t index, char dim) {
  if (spec.kind == BatchKind::kStrided) return std::string("header.") + dim;
  return "header.group[" + std::to_string(index) + "]." + dim;
}

std::string product_label(const BatchSpec& spec, std::size_t index) {
  return "product " + std::to_string(index) + " (" + gemm_shape_text(spec.products[index].shape) + "): ";
}

Status check_batch_request(const GemmRequest& r) {
  if (!r.batch) return Internal("check_batch_request on a request without a batch");
  const BatchSpec& spec = *r.batch;
  const char* what = spec.kind == BatchKind::kStrided ? "header.batch" : "header.group";
  if (spec.products.empty()) return InvalidArgument(std::string(what) + " holds no product");
  if (spec.count() > kMaxBatchProducts)
    return InvalidArgument(std::string(what) + " holds " + std::to_string(spec.count()) +
                           " products, over the limit of " + std::to_string(kMaxBatchProducts) +
                           " per request; send several requests");
  for (std::size_t i = 0; i < spec.products.size(); ++i) {
    const GemmShape& s = spec.products[i].shape;
    for (auto [dim, v] : {std::pair{'m', s.m}, std::pair{'n', s.n}, std::pair{'k', s.k}})
      if (v < 1) return InvalidArgument(batch_shape_field(spec, i, dim) + " must be >= 1, got " + std::to_string(v));
    if (spec.kind == BatchKind::kStrided) break;  // every product has the header's shape
  }
  if (spec.kind == BatchKind::kGroup && (spec.shared_a || spec.shared_b))
    return InvalidArgument(std::string("header.") + (spec.shared_a ? "a_handle" : "b_handle") +
                           " names one matrix for every product of a group, whose shapes differ: a shared "
                           "operand applies to a strided batch (header.batch)");
  if (!std::isfinite(r.alpha)) return InvalidArgument("header.alpha must be finite, got " + std::to_string(r.alpha));
  if (!std::isfinite(r.beta)) return InvalidArgument("header.beta must be finite, got " + std::to_string(r.beta));
  if (r.options.split == SplitMode::kRows || r.options.split == SplitMode::kK)
    return InvalidArgument("header.split '" + std::string(split_mode_name(r.options.split)) +
                           "' cannot apply to a batch: its products are split across GPUs whole, by product "
                           "(leave split unset, or single for one GPU)");
  return Status::Ok();
}

namespace {

// The first non-finite element of a stored rows x cols matrix, or -1.
int64_t first_non_finite(const float* x, int64_t elements) {
  for (int64_t i = 0; i < elements; ++i)
    if (!std::isfinite(x[i])) return i;
  return -1;
}

}  // namespace

Status check_product_finite(const GemmJob& job, std::size_t index) {
  const GemmRequest& r = job.request;
  const BatchSpec& spec = *r.batch;
  const BatchProduct& p = spec.products[index];
  const GemmShape& s = p.shape;
  struct Operand {
    const char* name;
    const float* base;
    int64_t offset;
    MatrixDims dims;
  };
  const Operand operands[] = {
      {"A", job.a, p.a_offset, stored_a_dims(s, r.op_a)},
      {"B", job.b, p.b_offset, stored_b_dims(s, r.op_b)},
      {"C", r.has_c ? job.c : nullptr, p.c_offset, MatrixDims{s.m, s.n}},
  };
  for (const Operand& o : operands) {
    if (!o.base) continue;
    const int64_t bad = first_non_finite(o.base + o.offset, o.dims.rows * o.dims.cols);
    if (bad >= 0)
      return InvalidArgument(product_label(spec, index) + o.name + " holds a non-finite value (" +
                             std::to_string(o.base[o.offset + bad]) + ") at stored element (" +
                             std::to_string(bad / o.dims.cols) + ", " + std::to_string(bad % o.dims.cols) +
                             "); header.check_finite asked that such products not be computed");
  }
  return Status::Ok();
}

}  // namespace sgemm
