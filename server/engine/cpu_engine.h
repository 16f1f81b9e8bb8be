// The CPU engine: OpenBLAS through CBLAS. The fallback when no GPU is usable
// (`--backend cpu`, or `auto` on a host without one). Computes C in blocks of
// rows and reports each block as it is done, so the service streams early
// rows while later ones are computed.
//
// Threads: run() may be called concurrently (from the service's compute pool);
// products are serialised on one mutex because OpenBLAS already uses every
// core for one product. A job waiting for that mutex, or between row blocks,
// stops when its CancelToken is cancelled.
#pragma once

#include <memory>

#include "server/engine/engine.h"

namespace sgemm {

struct CpuEngineOptions {
  int threads = 0;               // OpenBLAS threads; 0 = OpenBLAS's default (all cores)
  int64_t rows_per_block = 256;  // rows of C computed (and reported) per BLAS call
  // Host memory for resident matrices (docs/resident.md, --resident-bytes):
  // 1 GiB; matrices are kept in the buffers they were received into.
  int64_t resident_bytes = int64_t{1} << 30;
};

std::unique_ptr<Engine> make_cpu_engine(const CpuEngineOptions& options);

}  // namespace sgemm
