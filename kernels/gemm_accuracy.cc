#include "kernels/gemm_accuracy.h"

#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <thread>

#include "kernels/cuda_status.h"

namespace sgemm {
namespace {

Status cublas_ok(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return Internal(std::string(what) + " failed: cuBLAS status " + std::to_string(int(s)));
}

// Device fp64 buffer freed with the scope.
struct DeviceDoubles {
  double* p = nullptr;
  ~DeviceDoubles() { (void)cudaFree(p); }
};

}  // namespace

const char* input_distribution_name(InputDistribution d) {
  switch (d) {
    case InputDistribution::kUniform:
      return "uniform";
    case InputDistribution::kWideExponent:
      return "wide-exponent";
    case InputDistribution::kCancelling:
      return "cancelling";
  }
  return "unknown";
}

namespace {

// Fills v[i] = draw(rng) in chunks of 2^20 elements, each chunk with its own
// generator seeded by (seed, chunk), spread over the host's cores: the values
// depend on the seed alone, not on the thread count.
template <typename Draw>
void fill_parallel(std::vector<float>& v, uint64_t seed, Draw draw) {
  constexpr std::size_t kChunk = std::size_t{1} << 20;
  const std::size_t chunks = (v.size() + kChunk - 1) / kChunk;
  const unsigned threads = std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(), unsigned(chunks)));
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (std::size_t c = t; c < chunks; c += threads) {
        std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + c);
        const std::size_t end = std::min(v.size(), (c + 1) * kChunk);
        for (std::size_t i = c * kChunk; i < end; ++i) v[i] = draw(rng);
      }
    });
  for (auto& th : pool) th.join();
}

}  // namespace

void fill_inputs(InputDistribution d, int64_t m, int64_t n, int64_t k, uint64_t seed, std::vector<float>& a,
                 std::vector<float>& b) {
  a.resize(std::size_t(m * k));
  b.resize(std::size_t(k * n));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto uniform = [](std::mt19937_64& r) { return std::uniform_real_distribution<float>(-1.0f, 1.0f)(r); };
  auto wide = [](std::mt19937_64& r) {
    const double x = std::uniform_real_distribution<double>(0.0, 1.0)(r);
    return float((x - 0.5) * std::exp(4.0 * std::normal_distribution<double>(0.0, 1.0)(r)));
  };
  switch (d) {
    case InputDistribution::kUniform:
      fill_parallel(a, 2 * seed, uniform);
      fill_parallel(b, 2 * seed + 1, uniform);
      return;
    case InputDistribution::kWideExponent:
      fill_parallel(a, 2 * seed, wide);
      fill_parallel(b, 2 * seed + 1, wide);
      return;
    case InputDistribution::kCancelling: {
      const int64_t h = k / 2;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t p = 0; p < h; ++p) a[std::size_t(i * k + p)] = a[std::size_t(i * k + p + h)] = u(rng);
      for (int64_t p = 0; p < h; ++p)
        for (int64_t j = 0; j < n; ++j) {
          const float y = u(rng);
          b[std::size_t(p * n + j)] = y;
          b[std::size_t((p + h) * n + j)] = -y;
        }
      return;
    }
  }
}

StatusOr<std::unique_ptr<GemmAccuracyProbe>> GemmAccuracyProbe::create(const GemmShape& s, const float* a_host,
                                                                       const float* b_host) {
  std::unique_ptr<GemmAccuracyProbe> p(new GemmAccuracyProbe());
  p->shape_ = s;
  const std::size_t na = std::size_t(s.m * s.k), nb = std::size_t(s.k * s.n), nc = std::size_t(s.m * s.n);
  std::vector<double> ha(na), hb(nb);
  DeviceDoubles da, db, dc;
  SGEMM_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&da.p), na * sizeof(double)));
  SGEMM_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&db.p), nb * sizeof(double)));
  SGEMM_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&dc.p), nc * sizeof(double)));
  cublasHandle_t h = nullptr;
  SGEMM_RETURN_IF_ERROR(cublas_ok(cublasCreate(&h), "cublasCreate"));
  // Row-major C = A*B is column-major C^T = B^T * A^T.
  auto product = [&](bool absolute, std::vector<double>& out) -> Status {
    for (std::size_t i = 0; i < na; ++i) ha[i] = absolute ? std::fabs(double(a_host[i])) : double(a_host[i]);
    for (std::size_t i = 0; i < nb; ++i) hb[i] = absolute ? std::fabs(double(b_host[i])) : double(b_host[i]);
    SGEMM_CUDA_TRY(cudaMemcpy(da.p, ha.data(), na * sizeof(double), cudaMemcpyHostToDevice));
    SGEMM_CUDA_TRY(cudaMemcpy(db.p, hb.data(), nb * sizeof(double), cudaMemcpyHostToDevice));
    const double one = 1.0, zero = 0.0;
    SGEMM_RETURN_IF_ERROR(cublas_ok(cublasDgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, int(s.n), int(s.m), int(s.k), &one, db.p,
                                                int(s.n), da.p, int(s.k), &zero, dc.p, int(s.n)),
                                    "cublasDgemm"));
    out.resize(nc);
    SGEMM_CUDA_TRY(cudaMemcpy(out.data(), dc.p, nc * sizeof(double), cudaMemcpyDeviceToHost));
    return Status::Ok();
  };
  Status st = product(false, p->ref_);
  if (st.ok()) st = product(true, p->mag_);
  cublasDestroy(h);
  SGEMM_RETURN_IF_ERROR(st);
  return p;
}

GemmAccuracyProbe::~GemmAccuracyProbe() = default;

double GemmAccuracyProbe::componentwise_error(const float* c) const {
  double worst = 0;
  for (std::size_t i = 0; i < ref_.size(); ++i) {
    if (!std::isfinite(c[i])) return std::numeric_limits<double>::infinity();
    const double d = std::fabs(double(c[i]) - ref_[i]);
    if (mag_[i] == 0) {
      if (d != 0) return std::numeric_limits<double>::infinity();
      continue;
    }
    worst = std::max(worst, d / mag_[i]);
  }
  return worst;
}

}  // namespace sgemm
