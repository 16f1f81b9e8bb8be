// Host side of the TMA (bulk tensor copy) kernels: building CUtensorMap descriptors
// through the runtime's driver entry point, so nothing links libcuda. Shared by the
// fp32x3 launchers (fp32x3_sgemm.cu) and the TMA-fed SIMT SGEMM (tma_simt_sgemm.cu).
#pragma once

#include <cuda.h>          // CUtensorMap and its enums (types only)
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled

#include <cstdint>

#include "common/status.h"

namespace sgemm {

// cuTensorMapEncodeTiled, looked up once per process; UNAVAILABLE when the driver lacks it.
StatusOr<PFN_cuTensorMapEncodeTiled_v12000> tensor_map_encode_fn();

// A 2-D fp32 tensor map over a row-major matrix of `rows` x `cols` (row pitch `ld` floats)
// with a box of box_rows x box_cols; the TMA zero-fills whatever of a box lies outside the
// matrix. Needs a 16-byte aligned base, ld % 4 == 0 and ld * 4 < 2^40; INTERNAL (naming
// `what`) when the driver refuses the descriptor.
Status make_tensor_map_2d(CUtensorMap* map, const float* base, int64_t rows, int64_t cols, int64_t ld, int box_rows,
                          int box_cols, CUtensorMapSwizzle swizzle, const char* what);

}  // namespace sgemm
