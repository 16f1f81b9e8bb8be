#include "server/service/batch_request.h"

#include <cstdio>
#include <string>
#include <vector>

namespace sgemm {

Status batch_from_proto(const v1::GemmHeader& h, GemmRequest* out) {
  const bool group = h.group_size() > 0;
  if (h.batch() < 0) return InvalidArgument("header.batch must be >= 0, got " + std::to_string(h.batch()));
  if (h.batch() == 0 && !group) {
    if (h.fail_fast())
      return InvalidArgument(
          "header.fail_fast applies to a batch or group (header.batch, header.group); this "
          "header has neither");
    if (h.check_finite())
      return InvalidArgument(
          "header.check_finite applies to a batch or group (header.batch, header.group); this "
          "header has neither");
    return Status::Ok();
  }
  if (h.batch() > 0 && group)
    return InvalidArgument("header.batch (" + std::to_string(h.batch()) + ") and header.group (" +
                           std::to_string(h.group_size()) +
                           " shapes) are both set: a request is a strided batch or a group, not both");
  const int64_t count = group ? h.group_size() : h.batch();
  const char* what = group ? "header.group" : "header.batch";
  if (count > kMaxBatchProducts)
    return InvalidArgument(std::string(what) + " asks for " + std::to_string(count) + " products, over the limit of " +
                           std::to_string(kMaxBatchProducts) + " per request; send several requests");
  if (group)
    for (auto [name, v] : {std::pair{"m", h.m()}, std::pair{"n", h.n()}, std::pair{"k", h.k()}})
      if (v != 0)
        return InvalidArgument(std::string("header.") + name + " is " + std::to_string(v) +
                               " with header.group: a group's shapes are its entries (header.group[i]); leave "
                               "header.m, n and k 0");
  // What a batch cannot carry: submatrix offsets, a kept C, device buffers,
  // stripes. Its operands are uploaded, in regions, or (A or B of a strided
  // batch) one resident matrix every product reads.
  const std::pair<const char*, bool> refused[] = {
      {"c_handle", !h.c_handle().empty()},
      {"a_at", h.has_a_at()},
      {"b_at", h.has_b_at()},
      {"c_at", h.has_c_at()},
      {"keep_result", h.keep_result()},
      {"keep_evictable", h.keep_evictable()},
      {"a_device", h.has_a_device()},
      {"b_device", h.has_b_device()},
      {"c_device", h.has_c_device()},
      {"out_device", h.has_out_device()},
      {"send_c", h.send_c()},
      {"stripes", h.stripes() > 1},
  };
  for (const auto& [field, set] : refused)
    if (set)
      return InvalidArgument(std::string("header.") + field + " is set on a " + (group ? "group" : "strided batch") +
                             ": a batch's operands are uploaded, in shared-memory regions, or (A or B of a strided "
                             "batch) one resident matrix; send this product alone to use " +
                             field);
  // A batch's region operand is its products' operands concatenated densely (batch.h).
  const std::pair<const char*, const v1::RegionRef*> regions[] = {
      {"a_region", h.has_a_region() ? &h.a_region() : nullptr},
      {"b_region", h.has_b_region() ? &h.b_region() : nullptr},
      {"c_region", h.has_c_region() ? &h.c_region() : nullptr},
      {"out_region", h.has_out_region() ? &h.out_region() : nullptr},
  };
  for (const auto& [field, ref] : regions)
    if (ref && ref->ld() != 0)
      return InvalidArgument(std::string("header.") + field + ".ld is " + std::to_string(ref->ld()) + " on a " +
                             (group ? "group" : "strided batch") +
                             ": a batch's operand in a region is every product's matrix, dense, one after "
                             "another; leave ld 0");
  if (group)
    for (auto [field, set] :
         {std::pair{"a_handle", !h.a_handle().empty()}, std::pair{"b_handle", !h.b_handle().empty()}})
      if (set)
        return InvalidArgument(std::string("header.") + field +
                               " is set on a group: one resident matrix shared by every product applies to a "
                               "strided batch (header.batch), whose products have one shape");
  std::vector<GemmShape> shapes;
  if (group) {
    shapes.reserve(std::size_t(count));
    for (const v1::ProductShape& s : h.group()) shapes.push_back({s.m(), s.n(), s.k()});
  } else {
    shapes.assign(std::size_t(count), GemmShape{h.m(), h.n(), h.k()});
  }
  auto spec = std::make_shared<BatchSpec>(
      make_batch_spec(group ? BatchKind::kGroup : BatchKind::kStrided, shapes, out->op_a, out->op_b));
  if (!h.a_handle().empty()) share_batch_operand(*spec, MatrixId::kA);
  if (!h.b_handle().empty()) share_batch_operand(*spec, MatrixId::kB);
  spec->fail_fast = h.fail_fast();
  spec->check_finite = h.check_finite();
  if (group) out->shape = shapes.front();  // the first product's, for logs; every product is in the spec
  out->batch = std::move(spec);
  return Status::Ok();
}

Status check_batch_limits(const GemmRequest& r, const RequestLimits& limits, bool c_in_caller_memory) {
  const BatchSpec& spec = *r.batch;
  const std::string products = std::to_string(spec.count()) + " products";
  const std::pair<const char*, int64_t> operands[] = {
      {"A", spec.a_elements}, {"B", spec.b_elements}, {"C", spec.c_elements}};
  for (const auto& [name, elements] : operands)
    if (elements > limits.max_matrix_elements)
      return ResourceExhausted(std::string("the concatenated ") + name + " of the " + products + " holds " +
                               std::to_string(elements) + " elements, over the server's limit of " +
                               std::to_string(limits.max_matrix_elements) +
                               " per matrix (--max-matrix-elements); send fewer products per request");
  // A C written into the caller's region costs the server nothing.
  if (limits.max_output_ratio <= 0 || c_in_caller_memory) return Status::Ok();
  const __int128 c_bytes = __int128(spec.c_elements) * 4;
  const __int128 in_bytes = (__int128(spec.a_elements) + spec.b_elements + (r.has_c ? spec.c_elements : 0)) * 4;
  if (c_bytes <= limits.output_floor_bytes || c_bytes <= in_bytes * limits.max_output_ratio) return Status::Ok();
  return ResourceExhausted("the " + products + "' C is " + std::to_string(int64_t(c_bytes)) + " bytes from " +
                           std::to_string(int64_t(in_bytes)) +
                           " bytes of inputs: the server holds an output of at most " +
                           std::to_string(limits.max_output_ratio) + " times its inputs (--max-output-ratio) or " +
                           std::to_string(limits.output_floor_bytes) + " bytes (--output-floor-bytes)");
}

int64_t request_matrix_elements(const GemmRequest& r, MatrixId matrix) {
  if (!r.batch) return matrix_elements(r.shape, matrix);
  switch (matrix) {
    case MatrixId::kA:
      return r.batch->a_elements;
    case MatrixId::kB:
      return r.batch->b_elements;
    case MatrixId::kC:
      return r.batch->c_elements;
  }
  return 0;
}

int64_t c_row_elements(const GemmRequest& r) { return r.batch ? 1 : r.shape.n; }

std::string batch_timing_json(const GemmRequest& r, const GemmReport& report) {
  if (!r.batch) return "";
  int64_t failed = 0;
  for (const Status& st : report.product_status) failed += st.ok() ? 0 : 1;
  char flops[64];
  std::snprintf(flops, sizeof flops, "%.6g", r.batch->flops());
  return std::string(",\"batch\":{\"kind\":\"") + (r.batch->kind == BatchKind::kStrided ? "strided" : "group") +
         "\",\"products\":" + std::to_string(r.batch->count()) + ",\"products_failed\":" + std::to_string(failed) +
         ",\"flops\":" + flops + "}";
}

void products_to_proto(const GemmReport& report, const BatchSpec* spec, v1::MultiplySummary* sum) {
  if (!spec) return;
  int failed = 0;
  for (std::size_t i = 0; i < report.product_status.size() && i < spec->products.size(); ++i) {
    const Status& st = report.product_status[i];
    v1::ProductStatus* p = sum->add_products();
    p->set_index(int32_t(i));
    p->set_code(int32_t(st.code()));
    if (!st.ok()) {
      p->set_message(st.message());
      ++failed;
    }
    p->set_c_offset(spec->products[i].c_offset);
    p->set_c_elements(spec->products[i].c_elements());
  }
  sum->set_products_failed(failed);
}

}  // namespace sgemm
