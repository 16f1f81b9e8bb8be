#include "kernels/cublas_batched_sgemm.h"

#include <cublas_v2.h>

#include <climits>
#include <map>
#include <string>
#include <tuple>
#include <utility>

#include "kernels/cublas_status.h"
#include "kernels/cuda_status.h"
#include "kernels/gemm_args.h"

namespace sgemm {
namespace {

cublasHandle_t as_handle(void* h) { return static_cast<cublasHandle_t>(h); }
cublasOperation_t cublas_op(Op op) { return op == Op::kT ? CUBLAS_OP_T : CUBLAS_OP_N; }
cublasComputeType_t compute_type(BatchedArithmetic a) {
  return a == BatchedArithmetic::kTf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

Status check_int(const char* field, int64_t v) {
  if (v < 1 || v > INT_MAX)
    return InvalidArgument(std::string(field) + ": must be in [1, 2^31) for cuBLAS, got " + std::to_string(v));
  return Status::Ok();
}

}  // namespace

StatusOr<std::unique_ptr<CublasBatchedGemm>> CublasBatchedGemm::create() {
  SGEMM_ASSIGN_OR_RETURN(cublasHandle_t handle, make_cublas_handle());
  return std::unique_ptr<CublasBatchedGemm>(new CublasBatchedGemm(handle));
}

CublasBatchedGemm::~CublasBatchedGemm() { cublasDestroy(as_handle(handle_)); }

Status CublasBatchedGemm::can_implement_strided(const StridedBatchArgs& g) {
  SGEMM_RETURN_IF_ERROR(check_gemm_shape(g.shape));
  SGEMM_RETURN_IF_ERROR(check_int("count", g.count));
  // Strides are long long in cuBLAS; leading dimensions are int.
  const MatrixDims a = stored_a_dims(g.shape, g.op_a), b = stored_b_dims(g.shape, g.op_b);
  for (auto [field, ld, width] : {std::tuple{"lda", g.lda, a.cols}, std::tuple{"ldb", g.ldb, b.cols}}) {
    if (ld == 0) continue;
    if (ld < width)
      return InvalidArgument(std::string(field) + ": " + std::to_string(ld) + " is under the stored width " +
                             std::to_string(width));
    SGEMM_RETURN_IF_ERROR(check_int(field, ld));
  }
  for (auto [field, stride] : {std::pair{"stride_a", g.stride_a}, std::pair{"stride_b", g.stride_b}})
    if (stride && *stride < 0)
      return InvalidArgument(std::string(field) + ": must be >= 0, got " + std::to_string(*stride));
  return Status::Ok();
}

Status CublasBatchedGemm::can_implement_group(const std::vector<GemmShape>& shapes) {
  if (shapes.empty()) return InvalidArgument("products: none");
  SGEMM_RETURN_IF_ERROR(check_int("count", int64_t(shapes.size())));
  for (const GemmShape& s : shapes) SGEMM_RETURN_IF_ERROR(check_gemm_shape(s));
  return Status::Ok();
}

Status CublasBatchedGemm::strided(const StridedBatchArgs& g, cudaStream_t stream) {
  SGEMM_RETURN_IF_ERROR(can_implement_strided(g));
  if (!g.a || !g.b || !g.c) return InvalidArgument("a, b, c: null pointer");
  const GemmShape& s = g.shape;
  const MatrixDims a = stored_a_dims(s, g.op_a), b = stored_b_dims(s, g.op_b);
  const int64_t lda = g.lda > 0 ? g.lda : a.cols, ldb = g.ldb > 0 ? g.ldb : b.cols;
  const int64_t stride_a = g.stride_a.value_or(a.rows * lda), stride_b = g.stride_b.value_or(b.rows * ldb);
  SGEMM_CUBLAS_TRY(cublasSetStream(as_handle(handle_), stream));
  SGEMM_CUBLAS_TRY(cublasGemmStridedBatchedEx(
      as_handle(handle_), cublas_op(g.op_b), cublas_op(g.op_a), int(s.n), int(s.m), int(s.k), &g.alpha, g.b, CUDA_R_32F,
      int(ldb), (long long)stride_b, g.a, CUDA_R_32F, int(lda), (long long)stride_a, &g.beta, g.c, CUDA_R_32F, int(s.n),
      (long long)(s.m * s.n), int(g.count), compute_type(g.arithmetic), CUBLAS_GEMM_DEFAULT));
  return Status::Ok();
}

std::size_t CublasBatchedGemm::grouped_workspace_bytes(std::size_t count) { return 3 * count * sizeof(void*); }

StatusOr<CublasBatchedGemm::GroupLaunch> CublasBatchedGemm::stage_group(const std::vector<BatchedProduct>& products,
                                                                        Op op_a, Op op_b, void* workspace,
                                                                        cudaStream_t stream) {
  std::vector<GemmShape> shapes;
  shapes.reserve(products.size());
  for (const BatchedProduct& p : products) {
    if (!p.a || !p.b || !p.c) return InvalidArgument("products: a null operand pointer");
    shapes.push_back(p.shape);
  }
  SGEMM_RETURN_IF_ERROR(can_implement_group(shapes));
  if (!workspace) return InvalidArgument("workspace: null pointer");
  // Products of one shape form one group (cuBLAS's groups share every
  // argument but the pointers), in the order the shapes first appear.
  std::map<std::tuple<int64_t, int64_t, int64_t>, int> group_of;
  std::vector<std::vector<std::size_t>> members;
  for (std::size_t i = 0; i < products.size(); ++i) {
    const GemmShape& s = products[i].shape;
    auto [it, added] = group_of.try_emplace({s.m, s.n, s.k}, int(members.size()));
    if (added) members.emplace_back();
    members[std::size_t(it->second)].push_back(i);
  }
  GroupLaunch g;
  const std::size_t groups = members.size(), count = products.size();
  g.count = count;
  g.op_a = op_a;
  g.op_b = op_b;
  for (auto* v : {&g.m, &g.n, &g.k, &g.lda, &g.ldb, &g.ldc, &g.size}) v->resize(groups);
  std::vector<const void*> pointers(3 * count);
  std::size_t at = 0;
  for (std::size_t i = 0; i < groups; ++i) {
    const GemmShape& s = products[members[i][0]].shape;
    // cuBLAS computes the column-major (n, m, k) product of B and A: C^T = op(B)^T op(A)^T.
    g.m[i] = int(s.n);
    g.n[i] = int(s.m);
    g.k[i] = int(s.k);
    g.ldb[i] = int(stored_b_dims(s, op_b).cols);
    g.lda[i] = int(stored_a_dims(s, op_a).cols);
    g.ldc[i] = int(s.n);
    g.size[i] = int(members[i].size());
    for (std::size_t p : members[i]) {
      pointers[at] = products[p].b;
      pointers[count + at] = products[p].a;
      pointers[2 * count + at] = products[p].c;
      ++at;
    }
  }
  // Pageable host memory: the copy returns once the bytes are staged, so `pointers` may go after it.
  SGEMM_CUDA_TRY(
      cudaMemcpyAsync(workspace, pointers.data(), pointers.size() * sizeof(void*), cudaMemcpyHostToDevice, stream));
  g.pointers = static_cast<const void* const*>(workspace);
  g.host_pointers = std::move(pointers);
  return g;
}

Status CublasBatchedGemm::grouped(const GroupLaunch& g, float alpha, float beta, BatchedArithmetic arithmetic,
                                  cudaStream_t stream) {
  if (!g.pointers || g.count == 0) return InvalidArgument("group: not staged (stage_group)");
  const std::size_t groups = g.size.size();
  const std::vector<cublasOperation_t> trans_b(groups, cublas_op(g.op_b)), trans_a(groups, cublas_op(g.op_a));
  const std::vector<float> alphas(groups, alpha), betas(groups, beta);
  const void* const* dev = g.pointers;
  SGEMM_CUBLAS_TRY(cublasSetStream(as_handle(handle_), stream));
  if (arithmetic == BatchedArithmetic::kFp32) {
    // cuBLAS's own SGEMM entry point: fp32 FMAs in the handle's default math mode.
    const auto* f = reinterpret_cast<const float* const*>(dev);
    SGEMM_CUBLAS_TRY(cublasSgemmGroupedBatched(as_handle(handle_), trans_b.data(), trans_a.data(), g.m.data(),
                                               g.n.data(), g.k.data(), alphas.data(), f, g.ldb.data(), f + g.count,
                                               g.lda.data(), betas.data(), const_cast<float* const*>(f + 2 * g.count),
                                               g.ldc.data(), int(groups), g.size.data()));
    return Status::Ok();
  }
  // TF32: one cublasGemmEx per product. The grouped entry point with the TF32 compute type
  // failed on an H100 (CUDA 13.0) with a misaligned address on products whose pointers are
  // only 4-byte aligned (operands concatenated densely), and left the context unusable; it
  // sees the pointers only on the device, where a single launch can check their alignment.
  const auto& hp = g.host_pointers;
  std::size_t at = 0;
  for (std::size_t i = 0; i < groups; ++i)
    for (int j = 0; j < g.size[i]; ++j, ++at)
      SGEMM_CUBLAS_TRY(cublasGemmEx(as_handle(handle_), trans_b[i], trans_a[i], g.m[i], g.n[i], g.k[i], &alpha, hp[at],
                                    CUDA_R_32F, g.ldb[i], hp[g.count + at], CUDA_R_32F, g.lda[i], &beta,
                                    const_cast<void*>(hp[2 * g.count + at]), CUDA_R_32F, g.ldc[i],
                                    compute_type(arithmetic), CUBLAS_GEMM_DEFAULT));
  return Status::Ok();
}

}  // namespace sgemm
