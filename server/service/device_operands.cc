#include "server/service/device_operands.h"

#include <limits>

#include "server/service/device_handles.h"
#include "server/service/region_operands.h"

namespace sgemm {

namespace {

std::optional<DeviceRef> ref_from(bool present, const v1::DeviceBufferRef& r) {
  if (!present) return std::nullopt;
  return DeviceRef{r.ipc_handle(), r.device(), r.offset(), r.ld(), r.release()};
}

// The checks of one ref that need no open allocation.
Status check_ref(const std::string& field, const DeviceRef& ref, int64_t rows, int64_t cols, int64_t max_ld) {
  if (ref.ipc_handle.size() != kIpcHandleBytes)
    return InvalidArgument(field + ".ipc_handle has " + std::to_string(ref.ipc_handle.size()) +
                           " bytes; a CUDA IPC handle (cudaIpcMemHandle_t, from cudaIpcGetMemHandle) has " +
                           std::to_string(kIpcHandleBytes));
  if (ref.device.empty())
    return InvalidArgument(field +
                           ".device is empty: name the GPU holding the buffer by its UUID (\"GPU-...\", nvidia-smi "
                           "-L) or PCI bus id (\"0000:17:00.0\")");
  // The span is checked against the allocation once it is open.
  return check_region_layout(field, "", std::numeric_limits<int64_t>::max(), rows, cols, ref.offset, ref.ld, max_ld)
      .status();
}

// One operand resolved inside its opened allocation.
StatusOr<DeviceMatrix> bind_one(DeviceHandleRegistry& registry, const DeviceCaller& caller, const std::string& field,
                                const DeviceRef& ref, int64_t rows, int64_t cols, int64_t max_ld) {
  SGEMM_ASSIGN_OR_RETURN(std::shared_ptr<const OpenedDeviceMemory> memory, registry.acquire(caller, field, ref));
  SGEMM_ASSIGN_OR_RETURN(const int64_t ld,
                         check_region_layout(field, "device allocation on GPU " + ref.device, memory->bytes(), rows,
                                             cols, ref.offset, ref.ld, max_ld));
  return DeviceMatrix{std::move(memory), ref.offset, ld};
}

// The byte range [first, last) a rows x cols matrix spans in its allocation.
std::pair<int64_t, int64_t> span_of(const DeviceMatrix& x, int64_t rows, int64_t cols) {
  return {x.offset, x.offset + 4 * ((rows - 1) * x.ld + cols)};
}

bool overlaps(const DeviceMatrix& x, int64_t xr, int64_t xc, const DeviceMatrix& y, int64_t yr, int64_t yc) {
  if (x.memory != y.memory) return false;
  const auto [x0, x1] = span_of(x, xr, xc);
  const auto [y0, y1] = span_of(y, yr, yc);
  return x0 < y1 && y0 < x1;
}

}  // namespace

DeviceRefs device_refs_from_proto(const v1::GemmHeader& h) {
  DeviceRefs refs;
  refs.a = ref_from(h.has_a_device(), h.a_device());
  refs.b = ref_from(h.has_b_device(), h.b_device());
  refs.c = ref_from(h.has_c_device(), h.c_device());
  refs.out = ref_from(h.has_out_device(), h.out_device());
  return refs;
}

Status check_device_refs(const GemmRequest& request, const DeviceRefs& refs, int stripes,
                         const std::string& other_sources, int64_t max_ld) {
  if (!refs.any()) return Status::Ok();
  if (!other_sources.empty())
    return InvalidArgument("a header that names device buffers (header.a_device ...) cannot also name " +
                           other_sources);
  if (!refs.a || !refs.b)
    return InvalidArgument(
        "a header that names device buffers must name both header.a_device and header.b_device (no chunks follow "
        "it)");
  if (request.has_c && !refs.c)
    return InvalidArgument("header.has_c is set with A and B in device buffers: name C's buffer in header.c_device");
  if (!request.has_c && refs.c)
    return InvalidArgument("header.c_device is set but header.has_c is not (set has_c to use C as input)");
  if (request.op_a != Op::kN)
    return InvalidArgument("header.op_a: device-buffer operands are untransposed (OP_N); transpose on the GPU first");
  if (request.op_b != Op::kN)
    return InvalidArgument("header.op_b: device-buffer operands are untransposed (OP_N); transpose on the GPU first");
  if (stripes > 1)
    return InvalidArgument("header.stripes " + std::to_string(stripes) +
                           ": a request on device buffers carries no chunks, so it has one stream");
  const GemmShape& s = request.shape;
  SGEMM_RETURN_IF_ERROR(check_ref("header.a_device", *refs.a, s.m, s.k, max_ld));
  SGEMM_RETURN_IF_ERROR(check_ref("header.b_device", *refs.b, s.k, s.n, max_ld));
  if (refs.c) SGEMM_RETURN_IF_ERROR(check_ref("header.c_device", *refs.c, s.m, s.n, max_ld));
  if (refs.out) SGEMM_RETURN_IF_ERROR(check_ref("header.out_device", *refs.out, s.m, s.n, max_ld));
  return Status::Ok();
}

StatusOr<DeviceOperands> bind_device_operands(DeviceHandleRegistry& registry, const DeviceCaller& caller,
                                              const GemmRequest& request, const DeviceRefs& refs, int64_t max_ld) {
  if (!refs.a || !refs.b) return Internal("device operands bound without A and B");
  const GemmShape& s = request.shape;
  DeviceOperands ops;
  SGEMM_ASSIGN_OR_RETURN(ops.a, bind_one(registry, caller, "header.a_device", *refs.a, s.m, s.k, max_ld));
  SGEMM_ASSIGN_OR_RETURN(ops.b, bind_one(registry, caller, "header.b_device", *refs.b, s.k, s.n, max_ld));
  if (refs.c) {
    SGEMM_ASSIGN_OR_RETURN(ops.c, bind_one(registry, caller, "header.c_device", *refs.c, s.m, s.n, max_ld));
  }
  if (refs.out) {
    SGEMM_ASSIGN_OR_RETURN(ops.out, bind_one(registry, caller, "header.out_device", *refs.out, s.m, s.n, max_ld));
    // C in place is fine (each element is read once before it is written); a
    // partial overlap of the output with an input is not.
    if (overlaps(*ops.out, s.m, s.n, ops.a, s.m, s.k) || overlaps(*ops.out, s.m, s.n, ops.b, s.k, s.n))
      return InvalidArgument("header.out_device overlaps A or B: the output may share bytes only with C (in place)");
    const bool in_place =
        ops.c && ops.c->memory == ops.out->memory && ops.c->offset == ops.out->offset && ops.c->ld == ops.out->ld;
    if (ops.c && !in_place && overlaps(*ops.out, s.m, s.n, *ops.c, s.m, s.n))
      return InvalidArgument(
          "header.out_device overlaps C without being exactly C (same allocation, offset and ld): C in place must "
          "name the same bytes");
  }
  return ops;
}

}  // namespace sgemm
