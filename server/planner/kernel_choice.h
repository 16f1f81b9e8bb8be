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
// long K (90%) (docs/kernels.md, issue 14).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "common/gemm_types.h"

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

}  // namespace sgemm
