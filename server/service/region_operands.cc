#include "server/service/region_operands.h"

#include <cstring>
#include <limits>

namespace sgemm {

namespace {

std::optional<RegionRef> ref_from(bool present, const v1::RegionRef& r) {
  if (!present) return std::nullopt;
  return RegionRef{r.region(), r.offset(), r.ld()};
}

// Resolves one matrix of rows x cols: its region, its first byte, its ld.
Status bind_one(const RegionRegistry& registry, const RegionCaller& caller, const char* field, const RegionRef& ref,
                int64_t rows, int64_t cols, int64_t max_ld, std::vector<std::shared_ptr<const MappedRegion>>* held,
                char** ptr, int64_t* ld) {
  const std::string f = std::string("header.") + field;
  if (ref.region.empty()) return InvalidArgument(f + ".region is empty: name a registered region");
  auto acquired = registry.acquire(caller, ref.region);
  if (!acquired.ok()) return acquired.status().with_context(f);  // which operand names the region
  std::shared_ptr<const MappedRegion> r = std::move(acquired).value();
  SGEMM_ASSIGN_OR_RETURN(*ld, check_region_layout(f, ref.region, r->bytes(), rows, cols, ref.offset, ref.ld, max_ld));
  *ptr = r->data() + ref.offset;
  held->push_back(std::move(r));
  return Status::Ok();
}

}  // namespace

StatusOr<int64_t> check_region_layout(const std::string& field, const std::string& region, int64_t region_bytes,
                                      int64_t rows, int64_t cols, int64_t offset, int64_t ld, int64_t max_ld) {
  if (offset < 0 || offset % 4 != 0)
    return InvalidArgument(field + ".offset " + std::to_string(offset) +
                           " must be >= 0 and a multiple of 4 (fp32 elements)");
  if (ld < 0 || (ld != 0 && ld < cols))
    return InvalidArgument(field + ".ld " + std::to_string(ld) + " is less than the matrix's width " +
                           std::to_string(cols) + " (0 = dense)");
  const int64_t resolved = ld ? ld : cols;
  // Checked even for one row (where the ld does not move the span): the
  // engine hands it to a library that indexes with a narrower integer.
  if (resolved > max_ld)
    return InvalidArgument(field + ".ld " + std::to_string(resolved) + " is over this server's limit of " +
                           std::to_string(max_ld) + " elements (the index type of its backend's libraries)");
  // Bytes the matrix spans (the last row needs only its width), in 128 bits:
  // no int64 the wire carries overflows it.
  const __int128 span = 4 * ((__int128(rows) - 1) * resolved + cols);
  if (__int128(offset) + span > region_bytes)
    return InvalidArgument(field + ": a " + std::to_string(rows) + " x " + std::to_string(cols) + " matrix with ld " +
                           std::to_string(resolved) + " at offset " + std::to_string(offset) + " overruns region '" +
                           region + "' of " + std::to_string(region_bytes) + " bytes");
  return resolved;
}

RegionOperands region_operands_from_proto(const v1::GemmHeader& h) {
  RegionOperands ops;
  ops.a = ref_from(h.has_a_region(), h.a_region());
  ops.b = ref_from(h.has_b_region(), h.b_region());
  ops.c = ref_from(h.has_c_region(), h.c_region());
  ops.out = ref_from(h.has_out_region(), h.out_region());
  return ops;
}

StatusOr<BoundOperands> bind_region_operands(const RegionRegistry& registry, const RegionCaller& caller,
                                             const GemmRequest& request, const RegionOperands& ops, int64_t max_ld) {
  if (!caller.unix_socket) return regions_need_unix_socket("a Multiply naming shared-memory regions");
  if (!ops.a || !ops.b)
    return InvalidArgument(
        "a header that names regions must name both header.a_region and header.b_region (no chunks follow it)");
  if (request.has_c && !ops.c)
    return InvalidArgument("header.has_c is set with A and B in regions: name C's region in header.c_region");
  if (!request.has_c && ops.c)
    return InvalidArgument("header.c_region is set but header.has_c is not (set has_c to use C as input)");
  // A and B as stored: transposed under op = t (their widths bound the ld).
  // A batch's operand is every product's matrix, dense, one after another
  // (batch.h): one row of that many elements, which no ld indexes.
  MatrixDims ad = request.a_dims(), bd = request.b_dims(), cd{request.shape.m, request.shape.n};
  if (request.batch) {
    ad = {1, request.batch->a_elements};
    bd = {1, request.batch->b_elements};
    cd = {1, request.batch->c_elements};
    max_ld = std::numeric_limits<int64_t>::max();
  }
  BoundOperands b;
  b.c_rows = cd.rows;
  b.c_cols = cd.cols;
  char* p = nullptr;
  // For a batch the message says what the "1 x N matrix" is.
  auto bind = [&](const char* field, const RegionRef& ref, const MatrixDims& d, int64_t* ld) -> Status {
    Status st = bind_one(registry, caller, field, ref, d.rows, d.cols, max_ld, &b.held, &p, ld);
    if (st.ok() || !request.batch) return st;
    return Status(st.code(), st.message() + " (a batch's operand: its " + std::to_string(request.batch->count()) +
                                 " products' matrices concatenated, " + std::to_string(d.cols) + " elements)");
  };
  SGEMM_RETURN_IF_ERROR(bind("a_region", *ops.a, ad, &b.lda));
  b.a = reinterpret_cast<const float*>(p);
  SGEMM_RETURN_IF_ERROR(bind("b_region", *ops.b, bd, &b.ldb));
  b.b = reinterpret_cast<const float*>(p);
  if (ops.c) {
    SGEMM_RETURN_IF_ERROR(bind("c_region", *ops.c, cd, &b.ldc_in));
    b.c_in = reinterpret_cast<const float*>(p);
  }
  if (ops.out) {
    SGEMM_RETURN_IF_ERROR(bind("out_region", *ops.out, cd, &b.ld_out));
    b.out = reinterpret_cast<float*>(p);
    // C in place is fine (each element is read once before it is written); a
    // partial overlap of the output with an input is not.
    const char* o0 = p;
    const char* o1 = p + 4 * ((cd.rows - 1) * b.ld_out + cd.cols);
    auto overlaps = [&](const float* x, int64_t rows, int64_t ld, int64_t cols) {
      const char* x0 = reinterpret_cast<const char*>(x);
      const char* x1 = x0 + 4 * ((rows - 1) * ld + cols);
      return x0 < o1 && o0 < x1;
    };
    if (overlaps(b.a, ad.rows, b.lda, ad.cols) || overlaps(b.b, bd.rows, b.ldb, bd.cols))
      return InvalidArgument("header.out_region overlaps A or B: the output may share bytes only with C (in place)");
    if (b.c_in && !b.c_in_place() && overlaps(b.c_in, cd.rows, b.ldc_in, cd.cols))
      return InvalidArgument(
          "header.out_region overlaps C without being exactly C (same region, offset and ld): C in place must "
          "name the same bytes");
  }
  return b;
}

void copy_matrix(float* dst, int64_t ld_dst, const float* src, int64_t ld_src, int64_t rows, int64_t cols) {
  if (ld_dst == cols && ld_src == cols) {
    std::memmove(dst, src, std::size_t(rows * cols) * sizeof(float));
    return;
  }
  for (int64_t i = 0; i < rows; ++i)
    std::memmove(dst + i * ld_dst, src + i * ld_src, std::size_t(cols) * sizeof(float));
}

}  // namespace sgemm
