#include "server/engine/cpu_engine.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "server/engine/cpu_batch.h"

namespace sgemm {
namespace {

// A resident matrix on the CPU engine: the host buffer it was received into.
class HostResident final : public ResidentData {
 public:
  HostResident(std::shared_ptr<HostBuffer> buffer, int64_t rows, ResidentBytes bytes)
      : buffer_(std::move(buffer)), rows_(rows), bytes_(std::move(bytes)) {}
  Layout layout() const override { return whole_on(-1, rows_); }
  const float* floats() const { return buffer_->floats(); }

 private:
  std::shared_ptr<HostBuffer> buffer_;
  int64_t rows_;
  ResidentBytes bytes_;
};

// The host matrix of a resident operand (null when it is not resident),
// advanced to the submatrix at `at`; *ld gets the matrix's width.
const float* host_matrix(const ResidentMatrix* m, const MatrixOffset& at, std::shared_ptr<ResidentData>* hold,
                         int64_t* ld) {
  if (!m) return nullptr;
  *hold = m->data();
  const auto* h = dynamic_cast<const HostResident*>(hold->get());
  if (!h) return nullptr;
  *ld = m->cols;
  return h->floats() + at.row * m->cols + at.col;
}

CBLAS_TRANSPOSE cblas_op(Op op) { return op == Op::kT ? CblasTrans : CblasNoTrans; }

// OpenBLAS's index type: 32-bit int unless the library was built with 64-bit indices.
constexpr int64_t kMaxBlasInt = int64_t(std::numeric_limits<blasint>::max());

// The arguments of one cblas_sgemm (row-major) before the call: OpenBLAS
// refuses bad ones only on stderr (xerbla) and returns, leaving C unwritten,
// so a request that reached here with one would answer OK with a wrong C.
// validate() and the service's layout checks keep them out; one getting
// through is our bug (INTERNAL naming the argument). `a_cols` and `b_cols` are
// the stored widths (k or m for A, n or k for B), which lda and ldb must cover.
Status check_sgemm_args(int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc, int64_t a_cols,
                        int64_t b_cols) {
  const std::pair<const char*, int64_t> args[] = {{"M", m},     {"N", n},     {"K", k},
                                                  {"lda", lda}, {"ldb", ldb}, {"ldc", ldc}};
  for (const auto& [name, v] : args)
    if (v < 1 || v > kMaxBlasInt)
      return Internal(std::string("cblas_sgemm argument ") + name + " = " + std::to_string(v) + " is outside [1, " +
                      std::to_string(kMaxBlasInt) + "] (OpenBLAS's blasint)");
  if (lda < a_cols || ldb < b_cols || ldc < n)
    return Internal("cblas_sgemm leading dimensions lda " + std::to_string(lda) + ", ldb " + std::to_string(ldb) +
                    ", ldc " + std::to_string(ldc) + " are narrower than the stored widths " + std::to_string(a_cols) +
                    " / " + std::to_string(b_cols) + " / " + std::to_string(n));
  return Status::Ok();
}

class CpuEngine final : public Engine {
 public:
  explicit CpuEngine(const CpuEngineOptions& options)
      : options_(options), store_(ResidentStoreOptions{options.resident_bytes, {-1}}) {
    if (options_.threads > 0) openblas_set_num_threads(options_.threads);
    name_ = "cpu (OpenBLAS, " + std::to_string(openblas_get_num_threads()) + " threads)";
  }

  EngineInfo info() const override {
    EngineInfo info;
    info.backend = "cpu";
    DeviceInfo d;
    d.index = -1;
    d.name = name_;
    d.sm_count = int(std::thread::hardware_concurrency());
    info.devices.push_back(d);
    info.kernels = {KernelKind::kOpenblas};
    info.default_kernel = KernelKind::kOpenblas;
    info.precisions = {Precision::kFp32};  // tf32 and fp32x3 requests are computed in fp32 (run() says so)
    info.contracts = {PrecisionContractInfo{Precision::kFp32, {KernelKind::kOpenblas}}};
    return info;
  }

  HostAllocator& host_allocator() override { return allocator_; }
  int64_t max_leading_dimension() const override { return kMaxBlasInt; }
  ResidentStore* resident_store() override { return &store_; }
  // OpenBLAS computes in host memory: device buffers need the cuda backend.
  DeviceMemoryAccess* device_memory() override { return nullptr; }

  // OpenBLAS reads and writes host memory where it is: nothing to lock.
  Status register_host_memory(void* data, std::size_t bytes) override {
    if (!data || bytes == 0) return InvalidArgument("register_host_memory: an empty range");
    return Status::Ok();
  }
  Status unregister_host_memory(void* /*data*/) override { return Status::Ok(); }

  StatusOr<std::shared_ptr<ResidentData>> make_resident(std::shared_ptr<HostBuffer> host, int64_t rows, int64_t cols,
                                                        ResidentBytes bytes) override {
    if (!host || int64_t(host->bytes()) < rows * cols * int64_t(sizeof(float)))
      return Internal("make_resident: the host buffer is smaller than the matrix");
    return std::shared_ptr<ResidentData>(std::make_shared<HostResident>(std::move(host), rows, std::move(bytes)));
  }

  Status validate(const GemmRequest& r) const override {
    if (r.batch) return validate_cpu_batch(r, kMaxBlasInt);
    SGEMM_RETURN_IF_ERROR(check_gemm_request(r));
    const ExecOptions& options = r.options;
    if (options.kernel && *options.kernel != KernelKind::kOpenblas)
      return FailedPrecondition("kernel '" + std::string(kernel_kind_name(*options.kernel)) +
                                "' needs the cuda backend; this server runs the cpu backend (OpenBLAS)");
    // Every dimension goes to OpenBLAS as a blasint.
    for (auto [name, v] : {std::pair{"m", r.shape.m}, std::pair{"n", r.shape.n}, std::pair{"k", r.shape.k}})
      if (v > kMaxBlasInt)
        return InvalidArgument(std::string("header.") + name + " = " + std::to_string(v) +
                               " is over the cpu backend's limit of " + std::to_string(kMaxBlasInt) +
                               " (OpenBLAS's index type)");
    if (options.split == SplitMode::kRows || options.split == SplitMode::kK)
      return FailedPrecondition("split '" + std::string(split_mode_name(options.split)) +
                                "' needs several GPUs; this server runs the cpu backend");
    return Status::Ok();
  }

  StatusOr<GemmReport> run(const GemmJob& job) override {
    if (Status v = validate(job.request); !v.ok())
      return Internal("a request that was not validated reached run(): " + v.to_string());
    if (job.request.batch) {  // every input is present: the service never starts a batch early
      // A resident operand shared by every product (stride 0, batch.h) is
      // read where it is kept: the whole matrix, dense.
      GemmJob batch_job = job;
      std::shared_ptr<ResidentData> held[2];
      int64_t resident_ld = 0;
      if (job.a_resident) batch_job.a = host_matrix(job.a_resident, MatrixOffset{}, &held[0], &resident_ld);
      if (job.b_resident) batch_job.b = host_matrix(job.b_resident, MatrixOffset{}, &held[1], &resident_ld);
      if ((job.a_resident && !batch_job.a) || (job.b_resident && !batch_job.b))
        return Internal("a resident operand of a batch is not held in host memory");
      std::unique_lock lock(mu_, std::defer_lock);
      while (!lock.try_lock_for(std::chrono::milliseconds(10)))
        if (job.cancel) SGEMM_RETURN_IF_ERROR(job.cancel->status());
      busy_.store(true, std::memory_order_relaxed);
      StatusOr<GemmReport> report = run_cpu_batch(batch_job, name_);
      busy_.store(false, std::memory_order_relaxed);
      return report;
    }
    const GemmRequest& r = job.request;
    const GemmShape s = r.shape;
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    const auto origin = job.origin.value_or(t0);
    auto ms_since_origin = [&](Clock::time_point t) {
      return std::chrono::duration<double, std::milli>(t - origin).count();
    };
    std::vector<Step> steps;
    double input_wait_ms = 0;
    auto waited = [&](Clock::time_point w0, int64_t bytes) {
      const auto w1 = Clock::now();
      const double ms = std::chrono::duration<double, std::milli>(w1 - w0).count();
      if (ms <= 0.01) return;
      input_wait_ms += ms;
      steps.push_back(Step{.kind = StepKind::kWaitInput,
                           .start_ms = ms_since_origin(w0),
                           .end_ms = ms_since_origin(w1),
                           .bytes = bytes,
                           .row_begin = 0,
                           .row_end = s.m,
                           .k_begin = 0,
                           .k_end = s.k});
    };
    // op(A) = A^T: every row of C reads every row of the stored A, so A is
    // waited for whole before the first block (op_a = n waits per block).
    const bool a_whole = r.op_a == Op::kT;
    if (job.feed) {
      SGEMM_RETURN_IF_ERROR(job.feed->wait_for(MatrixId::kB, s.k * s.n));
      if (r.has_c) SGEMM_RETURN_IF_ERROR(job.feed->wait_for(MatrixId::kC, s.m * s.n));
      if (a_whole) SGEMM_RETURN_IF_ERROR(job.feed->wait_for(MatrixId::kA, s.m * s.k));
    }
    waited(t0, (s.k * s.n + (r.has_c ? s.m * s.n : 0) + (a_whole ? s.m * s.k : 0)) * int64_t(sizeof(float)));
    double kernel_ms = 0;
    int64_t launches = 0;  // cblas_sgemm calls, one per block of rows
    const float beta = r.has_c ? r.beta : 0.0f;
    // Resident operands are read where they are kept (at their submatrix's
    // first element, with the matrix's width as leading dimension); a
    // resident C is first copied where the result goes.
    std::shared_ptr<ResidentData> held[3];
    int64_t ra_ld = 0, rb_ld = 0, rc_ld = 0;
    const float* ra = host_matrix(job.a_resident, job.a_at, &held[0], &ra_ld);
    const float* rb = host_matrix(job.b_resident, job.b_at, &held[1], &rb_ld);
    const float* rc = host_matrix(job.c_resident, job.c_at, &held[2], &rc_ld);
    if ((job.a_resident && !ra) || (job.b_resident && !rb) || (job.c_resident && !rc))
      return Internal("a resident operand is not held in host memory");
    const float* a = ra ? ra : job.a;
    const float* b = rb ? rb : job.b;
    const int64_t lda = ra ? ra_ld : job.a_ld(), ldb = rb ? rb_ld : job.b_ld(), ldc = job.c_ld();
    SGEMM_RETURN_IF_ERROR(check_sgemm_args(s.m, s.n, s.k, lda, ldb, ldc, r.a_dims().cols, r.b_dims().cols));
    if (rc)
      for (int64_t i = 0; i < s.m; ++i) std::copy(rc + i * rc_ld, rc + i * rc_ld + s.n, job.c + i * ldc);
    // The lock is taken only when the inputs are present (the service runs a
    // job once its upload is complete); a cancelled job stops waiting for it.
    std::unique_lock lock(mu_, std::defer_lock);
    while (!lock.try_lock_for(std::chrono::milliseconds(10)))
      if (job.cancel) SGEMM_RETURN_IF_ERROR(job.cancel->status());
    busy_.store(true, std::memory_order_relaxed);
    struct Idle {  // busy_ until the lock goes, whichever way run() returns
      std::atomic<bool>& busy;
      ~Idle() { busy.store(false, std::memory_order_relaxed); }
    } idle{busy_};
    for (int64_t r0 = 0; r0 < s.m; r0 += options_.rows_per_block) {
      const int64_t r1 = std::min(s.m, r0 + options_.rows_per_block);
      if (job.cancel) SGEMM_RETURN_IF_ERROR(job.cancel->status());
      if (job.feed && !a_whole) {
        const auto w0 = Clock::now();
        SGEMM_RETURN_IF_ERROR(job.feed->wait_for(MatrixId::kA, r1 * s.k));
        waited(w0, (r1 - r0) * s.k * int64_t(sizeof(float)));
      }
      // Rows [r0, r1) of op(A): rows of the stored A, or its columns under op_a = t.
      const float* a_rows = r.op_a == Op::kN ? a + r0 * lda : a + r0;
      const auto k0 = Clock::now();
      cblas_sgemm(CblasRowMajor, cblas_op(r.op_a), cblas_op(r.op_b), blasint(r1 - r0), blasint(s.n), blasint(s.k),
                  r.alpha, a_rows, blasint(lda), b, blasint(ldb), beta, job.c + r0 * ldc, blasint(ldc));
      const auto k1 = Clock::now();
      ++launches;
      kernel_ms += std::chrono::duration<double, std::milli>(k1 - k0).count();
      steps.push_back(Step{.kind = StepKind::kKernel,
                           .start_ms = ms_since_origin(k0),
                           .end_ms = ms_since_origin(k1),
                           .bytes = 0,
                           .row_begin = r0,
                           .row_end = r1,
                           .k_begin = 0,
                           .k_end = s.k,
                           .kernel_row = 0});  // kernel_rows' one row, openblas
      if (job.sink) job.sink->rows_ready(r0, r1);
    }
    if (kernel_ms > 0) {  // the rate estimate_ms() uses: the last product's
      const double gflops = s.flops() / (kernel_ms * 1e6);
      gflops_.store(gflops, std::memory_order_relaxed);
    }
    GemmReport report;
    report.backend = "cpu";
    report.kernel = KernelKind::kOpenblas;
    report.kernel_row = std::string(kernel_kind_name(KernelKind::kOpenblas));
    count_kernel_launches(&report.kernel_rows, report.kernel_row, launches);
    report.precision = Precision::kFp32;
    report.split = SplitMode::kSingle;
    report.plan_reason = "cpu backend: the whole product on the host";
    if (r.op_a == Op::kT || r.op_b == Op::kT)
      report.plan_reason += std::string("; op_a = ") + std::string(op_name(r.op_a)) +
                            ", op_b = " + std::string(op_name(r.op_b)) + " (cblas_sgemm transposes)";
    if (r.options.precision != Precision::kFp32)
      report.plan_reason += std::string("; precision ") + std::string(precision_name(r.options.precision)) +
                            " requested: the cpu backend computes fp32 (at least as accurate)";
    DeviceTiming t;
    t.device = -1;
    t.name = name_;
    t.shard = {-1, 0, s.m, 0, s.k};
    t.copy_in_wait_ms = input_wait_ms;  // no copies on the CPU: the input is used where it landed
    t.kernel_ms = kernel_ms;
    t.steps = std::move(steps);
    report.devices.push_back(t);
    return report;
  }

  // From the last product's rate (a conservative 1 GFLOP/s before the first);
  // no estimate while a product runs (a job would wait for it).
  double estimate_ms(const GemmJob& job) const override {
    if (busy_.load(std::memory_order_relaxed)) return -1;
    const double flops = job.request.batch ? job.request.batch->flops() : job.request.shape.flops();
    return flops / (gflops_.load(std::memory_order_relaxed) * 1e6);
  }

 private:
  const CpuEngineOptions options_;
  std::string name_;
  AlignedHostAllocator allocator_;
  ResidentStore store_;
  std::timed_mutex mu_;              // one product at a time: OpenBLAS already uses every core
  std::atomic<bool> busy_{false};    // a product holds mu_
  std::atomic<double> gflops_{1.0};  // the last product's rate
};

}  // namespace

std::unique_ptr<Engine> make_cpu_engine(const CpuEngineOptions& options) {
  return std::make_unique<CpuEngine>(options);
}

}  // namespace sgemm
