// Which GPU kernel runs a product when the request does not name one. The choice
// is data: shape classes (kernel_shape_classes(), each with the shapes
// sgemm-bench --speed-table measures for it) and the measured rates of every fp32
// kernel (FFMA and fp32x3) on those shapes (kernel_speeds.h:
// server/planner/kernel_speeds.csv, compiled in). A launch runs, among the kernels
// that keep the request's precision contract, the one measured fastest at the
// nearest measured shape of its class, on the GPU that runs it. Pure C++: the
// engine passes the kernels its devices offer and the GPU's name. The engine asks
// about the shape one kernel launch computes (plan.h, kernel_block_shape), and
// where it can, times an FFMA pick against the other FFMA kernel on that exact
// shape on the GPU once and keeps the faster (prefer_measured, the engine's tuner:
// a cache over this choice; docs/engine.md, "Kernel choice").
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/gemm_types.h"
#include "common/kernel_registry.h"
#include "common/status.h"
#include "server/planner/kernel_speeds.h"

namespace sgemm {

// A class of shapes: the nearest measured shape of a launch is sought within its
// class, so that a measurement never speaks for a shape of another tile family.
struct KernelShapeClass {
  const char* id;                       // "narrow32": the speed table's shape_class
  const char* description;              // "n <= 32 with m >= 1024, k >= 2048", for logs and docs
  bool (*matches)(const GemmShape& s);  // whether a shape is in the class
  std::span<const GemmShape> probes;    // the shapes sgemm-bench --speed-table measures for it
};

// The classes in order; the first that matches holds a shape. The last one
// ("other") holds every shape.
std::span<const KernelShapeClass> kernel_shape_classes();
const KernelShapeClass& kernel_shape_class(const GemmShape& shape);

// The GPU a choice is for, and the data it reads.
struct MeasuredOn {
  std::string_view device;               // the GPU's name (DeviceInfo::name)
  int sm_count = 132;                    // its SMs (KernelSpeeds::device_for)
  const KernelSpeeds* speeds = nullptr;  // null: KernelSpeeds::built_in()
};

struct KernelChoice {
  KernelKind kind = KernelKind::kPingpong;
  // "; kernel K for SHAPE (class C: ...; at the nearest measured shape S, R TFLOP/s
  // against F's R', on DEVICE, server/planner/kernel_speeds.csv)" when the data
  // chose other than `fallback`; "" otherwise.
  std::string reason;
  // The kernels of `available` with no rate at the nearest measured shape (all of
  // them where the class has no rows for the device).
  std::vector<KernelKind> unmeasured;
};

// The kernel for one launch of `shape`: among `available`, the one with the
// highest rate at the nearest measured shape of `shape`'s class (KernelSpeeds::
// nearest) on the device the data holds for `on` (a tie keeps `fallback`).
// `fallback` (the engine's configured default) when the class has no rows for the
// device, or the nearest shape none for `fallback` while `available` holds it: no
// kernel is preferred to it without a measurement.
KernelChoice choose_kernel(const GemmShape& shape, KernelKind fallback, const std::vector<KernelKind>& available,
                           const MeasuredOn& on);

// Between the choice's pick and the other kernel, both timed on the device on
// the same shape: the other when it ran more than `margin` (a fraction) faster,
// else the pick, so near-ties keep one answer from run to run.
KernelKind prefer_measured(KernelKind table_pick, double table_ms, KernelKind other, double other_ms, double margin);

// ---- The precision contract and the one selection -------------------------
//
// Every request's kernel is chosen by select_kernel, from the request's
// precision (a contract, common/gemm_types.h), the kernel it names if any, and
// the shape one kernel launch computes. The engine validates with it and runs
// what it returns; sgemm-bench reports what it returns as "fp32 default".

// Where fp32x3's error (cw = max |c - ref| / (|A||B|) against fp64) was measured
// no larger than cuBLAS SGEMM's on the same product, on uniform, wide-exponent
// ((U - 0.5) * exp(4 N(0,1))) and cancelling inputs (one H100; sgemm-bench
// --accuracy; tests/kernels/fp32_contract_test.cc holds it on the rule's edges):
//   min_k <= k:  with fewer terms fp32x3's split error (up to ~3 * 2^-24 per
//                product) is not hidden under SGEMM's accumulation error (k = 16 and
//                64: 1.1-1.8x cuBLAS's cw; k >= 128: 0.14-0.9x).
// Where cuBLAS SGEMM splits K (few tiles, long K: sgemm_may_split_k) its sums are
// short and its error small; there fp32x3 cuts K into slices of at most
// slice_k_blocks k-blocks of 32 (common/fp32x3_slices.h) and sums them pairwise
// (unsliced it measured 1.0-4.6x cuBLAS's cw there). What is left is fp32x3's own
// split error per product, which shows where cuBLAS's sums get very short: cuBLAS
// cuts K until its tiles fill the GPU, so its sums are about k * tiles / sm_count
// long (tiles of 128x128). Below min_cublas_sum_k fp32x3 measured 1.13x (512^2 x
// 2048: sums of about 250); from there on 0.21-0.97x on 22 shapes from 1024^3 and
// 256^2 x 16384 to 1536^2 x 65536 and 256^2 x 131072, the closest 0.93-0.97x
// (wide-exponent inputs at 256^2 x 32768, 256x1024x8192, 1024x512x2048).
// Elsewhere cuBLAS keeps whole K sums and fp32x3 measured 0.13-0.71x.
struct Fp32x3ContractRule {
  int64_t min_k;
  int64_t slice_k_blocks;
  int64_t min_cublas_sum_k;
};
Fp32x3ContractRule fp32x3_contract_rule();
// Pure: whether fp32x3 keeps the fp32 contract on the product `shape` (the
// request's whole product: its inputs are what cuBLAS would be given) on a GPU of
// `sm_count` SMs.
bool fp32x3_keeps_fp32_contract(const GemmShape& shape, int sm_count);
// Pure: whether fp32x3 runs the launch `shape` faster than the FFMA kernels on a
// GPU with `sm_count` SMs, for a GPU whose measured speeds hold no fp32x3 rate: no side thinner than 256, K at least
// 256, and its work units (128x128 tiles times the slices of K it cuts, common/fp32x3_slices.h) at least a quarter of a
// wave (sgemm-bench, one H100: 1.1-1.4x cuBLAS SGEMM at 256^2 with K 4096-131072, 1.2-2.5x from 512 wide, 2.3-2.6x from
// 2048^3 up).
bool fp32x3_outruns_ffma(const GemmShape& shape, int sm_count);
// Pure: whether cuBLAS SGEMM's own error is what a product's fp32 contract is
// held to when fp32x3 does not serve it: the region where cuBLAS splits K
// (m, n >= 256, k >= 2048, sgemm_may_split_k). An fp32 request there runs cuBLAS
// SGEMM (ping-pong measured 2.6-14x cuBLAS's cw at 1536^2 x 4096 to 65536).
// Thinner products keep the FFMA table (not measured).
bool fp32_needs_cublas(const GemmShape& shape);

struct KernelQuery {
  GemmShape shape;                                  // what one kernel launch computes (the plan's largest block)
  GemmShape product;                                // the request's whole product (the contract's); 0x0x0 = `shape`
  Precision precision = Precision::kFp32;           // the request's contract
  std::optional<KernelKind> named;                  // the kernel the request names, if any (an FFMA kernel)
  KernelKind ffma_default = KernelKind::kPingpong;  // the engine's configured FFMA kernel
  std::vector<KernelKind> available;                // what the devices offer
  int sm_count = 132;                               // SMs of the GPU that runs it
  float beta = 0.0f;                                // the request's beta (no rule reads it)
  KernelLayout layout;                              // A's alignment and lda (default: the engine's staging)
  std::string device;                               // the GPU's name: whose measured speeds decide
  const KernelSpeeds* speeds = nullptr;             // null: the built-in table (kernel_speeds.h)
};

struct KernelSelection {
  KernelKind kind = KernelKind::kPingpong;
  std::string reason;  // "; fp32 contract: fp32x3 (...)" for the plan's reason; "" when nothing to add
};

// The one kernel choice. INVALID_ARGUMENT naming `kernel` when the named kernel
// cannot serve the precision; FAILED_PRECONDITION when the precision's or the
// named kernel is not available. Pure.
//   tf32, fp32x3:  their own kernel (naming another is an error).
//   fp32-ffma:     the named FFMA kernel, else choose_kernel among the FFMA kernels.
//   fp32:          the named FFMA kernel, else choose_kernel among the kernels that keep
//                  the contract on the product: cuBLAS SGEMM where fp32_needs_cublas,
//                  else the FFMA kernels; and fp32x3 where fp32x3_keeps_fp32_contract.
//                  Where the measured speeds hold no fp32x3 rate at the launch's nearest
//                  measured shape, fp32x3_outruns_ffma decides between fp32x3 and the
//                  FFMA pick.
StatusOr<KernelSelection> select_kernel(const KernelQuery& query);

// The one choice of the concrete kernel: select_kernel's family for the query, then
// the registry's row within it (common/kernel_registry.h, select_kernel_row_of: the
// same function the launchers in kernels/ ask when given no row, so each threshold is
// written once). The row's name is what summaries, timings and traces report.
struct KernelRowSelection {
  KernelPick pick;     // the concrete row and its cut of K
  std::string reason;  // as KernelSelection::reason
  KernelKind kind() const { return pick.row->family; }
};
StatusOr<KernelRowSelection> select_kernel_row(const KernelQuery& query);

// The kernel families that may serve `p` among `available`, fastest class first
// (GetInfo's contracts).
std::vector<KernelKind> kernels_serving(Precision p, const std::vector<KernelKind>& available);

// ---- Batched and grouped products (server/engine/batch.h) -----------------
//
// A batch runs as one batched launch per GPU, chosen here as a row of
// batch_kernel_table() (implemented in batch_kernel_choice.cc): a strided batch
// (every product one shape) or a group (shapes of their own), in the arithmetic
// of the request's precision. The summary's kernel names the row.
enum class BatchLaunch { kStridedBatched, kGrouped };

struct BatchKernelRow {
  const char* name;    // "cublas_sgemm_strided_batched": the summary's kernel
  BatchLaunch launch;  // which layout it runs
  ArithmeticClass
      arithmetic;     // kFfma: CUBLAS_COMPUTE_32F (cuBLAS SGEMM's own arithmetic); kTf32: the TF32 compute type
  KernelKind family;  // the backend kind the devices must offer for it (kCublas or kTf32)
};
std::span<const BatchKernelRow> batch_kernel_table();

struct BatchKernelQuery {
  BatchLaunch launch = BatchLaunch::kStridedBatched;
  Precision precision = Precision::kFp32;  // the request's contract
  std::optional<KernelKind> named;         // the kernel the request names, if any
  std::vector<KernelKind> available;       // what the devices offer
};

struct BatchKernelSelection {
  const BatchKernelRow* row = nullptr;
  std::string reason;  // for the plan's reason: why this row keeps the precision's contract
};

// The one choice for a batch. Pure.
//   fp32, fp32-ffma: cuBLAS SGEMM's batched arithmetic (CUBLAS_COMPUTE_32F), which is
//                    the fp32 contract's own reference and fp32 FMAs only;
//   tf32:            the same launches with the TF32 compute type;
//   fp32x3:          FAILED_PRECONDITION (no batched 3xTF32 kernel: send its products singly).
// A named kernel must be cublas (fp32, fp32-ffma): INVALID_ARGUMENT naming `kernel`
// otherwise; FAILED_PRECONDITION when the row's family is not available.
StatusOr<BatchKernelSelection> select_batch_kernel(const BatchKernelQuery& query);

}  // namespace sgemm
