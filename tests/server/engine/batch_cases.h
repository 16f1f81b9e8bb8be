// Batched and grouped products for engine tests (server/engine/batch.h): a
// request with random operands laid out as the service lays them out, run
// through any Engine, each product checked against the fp64 reference and
// each computed product's C reported to the sink exactly once. A strided
// batch's A or B may be one resident matrix every product reads (share()).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/reference_gemm.h"
#include "server/engine/engine.h"
#include "tests/server/engine/resident_test_util.h"

namespace sgemm::testing {

// Element ranges of C the engine reported (rows_ready counts elements for a batch).
class RecordingSink final : public OutputSink {
 public:
  void rows_ready(int64_t begin, int64_t end) override {
    std::lock_guard lock(mu_);
    ++ranges_[{begin, end}];
  }
  // Elements of [begin, end) reported, counted once per report that covers them
  // (an engine may report several products' C in one range).
  int64_t covered(int64_t begin, int64_t end) const {
    std::lock_guard lock(mu_);
    int64_t n = 0;
    for (const auto& [r, count] : ranges_)
      n += std::max<int64_t>(0, std::min(end, r.second) - std::max(begin, r.first)) * count;
    return n;
  }
  int64_t total() const {
    std::lock_guard lock(mu_);
    int64_t n = 0;
    for (const auto& [r, count] : ranges_) n += (r.second - r.first) * count;
    return n;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::pair<int64_t, int64_t>, int> ranges_;
};

struct BatchRun {
  GemmRequest request;
  std::vector<float> a, b, c0, c;  // concatenated stored operands; c0 the input C, c the result
  RecordingSink sink;
  std::string name;

  BatchRun(BatchKind kind, const std::vector<GemmShape>& shapes, Op op_a, Op op_b, float alpha, float beta, bool has_c,
           uint64_t seed) {
    auto spec = std::make_shared<BatchSpec>(make_batch_spec(kind, shapes, op_a, op_b));
    request.shape = shapes.front();
    request.alpha = alpha;
    request.beta = beta;
    request.has_c = has_c;
    request.op_a = op_a;
    request.op_b = op_b;
    a.resize(std::size_t(spec->a_elements));
    b.resize(std::size_t(spec->b_elements));
    fill_random(a, seed);
    fill_random(b, seed + 1);
    c0.resize(std::size_t(spec->c_elements));
    fill_random(c0, seed + 2);
    c = has_c ? c0 : std::vector<float>(c0.size(), std::nanf(""));  // without C the engine must not read it
    request.batch = std::move(spec);
    name = std::string(kind == BatchKind::kStrided ? "batch of " : "group of ") + std::to_string(shapes.size()) +
           " op_a " + std::string(op_name(op_a)) + " op_b " + std::string(op_name(op_b)) + " alpha " +
           std::to_string(alpha) + " beta " + std::to_string(beta) + (has_c ? " C" : "") + " seed " +
           std::to_string(seed);
  }
  const BatchSpec& spec() const { return *request.batch; }

  // Makes `matrix` (A or B) of this strided batch one resident matrix that
  // every product reads (share_batch_operand): product 0's stored operand,
  // put into `e`'s store and pinned until this run goes (before the engine).
  // verify() then reads that operand for every product: its offsets are all 0.
  void share(Engine& e, MatrixId matrix) {
    auto spec = std::make_shared<BatchSpec>(this->spec());
    share_batch_operand(*spec, matrix);
    request.batch = spec;
    const GemmShape s = spec->products.front().shape;
    const bool is_a = matrix == MatrixId::kA;
    const MatrixDims dims = is_a ? stored_a_dims(s, request.op_a) : stored_b_dims(s, request.op_b);
    (is_a ? a_lease : b_lease) = put_resident(e, (is_a ? a : b).data(), dims.rows, dims.cols);
    name += is_a ? ", A resident and shared" : ", B resident and shared";
  }

  // The job: host operands, except a shared one, which the job names by its resident matrix.
  GemmJob job() {
    GemmJob j;
    j.request = request;
    j.a = a_lease ? nullptr : a.data();
    j.b = b_lease ? nullptr : b.data();
    j.c = c.data();
    j.a_resident = a_lease.get();
    j.b_resident = b_lease.get();
    j.sink = &sink;
    return j;
  }
  ResidentStore::Lease a_lease, b_lease;  // share(): the shared operands' pins

  // The cols x rows transpose of the stored rows x cols block at `x`.
  static std::vector<float> transposed(const float* x, int64_t rows, int64_t cols) {
    std::vector<float> t(std::size_t(rows * cols));
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) t[std::size_t(j * rows + i)] = x[i * cols + j];
    return t;
  }

  // Product i against the fp64 reference.
  VerifyResult verify(std::size_t i, const std::vector<float>& result) const {
    const BatchProduct& p = spec().products[i];
    const GemmShape& s = p.shape;
    const float* ai = a.data() + p.a_offset;
    const float* bi = b.data() + p.b_offset;
    const std::vector<float> ta = request.op_a == Op::kT ? transposed(ai, s.k, s.m) : std::vector<float>{};
    const std::vector<float> tb = request.op_b == Op::kT ? transposed(bi, s.n, s.k) : std::vector<float>{};
    return verify_gemm(s.m, s.n, s.k, request.alpha, ta.empty() ? ai : ta.data(), tb.empty() ? bi : tb.data(),
                       request.beta, request.has_c ? c0.data() + p.c_offset : nullptr, result.data() + p.c_offset);
  }

  // Every product OK, correct, and reported once; `tolerance` per the precision.
  void expect_all_correct(const GemmReport& report, double tolerance = kSgemmTolerance) const {
    ASSERT_EQ(report.product_status.size(), spec().products.size());
    for (std::size_t i = 0; i < spec().products.size(); ++i) {
      SCOPED_TRACE("product " + std::to_string(i) + " " + gemm_shape_text(spec().products[i].shape));
      EXPECT_TRUE(report.product_status[i].ok()) << report.product_status[i].to_string();
      const VerifyResult v = verify(i, c);
      EXPECT_TRUE(v.passed(tolerance)) << "max rel error " << v.max_rel_error << " at (" << v.worst_row << ", "
                                       << v.worst_col << "), nonfinite mismatches " << v.mismatched_nonfinite;
      const BatchProduct& p = spec().products[i];
      EXPECT_EQ(sink.covered(p.c_offset, p.c_offset + p.c_elements()), p.c_elements());  // each element once
    }
    EXPECT_EQ(sink.total(), spec().c_elements);
  }
};

// A group of odd shapes from 1x1x1 to 129x65x257, thin and wide among them.
inline std::vector<GemmShape> odd_group_shapes() {
  return {{1, 1, 1}, {1, 65, 33}, {47, 1, 19}, {33, 17, 29}, {7, 129, 3}, {129, 65, 257}, {64, 64, 64}, {3, 5, 1}};
}

}  // namespace sgemm::testing
