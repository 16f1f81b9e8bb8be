#include "server/engine/cpu_batch.h"

#include <cblas.h>

#include <chrono>
#include <string>

namespace sgemm {
namespace {

CBLAS_TRANSPOSE cblas_op(Op op) { return op == Op::kT ? CblasTrans : CblasNoTrans; }

}  // namespace

Status validate_cpu_batch(const GemmRequest& r, int64_t max_blas_int) {
  SGEMM_RETURN_IF_ERROR(check_batch_request(r));
  if (r.options.kernel && *r.options.kernel != KernelKind::kOpenblas)
    return FailedPrecondition("kernel '" + std::string(kernel_kind_name(*r.options.kernel)) +
                              "' needs the cuda backend; this server runs the cpu backend (OpenBLAS)");
  const BatchSpec& spec = *r.batch;
  for (std::size_t i = 0; i < spec.products.size(); ++i) {
    const GemmShape& s = spec.products[i].shape;
    for (auto [dim, v] : {std::pair{'m', s.m}, std::pair{'n', s.n}, std::pair{'k', s.k}})
      if (v > max_blas_int)
        return InvalidArgument(batch_shape_field(spec, i, dim) + " = " + std::to_string(v) +
                               " is over the cpu backend's limit of " + std::to_string(max_blas_int) +
                               " (OpenBLAS's index type)");
    if (spec.kind == BatchKind::kStrided) break;
  }
  return Status::Ok();
}

StatusOr<GemmReport> run_cpu_batch(const GemmJob& job, const std::string& device_name) {
  const GemmRequest& r = job.request;
  const BatchSpec& spec = *r.batch;
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  const auto origin = job.origin.value_or(t0);
  auto ms_since_origin = [&](Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(t - origin).count();
  };
  // Without an input C the buffer holds nothing yet: beta must not read it.
  const float beta = r.has_c ? r.beta : 0.0f;
  GemmReport report;
  report.product_status.assign(spec.products.size(), Status::Ok());
  // Every product's inputs first, as the CUDA engine does: with fail_fast a
  // bad product fails the request before any C is computed (or sent).
  int failed = 0;
  if (spec.check_finite)
    for (std::size_t i = 0; i < spec.products.size(); ++i) {
      Status finite = check_product_finite(job, i);
      if (finite.ok()) continue;
      if (spec.fail_fast) return finite;
      report.product_status[i] = std::move(finite);
      ++failed;
    }
  double kernel_ms = 0;
  for (std::size_t i = 0; i < spec.products.size(); ++i) {
    if (job.cancel) SGEMM_RETURN_IF_ERROR(job.cancel->status());
    if (!report.product_status[i].ok()) continue;  // left out by check_finite
    const BatchProduct& p = spec.products[i];
    const GemmShape& s = p.shape;
    const int64_t lda = stored_a_dims(s, r.op_a).cols, ldb = stored_b_dims(s, r.op_b).cols;
    const auto k0 = Clock::now();
    cblas_sgemm(CblasRowMajor, cblas_op(r.op_a), cblas_op(r.op_b), blasint(s.m), blasint(s.n), blasint(s.k), r.alpha,
                job.a + p.a_offset, blasint(lda), job.b + p.b_offset, blasint(ldb), beta, job.c + p.c_offset,
                blasint(s.n));
    kernel_ms += std::chrono::duration<double, std::milli>(Clock::now() - k0).count();
    count_kernel_launches(&report.kernel_rows, kernel_kind_name(KernelKind::kOpenblas));
    // The sink counts elements of the concatenated C (batch.h).
    if (job.sink) job.sink->rows_ready(p.c_offset, p.c_offset + p.c_elements());
  }
  const auto t1 = Clock::now();
  report.backend = "cpu";
  report.kernel = KernelKind::kOpenblas;
  report.kernel_row = std::string(kernel_kind_name(KernelKind::kOpenblas));
  report.precision = Precision::kFp32;
  report.split = SplitMode::kSingle;
  report.plan_reason = std::string("cpu backend: ") +
                       (spec.kind == BatchKind::kStrided ? "a strided batch of " + std::to_string(spec.count()) +
                                                               " products of " + gemm_shape_text(spec.products[0].shape)
                                                         : "a group of " + std::to_string(spec.count()) + " products") +
                       ", one cblas_sgemm each on the host";
  if (failed > 0) report.plan_reason += "; " + std::to_string(failed) + " not computed (see their status)";
  if (r.options.precision != Precision::kFp32)
    report.plan_reason += std::string("; precision ") + std::string(precision_name(r.options.precision)) +
                          " requested: the cpu backend computes fp32 (at least as accurate)";
  DeviceTiming t;
  t.device = -1;
  t.name = device_name;
  t.shard = {-1, 0, spec.count(), 0, 0};  // products [0, count)
  t.kernel_ms = kernel_ms;
  t.steps.push_back(Step{.kind = StepKind::kKernel,
                         .start_ms = ms_since_origin(t0),
                         .end_ms = ms_since_origin(t1),
                         .bytes = 0,
                         .row_begin = 0,
                         .row_end = spec.count(),
                         .k_begin = 0,
                         .k_end = 0});
  report.devices.push_back(std::move(t));
  return report;
}

}  // namespace sgemm
