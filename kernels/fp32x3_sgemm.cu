// Launchers of the fp32x3 SGEMM (kernels/fp32x3_sgemm.cuh): the only place its
// kernels are launched; each launch's cudaGetLastError() becomes a Status.
// This translation unit alone is compiled for sm_90a (kernels/CMakeLists.txt).
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <random>
#include <string>

#include "common/fp32x3_slices.h"
#include "common/kernel_registry.h"
#include "kernels/cuda_status.h"
#include "kernels/fp32x3_sgemm.cuh"
#include "kernels/fp32x3_sgemm.h"
#include "kernels/launch_util.h"
#include "kernels/tensor_map.h"

namespace sgemm {
namespace {

using fp32x3::Fp32x3Config;

//                          kWgM  kBN  stages pingpong promote-every cluster
using PingpongTile = Fp32x3Config<128, 128, 3, true, 0>;    // 128x128 per consumer, alternate tiles
using PingpongPromote = Fp32x3Config<64, 128, 4, true, 1>;  // 64x128 per consumer, promoted
using CoopPromote1 = Fp32x3Config<64, 128, 3, false, 1>;    // 128x128 tile, 64 rows per consumer
using Coop = Fp32x3Config<64, 128, 3, false, 0>;
using CoopPromote1Cluster2 = Fp32x3Config<64, 128, 3, false, 1, 2>;                // + B multicast to 2 CTAs
using CoopPromote1SplitA = Fp32x3Config<64, 128, 4, false, 1, 1, true>;            // raw A, split in registers
using CoopPromote1SplitACvt = Fp32x3Config<64, 128, 4, false, 1, 1, true, false>;  // ... rounded by cvt.rna
// ... with 16 tile rows per raster group (picked), and that promoted every 2 k-blocks (1-3%
// faster, but over the test bound on the 256^3 wide-exponent case: not picked).
using CoopPromote1SplitAGroup16 = Fp32x3Config<64, 128, 4, false, 1, 1, true, true, 16>;
using CoopPromote2SplitAGroup16 = Fp32x3Config<64, 128, 4, false, 2, 1, true, true, 16>;

constexpr int64_t kAlignBytes = 256;
static_assert(fp32x3::kBK == kFp32x3KBlock, "common/fp32x3_slices.h must cut K in the kernel's k-blocks");

int64_t padded_k(int64_t k) { return (k + 3) / 4 * 4; }
int64_t align_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

// TMA map over hi/lo planes [2][rows][kp] of fp32, box {32, box_rows, box_planes},
// 128-byte swizzle; out-of-range rows and k are zero-filled.
Status make_plane_map(CUtensorMap* map, const float* planes, int64_t rows, int64_t k, int box_rows, int box_planes) {
  SGEMM_ASSIGN_OR_RETURN(auto encode, tensor_map_encode_fn());
  const int64_t kp = padded_k(k);
  const cuuint64_t dims[3] = {cuuint64_t(k), cuuint64_t(rows), 2};
  const cuuint64_t strides[2] = {cuuint64_t(kp * 4), cuuint64_t(rows * kp * 4)};
  const cuuint32_t box[3] = {cuuint32_t(fp32x3::kBK), cuuint32_t(box_rows), cuuint32_t(box_planes)};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, const_cast<float*>(planes), dims, strides, box,
                            elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return Internal("cuTensorMapEncodeTiled failed with CUresult " + std::to_string(int(r)) + " (rows " +
                    std::to_string(rows) + ", k " + std::to_string(k) + ")");
  return Status::Ok();
}

// TMA map over the caller's A itself (rows x k, ld lda, fp32), box {32, box_rows},
// 128-byte swizzle. Only where TMA can describe it (a_tma_describable).
Status make_raw_map(CUtensorMap* map, const float* a, int64_t rows, int64_t k, int64_t ld, int box_rows) {
  return make_tensor_map_2d(map, a, rows, k, ld, box_rows, fp32x3::kBK, CU_TENSOR_MAP_SWIZZLE_128B, "A");
}

// Whether the bulk tensor copy can read A in place: 16-byte aligned base and rows.
// The registry's rule (common/kernel_registry.h), which also chooses fp32x3's row by it.
bool a_tma_describable(const GemmArgs& g) { return a_tma_readable(g.shape, kernel_layout(g)); }

struct DeviceInfo {
  int sm_count = 0;
  int major = 0, minor = 0;
};

Status device_info(DeviceInfo* info) {
  int device = 0;
  SGEMM_CUDA_TRY(cudaGetDevice(&device));
  SGEMM_CUDA_TRY(cudaDeviceGetAttribute(&info->sm_count, cudaDevAttrMultiProcessorCount, device));
  SGEMM_CUDA_TRY(cudaDeviceGetAttribute(&info->major, cudaDevAttrComputeCapabilityMajor, device));
  SGEMM_CUDA_TRY(cudaDeviceGetAttribute(&info->minor, cudaDevAttrComputeCapabilityMinor, device));
  return Status::Ok();
}

// SMs of the current device, looked up once per device.
int current_sm_count() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cached[kMaxDevices] = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0) return 1;
  if (device < kMaxDevices && cached[device].load(std::memory_order_relaxed) > 0)
    return cached[device].load(std::memory_order_relaxed);
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || sms < 1) return 1;
  if (device < kMaxDevices) cached[device].store(sms, std::memory_order_relaxed);
  return sms;
}

// The shortest K at which the GEMM kernel looks for A's infinities itself (run_config).
constexpr int64_t kCheckAMinK = 2048;

// Which operands one launch of kernel 1 splits.
enum class SplitWhich { kBoth, kAOnly, kBOnly };

// Kernel 1: A -> planes [2][m][kp] (where a_planes is null, A is split in kernel 2 and
// this launch only looks for infinities in it); B -> Bt planes [2][n][kp]; one launch.
// kAOnly (B prepared earlier) also raises `inf` where the prepared B's mark `b_prior` is.
Status launch_split(const GemmArgs& g, float* a_planes, float* b_planes, fp32x3::InfMark inf, cudaStream_t stream,
                    SplitWhich which = SplitWhich::kBoth, fp32x3::InfMark b_prior = {nullptr, 0}) {
  using fp32x3::kSplitCols, fp32x3::kSplitRows;
  const int64_t kp = padded_k(g.shape.k);
  const auto tiles_of = [](int64_t rows, int64_t cols) {
    return (rows + kSplitRows - 1) / kSplitRows * ((cols + kSplitCols - 1) / kSplitCols);
  };
  const int64_t a_tiles = tiles_of(g.shape.m, g.shape.k), b_tiles = tiles_of(g.shape.k, g.shape.n);
  const int64_t tiles = which == SplitWhich::kAOnly   ? a_tiles
                        : which == SplitWhich::kBOnly ? b_tiles
                                                      : std::max(a_tiles, b_tiles);  // one grid for both
  // At most 16 blocks per SM and operand, the rest by the grid stride: measured faster than
  // a grid of only the blocks an SM holds at once (5).
  const dim3 grid(unsigned(std::min<int64_t>(tiles, int64_t(current_sm_count()) * 16)), 1,
                  which == SplitWhich::kBoth ? 2 : 1);
  const int first = which == SplitWhich::kBOnly ? 1 : 0;
  fp32x3::fp32x3_split_kernel<<<grid, dim3(32, 8), 0, stream>>>(g.a, g.lda, int(g.shape.m), g.b, g.ldb, int(g.shape.n),
                                                                int(g.shape.k), a_planes, b_planes, kp, inf, first,
                                                                b_prior);
  return SGEMM_CUDA_STATUS(cudaGetLastError());
}

// A prepared B (fp32x3_prepare_b): Bt planes [2][n][kp], then its infinity flag's word
// in its own aligned slot (0, or 1 where B holds an infinity).
int64_t b_planes_bytes(const GemmShape& s) {
  return align_up(2 * s.n * padded_k(std::max<int64_t>(s.k, 1)) * 4, kAlignBytes);
}
fp32x3::InfMark prepared_b_mark(const void* prepared, const GemmShape& s) {
  auto* word =
      reinterpret_cast<unsigned long long*>(const_cast<char*>(static_cast<const char*>(prepared)) + b_planes_bytes(s));
  return fp32x3::InfMark{word, 1};
}

// Workspace: A's planes, B's planes (none where B was prepared), the slices' partial
// products (split K), the infinity mark's word (in its own aligned slot, last).
std::size_t workspace_bytes_for(const GemmShape& s, const Fp32x3Slices& slices, bool own_b = true) {
  const int64_t kp = padded_k(std::max<int64_t>(s.k, 1));
  const int64_t partials = slices.count > 1 ? align_up(slices.count * s.m * s.n * 4, kAlignBytes) : 0;
  return std::size_t(align_up(2 * s.m * kp * 4, kAlignBytes) + (own_b ? b_planes_bytes(s) : 0) + partials +
                     kAlignBytes);
}

// This launch's InfMark (fp32x3_sgemm.cuh): the workspace's last slot, and a value no
// earlier launch of this process wrote there (a counter from a random start, so that a
// word another process left is unlikely to match either). Even, in steps of two: the GEMM
// kernel's own mark is value ^ 1.
fp32x3::InfMark inf_mark_of(void* workspace, const GemmShape& s, const Fp32x3Slices& slices, bool own_b = true) {
  static std::atomic<unsigned long long> next{
      ((static_cast<unsigned long long>(std::random_device{}()) << 32) ^ std::random_device{}()) & ~1ull};
  auto* word = reinterpret_cast<unsigned long long*>(static_cast<char*>(workspace) +
                                                     workspace_bytes_for(s, slices, own_b) - kAlignBytes);
  return fp32x3::InfMark{word, next.fetch_add(2, std::memory_order_relaxed)};
}

Status check_workspace(const GemmArgs& g, const Fp32x3Slices& slices, const void* workspace, std::size_t bytes) {
  const std::size_t need = workspace_bytes_for(g.shape, slices, g.b_prepared == nullptr);
  if (workspace == nullptr || bytes < need)
    return InvalidArgument("workspace: needs " + std::to_string(need) + " bytes, got " +
                           std::to_string(workspace == nullptr ? 0 : bytes));
  return Status::Ok();
}

float* a_planes_of(void* workspace) { return static_cast<float*>(workspace); }
float* b_planes_of(void* workspace, const GemmShape& s) {
  return reinterpret_cast<float*>(static_cast<char*>(workspace) + align_up(2 * s.m * padded_k(s.k) * 4, kAlignBytes));
}
// The slices' partial products [slices][m][n], after the operands' planes.
float* partials_of(void* workspace, const GemmShape& s, bool own_b) {
  return reinterpret_cast<float*>(static_cast<char*>(workspace) + align_up(2 * s.m * padded_k(s.k) * 4, kAlignBytes) +
                                  (own_b ? b_planes_bytes(s) : 0));
}

// Products of at most this many flops launch their kernels after the first as programmatic
// dependents (fp32x3_sgemm.cuh, "Launch chain"). The gap this hides is a few microseconds:
// on one H200 it made 1024^3 10-14% faster, 512^2 x 8192 5-8%, 2048^3 2%, and left 4096^3
// unchanged, while 8192^3 and 16384^3 ran 0-4% slower in some runs
// (bench/results/2026-12-02_h200_fp32x3-dependent-launch).
constexpr double kDependentLaunchMaxFlops = 0x1p35;  // 2048^3 is 2^34

// Launches `kernel` on `stream` after the kernel before it, with clusters of `cluster`
// CTAs where cluster > 1; as that kernel's programmatic dependent where `dependent` (it
// may be placed while that one drains, and waits for it in the kernel).
template <class... Params, class... Args>
Status launch_after(bool dependent, void (*kernel)(Params...), dim3 grid, dim3 block, int smem_bytes, int cluster,
                    cudaStream_t stream, Args... args) {
  cudaLaunchAttribute attrs[2] = {};
  attrs[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[0].val.programmaticStreamSerializationAllowed = 1;
  attrs[1].id = cudaLaunchAttributeClusterDimension;
  attrs[1].val.clusterDim.x = unsigned(cluster);
  attrs[1].val.clusterDim.y = 1;
  attrs[1].val.clusterDim.z = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = std::size_t(smem_bytes);
  config.stream = stream;
  config.attrs = dependent ? attrs : attrs + 1;
  config.numAttrs = (dependent ? 1 : 0) + (cluster > 1 ? 1 : 0);
  SGEMM_CUDA_TRY(cudaLaunchKernelEx(&config, kernel, args...));
  return SGEMM_CUDA_STATUS(cudaGetLastError());
}

template <class Cfg>
Status run_config(const GemmArgs& g, const Fp32x3Slices& slices, void* workspace, std::size_t bytes,
                  cudaStream_t stream) {
  SGEMM_RETURN_IF_ERROR(check_workspace(g, slices, workspace, bytes));
  DeviceInfo dev;
  SGEMM_RETURN_IF_ERROR(device_info(&dev));
  if (dev.major != 9 || dev.minor != 0)
    return FailedPrecondition("device: fp32x3 needs an sm_90 GPU (Hopper), this one is sm_" +
                              std::to_string(dev.major) + std::to_string(dev.minor));
  // Where the GEMM kernel splits A and K is split and long, it looks for A's infinities
  // itself (kCheckA: C is not written before the slices' sum, so the mark is soon enough),
  // and kernel 1 does B alone (a prepared B keeps kernel 1 for A, which carries B's mark).
  // Measured on one H200: K from 4096 to 40000 with split K 5-7% faster; 1024^3 (split
  // in two) 1-2% slower; K whole no faster (the read leaves A in L2 for the GEMM kernel),
  // with the check costing up to 1% (bench/results/2026-12-02_h200_fp32x3-split-pass).
  constexpr bool kCanCheckA = Cfg::kSplitAInKernel && Cfg::kClusterM == 1;
  const bool a_checked_in_kernel =
      kCanCheckA && slices.count > 1 && g.shape.k >= kCheckAMinK && g.b_prepared == nullptr;
  static std::atomic<uint64_t> smem_raised{0}, smem_raised_check_a{0};
  auto kernel = fp32x3::fp32x3_gemm_kernel<Cfg>;
  if constexpr (kCanCheckA)
    if (a_checked_in_kernel) kernel = fp32x3::fp32x3_gemm_kernel<Cfg, true>;
  SGEMM_RETURN_IF_ERROR(
      ensure_smem_limit(kernel, Cfg::kSmemBytes, a_checked_in_kernel ? smem_raised_check_a : smem_raised));

  if (Cfg::kSplitAInKernel && !a_tma_describable(g))
    return InvalidArgument("a: this variant reads A with TMA: needs a 16-byte aligned a and lda % 4 == 0");
  float* a_planes = Cfg::kSplitAInKernel ? nullptr : a_planes_of(workspace);
  // A prepared B (fp32x3_prepare_b) is read where it is: kernel 1 does A alone.
  const bool own_b = g.b_prepared == nullptr;
  float* b_planes = own_b ? b_planes_of(workspace, g.shape) : static_cast<float*>(const_cast<void*>(g.b_prepared));
  // Infinities in A or B: the kernels below step aside for the FFMA fallback (fp32x3_sgemm.cuh).
  const fp32x3::InfMark inf = inf_mark_of(workspace, g.shape, slices, own_b);
  if (own_b && a_checked_in_kernel) {
    SGEMM_RETURN_IF_ERROR(launch_split(g, nullptr, b_planes, inf, stream, SplitWhich::kBOnly));
  } else if (own_b) {
    SGEMM_RETURN_IF_ERROR(launch_split(g, a_planes, b_planes, inf, stream));
  } else {
    SGEMM_RETURN_IF_ERROR(
        launch_split(g, a_planes, nullptr, inf, stream, SplitWhich::kAOnly, prepared_b_mark(g.b_prepared, g.shape)));
  }

  constexpr int kCl = Cfg::kClusterM;
  CUtensorMap map_a, map_b;
  if constexpr (Cfg::kSplitAInKernel) {
    SGEMM_RETURN_IF_ERROR(make_raw_map(&map_a, g.a, g.shape.m, g.shape.k, g.lda, Cfg::kBM));
  } else {
    SGEMM_RETURN_IF_ERROR(make_plane_map(&map_a, a_planes, g.shape.m, g.shape.k, Cfg::kBM, 2));
  }
  SGEMM_RETURN_IF_ERROR(make_plane_map(&map_b, b_planes, g.shape.n, g.shape.k, Cfg::kBBoxRows, kCl == 1 ? 2 : 1));

  const int64_t tiles_m = (g.shape.m + Cfg::kBM - 1) / Cfg::kBM;
  const int64_t units = (tiles_m + kCl - 1) / kCl * ((g.shape.n + Cfg::kBN - 1) / Cfg::kBN) * slices.count;
  const int k_blocks = int((g.shape.k + fp32x3::kBK - 1) / fp32x3::kBK);
  const int m = int(g.shape.m), n = int(g.shape.n);
  // Split K: the kernel writes each slice's A*B into the workspace; the reduction applies
  // alpha and beta.
  const bool split = slices.count > 1;
  float* const out = split ? partials_of(workspace, g.shape, own_b) : g.c;
  const int64_t ld_out = split ? g.shape.n : g.ldc;
  const int64_t split_stride = split ? g.shape.m * g.shape.n : 0;
  const float alpha = split ? 1.0f : g.alpha, beta = split ? 0.0f : g.beta;
  const bool c_pairs = (reinterpret_cast<uintptr_t>(out) & 7u) == 0 && ld_out % 2 == 0;
  const bool dependent = 2.0 * double(m) * double(n) * double(g.shape.k) <= kDependentLaunchMaxFlops;
  // After the GEMM kernel: the slices' sum (split K), then the fallback for infinities.
  auto finish = [&]() -> Status {
    if (split) {
      const int64_t blocks = std::min<int64_t>((g.shape.m * g.shape.n + 255) / 256, int64_t(dev.sm_count) * 8);
      SGEMM_RETURN_IF_ERROR(launch_after(dependent, fp32x3::fp32x3_reduce_splits_kernel, dim3(unsigned(blocks)),
                                         dim3(256), 0, 1, stream, static_cast<const float*>(out), int(slices.count),
                                         split_stride, m, n, g.alpha, g.beta, g.c, g.ldc, inf));
    }
    const int64_t tiles = ((g.shape.m + 63) / 64) * ((g.shape.n + 63) / 64);
    return launch_after(dependent, fp32x3::fp32x3_ffma_fallback_kernel,
                        dim3(unsigned(std::min<int64_t>(tiles, int64_t(dev.sm_count) * 4))), dim3(256), 0, 1, stream,
                        g.a, g.lda, g.b, g.ldb, g.c, g.ldc, m, n, int(g.shape.k), g.alpha, g.beta, inf);
  };
  int64_t grid = std::min<int64_t>(units, dev.sm_count / kCl) * kCl;
  if constexpr (kCl > 1) {
    cudaLaunchConfig_t config{};
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = kCl;
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    config.blockDim = dim3(Cfg::kThreads);
    config.dynamicSmemBytes = Cfg::kSmemBytes;
    config.attrs = &attr;
    config.numAttrs = 1;
    config.gridDim = dim3(unsigned(grid));
    int clusters = 0;  // how many clusters fit at once (GPC sizes limit it below #SMs / 2)
    SGEMM_CUDA_TRY(cudaOccupancyMaxActiveClusters(&clusters, kernel, &config));
    if (clusters < 1) return Internal("fp32x3: no cluster of " + std::to_string(kCl) + " CTAs fits on this device");
    grid = std::min<int64_t>(units, clusters) * kCl;
  }
  SGEMM_RETURN_IF_ERROR(launch_after(dependent, kernel, dim3(unsigned(grid)), dim3(Cfg::kThreads), Cfg::kSmemBytes, kCl,
                                     stream, map_a, map_b, m, n, k_blocks, int(slices.slice_blocks), split_stride,
                                     alpha, beta, out, ld_out, c_pairs, inf));
  return finish();
}

struct Variant {
  const char* name;
  Status (*run)(const GemmArgs&, const Fp32x3Slices&, void*, std::size_t, cudaStream_t);
};

// Variants whose name lacks "promote" accumulate all of K inside wgmma: faster on short
// K, but their error grows with K (measured 1.7e-6 to 3.8e-6 at k = 2048..8192 against
// cuBLAS SGEMM's 2e-7; docs/kernels.md). The picker uses promoted variants only.
constexpr Variant kVariants[] = {
    {"pingpong_128x128_s3", run_config<PingpongTile>},
    {"pingpong_64x128_s4_promote1", run_config<PingpongPromote>},
    {"coop_128x128_s3_promote1", run_config<CoopPromote1>},
    {"coop_128x128_s3", run_config<Coop>},
    {"coop_128x128_s3_promote1_cluster2", run_config<CoopPromote1Cluster2>},
    {"coop_128x128_s4_promote1_splitA", run_config<CoopPromote1SplitA>},
    {"coop_128x128_s4_promote1_splitA_cvt", run_config<CoopPromote1SplitACvt>},
    {"coop_128x128_s4_promote1_splitA_group16", run_config<CoopPromote1SplitAGroup16>},
    {"coop_128x128_s4_promote2_splitA_group16", run_config<CoopPromote2SplitAGroup16>},
};
constexpr int kNumVariants = int(sizeof(kVariants) / sizeof(kVariants[0]));
enum VariantId {
  kPingpongTile = 0,
  kPingpongPromote,
  kCoopPromote1,
  kCoop,
  kCoopPromote1Cluster2,
  kCoopPromote1SplitA,
  kCoopPromote1SplitACvt,
  kCoopPromote1SplitAGroup16,
  kCoopPromote2SplitAGroup16
};
static_assert(kCoopPromote2SplitAGroup16 + 1 == kNumVariants, "VariantId must list kVariants in order");

}  // namespace

Status fp32x3_can_implement(const GemmArgs& g) {
  const GemmShape& s = g.shape;
  SGEMM_RETURN_IF_ERROR(check_gemm_args(g, {.max_k = INT_MAX - 3}));
  // TMA: a plane's byte stride must stay below 2^40; the tile count must fit an int.
  const int64_t kp = padded_k(s.k);
  if (s.m * kp * 4 >= (int64_t{1} << 40)) return InvalidArgument("shape.m: m * k too large for the tensor-copy unit");
  if (s.n * kp * 4 >= (int64_t{1} << 40)) return InvalidArgument("shape.n: n * k too large for the tensor-copy unit");
  if (((s.m + 63) / 64) * ((s.n + 127) / 128) > INT_MAX) return InvalidArgument("shape: m x n has too many tiles");
  return Status::Ok();
}

std::size_t fp32x3_workspace_bytes(const GemmShape& s) {
  return workspace_bytes_for(s, fp32x3_slices(s, current_sm_count()));
}

std::size_t fp32x3_workspace_bytes(const GemmShape& s, int64_t slices) {
  return workspace_bytes_for(s, fp32x3_slices_of_count(s, slices));
}

std::size_t fp32x3_workspace_bytes(const GemmShape& s, int64_t slices, bool b_prepared) {
  return workspace_bytes_for(s, fp32x3_slices_of_count(s, slices), !b_prepared);
}

std::size_t fp32x3_prepared_b_bytes(const GemmShape& s) { return std::size_t(b_planes_bytes(s) + kAlignBytes); }

Status fp32x3_prepare_b(const GemmArgs& args, void* prepared, std::size_t bytes, cudaStream_t stream) {
  SGEMM_RETURN_IF_ERROR(fp32x3_can_implement(args));
  const std::size_t need = fp32x3_prepared_b_bytes(args.shape);
  if (prepared == nullptr || bytes < need)
    return InvalidArgument("prepared: needs " + std::to_string(need) + " bytes, got " +
                           std::to_string(prepared == nullptr ? 0 : bytes));
  const fp32x3::InfMark mark = prepared_b_mark(prepared, args.shape);
  SGEMM_CUDA_TRY(cudaMemsetAsync(mark.word, 0, sizeof(*mark.word), stream));
  return launch_split(args, nullptr, static_cast<float*>(prepared), mark, stream, SplitWhich::kBOnly);
}

int64_t fp32x3_k_slices(const GemmShape& shape) {
  if (shape.m < 1 || shape.n < 1 || shape.k < 1) return 1;
  return fp32x3_slices(shape, current_sm_count()).count;
}

int fp32x3_variant_count() { return kNumVariants; }

std::string_view fp32x3_variant_name(int variant) {
  if (variant < 0 || variant >= kNumVariants) return "unknown";
  return kVariants[variant].name;
}

int fp32x3_pick_variant(const GemmArgs& args) {
  // The registry's row (common/kernel_registry.h); the SM count does not change the variant.
  return select_kernel_row_of(KernelKind::kFp32x3, args.shape, kernel_layout(args), 1).row->variant;
}

Status fp32x3_sgemm_variant(const GemmArgs& args, int variant, void* workspace, std::size_t bytes,
                            cudaStream_t stream) {
  SGEMM_RETURN_IF_ERROR(fp32x3_can_implement(args));
  if (variant < 0 || variant >= kNumVariants)
    return InvalidArgument("variant: must be in [0, " + std::to_string(kNumVariants) + "), got " +
                           std::to_string(variant));
  return kVariants[variant].run(args, fp32x3_slices(args.shape, current_sm_count()), workspace, bytes, stream);
}

Status fp32x3_sgemm_variant_sliced(const GemmArgs& args, int variant, int64_t slices, void* workspace,
                                   std::size_t bytes, cudaStream_t stream) {
  SGEMM_RETURN_IF_ERROR(fp32x3_can_implement(args));
  if (variant < 0 || variant >= kNumVariants)
    return InvalidArgument("variant: must be in [0, " + std::to_string(kNumVariants) + "), got " +
                           std::to_string(variant));
  if (slices < 1) return InvalidArgument("slices: must be >= 1, got " + std::to_string(slices));
  return kVariants[variant].run(args, fp32x3_slices_of_count(args.shape, slices), workspace, bytes, stream);
}

Status fp32x3_split_operands(const GemmArgs& args, void* workspace, std::size_t bytes, cudaStream_t stream) {
  SGEMM_RETURN_IF_ERROR(fp32x3_can_implement(args));
  const Fp32x3Slices whole = fp32x3_slices_of_count(args.shape, 1);
  SGEMM_RETURN_IF_ERROR(check_workspace(args, whole, workspace, bytes));
  return launch_split(args, a_planes_of(workspace), b_planes_of(workspace, args.shape),
                      inf_mark_of(workspace, args.shape, whole), stream);
}

Status fp32x3_sgemm(const GemmArgs& args, void* workspace, std::size_t bytes, cudaStream_t stream) {
  SGEMM_RETURN_IF_ERROR(fp32x3_can_implement(args));
  return kVariants[fp32x3_pick_variant(args)].run(args, fp32x3_slices(args.shape, current_sm_count()), workspace, bytes,
                                                  stream);
}

Status fp32x3_sgemm_sliced(const GemmArgs& args, int64_t slices, void* workspace, std::size_t bytes,
                           cudaStream_t stream) {
  SGEMM_RETURN_IF_ERROR(fp32x3_can_implement(args));
  if (slices < 1) return InvalidArgument("slices: must be >= 1, got " + std::to_string(slices));
  return kVariants[fp32x3_pick_variant(args)].run(args, fp32x3_slices_of_count(args.shape, slices), workspace, bytes,
                                                  stream);
}

}  // namespace sgemm
