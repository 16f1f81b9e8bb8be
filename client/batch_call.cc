#include "client/batch_call.h"

#include <algorithm>
#include <limits>
#include <string>

namespace sgemm {

std::vector<GemmShape> BatchProducts::shapes() const {
  if (!group.empty()) return group;
  return std::vector<GemmShape>(std::size_t(std::max<int64_t>(count, 0)), shape);
}

BatchLayout batch_layout(const BatchProducts& batch) {
  BatchLayout l;
  for (const GemmShape& s : batch.shapes()) {
    // A stored operand has as many elements transposed as not.
    l.a_offset.push_back(l.a_elements);
    l.b_offset.push_back(l.b_elements);
    l.c_offset.push_back(l.c_elements);
    l.a_elements += s.m * s.k;
    l.b_elements += s.k * s.n;
    l.c_elements += s.m * s.n;
  }
  return l;
}

namespace batch_call {

Status set_batch_fields(const BatchProducts& batch, v1::GemmHeader* h) {
  if (batch.count > 0 && !batch.group.empty())
    return InvalidArgument("BatchProducts: set count (a strided batch) or group (shapes), not both");
  if (batch.count <= 0 && batch.group.empty())
    return InvalidArgument("BatchProducts: a batch needs count >= 1 or a non-empty group");
  if (batch.count > 0) {
    h->set_m(batch.shape.m);
    h->set_n(batch.shape.n);
    h->set_k(batch.shape.k);
    // Past int32 the server's bound refuses it anyway; clamp so it is refused, not wrapped.
    h->set_batch(int32_t(std::min<int64_t>(batch.count, std::numeric_limits<int32_t>::max())));
  } else {
    for (const GemmShape& s : batch.group) {
      v1::ProductShape* p = h->add_group();
      p->set_m(s.m);
      p->set_n(s.n);
      p->set_k(s.k);
    }
  }
  h->set_fail_fast(batch.fail_fast);
  h->set_check_finite(batch.check_finite);
  return Status::Ok();
}

StatusOr<std::vector<ProductResult>> products_from_proto(const v1::MultiplySummary& s, const BatchLayout& layout,
                                                         int64_t c_bytes_received, bool c_sent) {
  const std::size_t count = layout.c_offset.size();
  if (std::size_t(s.products_size()) != count)
    return Internal("the server reported " + std::to_string(s.products_size()) + " product statuses for " +
                    std::to_string(count) + " products");
  std::vector<ProductResult> out;
  out.reserve(count);
  int64_t ok_elements = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const v1::ProductStatus& p = s.products(int(i));
    const int64_t c_elements = (i + 1 < count ? layout.c_offset[i + 1] : layout.c_elements) - layout.c_offset[i];
    if (p.index() != int32_t(i) || p.c_offset() != layout.c_offset[i] || p.c_elements() != c_elements)
      return Internal("the server's status of product " + std::to_string(i) + " names index " +
                      std::to_string(p.index()) + " at C offset " + std::to_string(p.c_offset()) + " (" +
                      std::to_string(p.c_elements()) + " elements); expected offset " +
                      std::to_string(layout.c_offset[i]) + " (" + std::to_string(c_elements) + ")");
    ProductResult r;
    r.index = int(i);
    r.status = p.code() == 0 ? Status::Ok() : Status(StatusCode(p.code()), p.message());
    r.c_offset = layout.c_offset[i];
    r.c_elements = c_elements;
    if (r.status.ok()) ok_elements += c_elements;
    out.push_back(std::move(r));
  }
  if (c_bytes_received != (c_sent ? ok_elements : 0) * int64_t(sizeof(float)))
    return Internal("the server sent " + std::to_string(c_bytes_received / 4) +
                    " elements of C; its products that "
                    "succeeded hold " +
                    std::to_string(ok_elements));
  return out;
}

}  // namespace batch_call
}  // namespace sgemm
