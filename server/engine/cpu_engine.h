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
};

std::unique_ptr<Engine> make_cpu_engine(const CpuEngineOptions& options);

}  // namespace sgemm
