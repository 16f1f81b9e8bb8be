// The CPU engine's batched and grouped products (server/engine/batch.h): one
// cblas_sgemm per product, in product order, each product's C reported to the
// sink as soon as it is computed. Called by CpuEngine with its product mutex
// held (OpenBLAS already uses every core for one product).
#pragma once

#include <cstdint>
#include <string>

#include "server/engine/engine.h"

namespace sgemm {

// check_batch_request() and OpenBLAS's limits: every dimension a blasint
// (`max_blas_int`), no kernel but openblas named.
Status validate_cpu_batch(const GemmRequest& request, int64_t max_blas_int);

// Runs every product of job.request.batch; `device_name` names the CPU in the
// report. Stops with the job's cancel status between products.
StatusOr<GemmReport> run_cpu_batch(const GemmJob& job, const std::string& device_name);

}  // namespace sgemm
