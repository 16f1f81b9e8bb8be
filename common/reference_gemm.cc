#include "common/reference_gemm.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace sgemm {

void fill_random(float* data, int64_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int64_t i = 0; i < count; ++i) data[i] = dist(rng);
}

void fill_random(std::vector<float>& v, uint64_t seed) { fill_random(v.data(), int64_t(v.size()), seed); }

VerifyResult verify_gemm(int64_t m, int64_t n, int64_t k, float alpha, const float* a, const float* b, float beta,
                         const float* c0, const float* c, const std::vector<int64_t>& rows_in) {
  std::vector<int64_t> rows = rows_in;
  if (rows.empty()) {
    rows.resize(m);
    for (int64_t i = 0; i < m; ++i) rows[i] = i;
  }
  VerifyResult r;
  std::vector<double> acc(n), mag(n);
  for (int64_t i : rows) {
    std::fill(acc.begin(), acc.end(), 0.0);
    std::fill(mag.begin(), mag.end(), 0.0);
    for (int64_t p = 0; p < k; ++p) {
      const double aip = a[i * k + p];
      const float* brow = b + p * n;
      for (int64_t j = 0; j < n; ++j) {
        const double t = aip * double(brow[j]);
        acc[j] += t;
        mag[j] += std::fabs(t);
      }
    }
    for (int64_t j = 0; j < n; ++j) {
      double ref = double(alpha) * acc[j];
      double scale = std::fabs(double(alpha)) * mag[j];
      if (c0 && beta != 0.0f) {
        const double cij = double(beta) * double(c0[i * n + j]);
        ref += cij;
        scale += std::fabs(cij);
      }
      const double got = c[i * n + j];
      ++r.checked;
      if (!std::isfinite(ref) || !std::isfinite(got)) {
        const bool same = (std::isnan(ref) && std::isnan(got)) || (std::isinf(ref) && ref == got);
        if (!same) {
          ++r.mismatched_nonfinite;
          if (r.worst_row < 0) {
            r.worst_row = i;
            r.worst_col = j;
          }
        }
        continue;
      }
      const double err = std::fabs(got - ref) / std::max(scale, 1e-30);
      if (err > r.max_rel_error) {
        r.max_rel_error = err;
        r.worst_row = i;
        r.worst_col = j;
      }
    }
  }
  return r;
}

std::vector<int64_t> rows_to_verify(int64_t m, int64_t n, int64_t k, uint64_t seed, int64_t sample) {
  std::vector<int64_t> rows;
  const double work = double(m) * double(n) * double(k);
  if (work <= 2.5e8 || m <= sample) {
    for (int64_t i = 0; i < m; ++i) rows.push_back(i);
    return rows;
  }
  std::set<int64_t> picked = {0, m - 1};
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
  std::uniform_int_distribution<int64_t> dist(0, m - 1);
  while (int64_t(picked.size()) < sample) picked.insert(dist(rng));
  rows.assign(picked.begin(), picked.end());
  return rows;
}

}  // namespace sgemm
