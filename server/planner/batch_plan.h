// How a batch of products (server/engine/batch.h) is spread over GPUs: whole
// products, each GPU a contiguous range of them (so its operands are one
// contiguous slice of each concatenated matrix, copied in one piece), the
// ranges balanced by work. Pure C++, no CUDA.
#pragma once

#include <cstdint>
#include <vector>

namespace sgemm {

struct ProductRange {
  int64_t begin = 0, end = 0;  // products [begin, end)
  friend bool operator==(const ProductRange&, const ProductRange&) = default;
};

// At most `devices` non-empty ranges covering products [0, work.size()) in
// order, where `work[i]` is product i's cost (its flops; any non-negative
// figure). Each range ends at the first product where its running work reaches
// its share of the remaining work over the remaining devices, so no range is
// empty while products remain and a single huge product gets a device of its
// own. Fewer products than devices: one range per product. Empty `work`: none.
std::vector<ProductRange> split_products(const std::vector<double>& work, int devices);

}  // namespace sgemm
