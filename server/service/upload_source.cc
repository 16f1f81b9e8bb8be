#include <tuple>

#include "server/service/input_source.h"

namespace sgemm {

Status UploadSource::bind(const SourceContext& ctx, GemmJob& job) {
  receives_[static_cast<int>(MatrixId::kA)] = !job.a && !job.a_resident;
  receives_[static_cast<int>(MatrixId::kB)] = !job.b && !job.b_resident;
  receives_[static_cast<int>(MatrixId::kC)] = ctx.header.has_c && !job.c_resident;
  // What another row provides counts as complete; a chunk for it is refused
  // (an undeclared C is the assembler's own refusal).
  for (MatrixId m : {MatrixId::kA, MatrixId::kB, MatrixId::kC})
    if (!provides(m) && assembler_->declared(m)) assembler_->mark_provided(m);
  return Status::Ok();
}

int64_t UploadSource::footprint(const GemmShape& shape) const {
  int64_t elements = 0;
  for (MatrixId m : {MatrixId::kA, MatrixId::kB})
    if (provides(m)) elements += matrix_elements(shape, m);
  return elements * int64_t(sizeof(float));
}

StatusOr<std::vector<std::unique_ptr<InputSource>>> make_input_sources(const RegionOperands& regions,
                                                                       const ResidentOperands& resident,
                                                                       const DeviceRefs& device,
                                                                       MatrixAssembler* assembler) {
  if (regions.any() && resident.any())
    return InvalidArgument("a Multiply header names shared-memory regions and resident handles; use one or the other");
  if (device.any() && (regions.any() || resident.any()))
    return InvalidArgument(
        "a Multiply header names device buffers (header.a_device ...) and regions or resident handles; use one");
  for (auto [at, handle, name] : {std::tuple{bool(resident.a_at), resident.a.empty(), "a"},
                                  std::tuple{bool(resident.b_at), resident.b.empty(), "b"},
                                  std::tuple{bool(resident.c_at), resident.c.empty(), "c"}})
    if (at && handle)
      return InvalidArgument(std::string("header.") + name + "_at is set but header." + name +
                             "_handle is not: a submatrix offset applies to a resident matrix only (a region's "
                             "offset and ld say the same for regions)");
  std::vector<std::unique_ptr<InputSource>> rows;
  if (regions.any()) {
    rows.push_back(std::make_unique<RegionSource>(regions));
    return rows;  // the regions hold A and B (and C when has_c): nothing is uploaded
  }
  if (device.any()) {
    rows.push_back(std::make_unique<DeviceSource>(device));
    return rows;  // so do device buffers
  }
  if (resident.named()) rows.push_back(std::make_unique<ResidentSource>(resident));
  rows.push_back(std::make_unique<UploadSource>(assembler));
  return rows;
}

}  // namespace sgemm
