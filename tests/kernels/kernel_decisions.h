// Every kernel decision the host code makes, over a fixed grid: the golden
// record that keeps a refactoring of the choosers (server/planner/kernel_choice.h,
// the kernel registry) from changing what runs. Pure host code, no GPU.
//
// One line per (shape, SM count, beta), tab-separated:
//   m n k sm_count beta  fp32 fp32-ffma tf32 fp32x3 fp32@no-fp32x3  fp32x3@lda=k fp32x3@a+4  pingpong
// where each precision field is the concrete kernel row its selection runs with A
// 16-byte aligned and lda = round_up(k, 4) (the engine's layout), with every GPU
// kernel available ("fp32@no-fp32x3": on a GPU without fp32x3); the next two
// fields are the fp32x3 row with lda = k and with A 4 bytes off a 16-byte
// boundary (fp32x3's variant reads A's alignment); the last is the SIMT row the
// ping-pong family runs for the shape (its own choice, chosen or not).
//
// Regenerating the record (tests/kernels/kernel_decisions.tsv.xz) is for a
// change of decision that a GPU measurement justifies (docs/kernels.md,
// "Kernel registry"); the test compares against it bit for bit.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/gemm_types.h"

namespace sgemm {

// The sizes each of m, n and k takes: 1 to 65536, odd, thin and off-by-one
// sizes around the choosers' thresholds; k also 131072.
std::vector<int64_t> decision_grid_mn();
std::vector<int64_t> decision_grid_k();
// SM counts: H100 SXM, H100 PCIe, and a smaller part.
std::vector<int> decision_grid_sm_counts();

// The header line (field names) and one line per grid point, in grid order.
std::string kernel_decisions_header();
std::string kernel_decision_line(const GemmShape& shape, int sm_count, float beta);
void for_each_kernel_decision(const std::function<void(const std::string& line)>& emit);

// The record's compact form: first one line "@ID<TAB>ROW" per distinct row name
// (IDs 0, 1, ... in order of first use), then the header and the lines with each
// row name (the fields after beta) replaced by its ID.
std::string encode_kernel_decisions(const std::vector<std::string>& lines);
// The lines of a compact record, row names restored; false with `error` set when
// the record is malformed.
bool decode_kernel_decisions(const std::string& record, std::vector<std::string>* lines, std::string* error);

}  // namespace sgemm
