// Which GPU kernel runs a product when the request does not name one: a table
// of shape classes with the kernel measured faster on each (sgemm-bench, the
// same run as cuBLAS; bench/results/ holds the runs the rows cite). Pure C++:
// the engine passes the kernels its devices offer. The engine asks about the
// shape one kernel launch computes (plan.h, kernel_block_shape), and where it
// can, times the table's pick against the other kernel on that shape on the
// GPU once and keeps the faster (prefer_measured; docs/engine.md, "Kernel
// choice").
//
// Ping-pong (with its GEMV and thin-tile variants) takes a single row or column
// of C, C at most 64 rows high, and what no row covers (1024-sized and smaller
// products, short K); cuBLAS takes the classes where ping-pong measured below 98%
// of it: large C (90-96%), thin C with a long K (84-93%), few tiles with a very
// long K (90%) (docs/kernels.md).
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/gemm_types.h"
#include "common/kernel_registry.h"
#include "common/status.h"

namespace sgemm {

struct KernelChoiceRow {
  const char* shape_class;                  // "m = 1 or n = 1", for logs and docs
  bool (*matches)(const GemmShape& shape);  // whether a shape is in the class
  KernelKind kernel;                        // the faster kernel on this class
  const char* evidence;                     // the measurement: ratio, device, results file
};

// The rows in order; the first that matches decides.
std::span<const KernelChoiceRow> kernel_choice_table();

// The first row whose class holds `shape`; null when none does.
const KernelChoiceRow* find_kernel_choice(const GemmShape& shape);

// The kernel for `shape`: the first matching row's kernel when `available`
// has it, else `fallback` (the engine's configured default).
KernelKind choose_kernel(const GemmShape& shape, KernelKind fallback, const std::vector<KernelKind>& available);

// Between the table's pick and the other kernel, both timed on the device on
// the same shape: the other when it ran more than `margin` (a fraction) faster,
// else the table's pick, so near-ties keep one answer from run to run.
KernelKind prefer_measured(KernelKind table_pick, double table_ms, KernelKind other, double other_ms, double margin);

// What a plan's reason adds when the table, not the default, chose `chosen`
// for `shape`: "; kernel K for CLASS (measured table, ...)"; "" otherwise.
std::string kernel_choice_reason(const GemmShape& shape, KernelKind chosen, KernelKind fallback);

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
// GPU with `sm_count` SMs: no side thinner than 256, K at least 256, and its work
// units (128x128 tiles times the slices of K it cuts, common/fp32x3_slices.h) at
// least a quarter of a wave (sgemm-bench, one H100: 1.1-1.4x cuBLAS SGEMM at 256^2
// with K 4096-131072, 1.2-2.5x from 512 wide, 2.3-2.6x from 2048^3 up).
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
};

struct KernelSelection {
  KernelKind kind = KernelKind::kPingpong;
  std::string reason;  // "; fp32 contract: fp32x3 (...)" for the plan's reason; "" when nothing to add
};

// The one kernel choice. INVALID_ARGUMENT naming `kernel` when the named kernel
// cannot serve the precision; FAILED_PRECONDITION when the precision's or the
// named kernel is not available. Pure.
//   tf32, fp32x3:  their own kernel (naming another is an error).
//   fp32-ffma:     the named FFMA kernel, else the measured table among the FFMA kernels.
//   fp32:          the named FFMA kernel, else fp32x3 where it is available, faster and
//                  keeps the contract, else cuBLAS SGEMM where fp32_needs_cublas, else as
//                  fp32-ffma.
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
