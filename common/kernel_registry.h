// The kernel registry: every concrete GPU kernel the engine can run is one row
// (its concrete name, family, architecture, precision class, the shapes it takes,
// its tile and the scratch it needs), and select_kernel_row_of() is the one place
// that picks a row within a family. Pure C++, no CUDA: the planner
// (server/planner/kernel_choice.h, select_kernel_row) and the launchers in kernels/
// (pingpong_sgemm(), fp32x3_sgemm() without a row) ask the same function, so every
// threshold of the choice is written once, here. The callable parts (can_implement
// over the shared argument check, workspace_bytes, run) stay in kernels/, reached
// by the row's `variant` index.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "common/gemm_types.h"

namespace sgemm {

// Where a row's code runs.
enum class KernelArch {
  kSm90,    // built for the preset's CMAKE_CUDA_ARCHITECTURES (sm_90)
  kSm90a,   // wgmma / setmaxnreg / TMA: the sm_90a object library (kernels/CMakeLists.txt)
  kCublas,  // a cuBLAS routine: any GPU cuBLAS supports
  kHost     // the CPU engine's BLAS
};
std::string_view kernel_arch_name(KernelArch arch);

// Scratch a row needs from its caller (kernels/ computes the bytes).
enum class KernelWorkspace {
  kNone,
  kSplitKSlices,    // one m x round_up(n, 4) fp32 slice per split of K
  kStreamK,         // partial tiles of the last wave's stream-K pieces, and their flags
  kGemvSlices,      // the K-split partial rows of a GEMV
  kFp32x3Planes,    // the tf32 hi/lo planes of A and B, and the K slices' partial products
  kLibraryInternal  // the library's own (cuBLAS, OpenBLAS)
};

// A row's block tile: C rows and columns of one work unit, K per stage, and how
// many units one SM holds at once (resident blocks, or the rings of the TMA kernel).
struct KernelTile {
  int bm = 0, bn = 0, bk = 0, per_sm = 0;
};

struct KernelRow {
  std::string_view name;        // what it is: data path, tile, schedule ("simt_tma_128x256x32_w64x64_t8x16_s4")
  KernelKind family;            // the backend that runs it (GemmBackend::kind())
  KernelArch arch;              // where its code runs
  ArithmeticClass arithmetic;   // the precision class: which contracts it may serve
  KernelTile tile;              // {0, 0, 0, 0} for GEMV and cuBLAS
  KernelWorkspace workspace;    // what scratch it asks for
  bool one_row_or_column_only;  // GEMV rows: m == 1 or n == 1 only; the others take every shape
  int variant;                  // index into the family's launcher table in kernels/; -1 for cuBLAS
};

// Every row, grouped by family.
std::span<const KernelRow> kernel_registry();
// The row named `name`; null when none is.
const KernelRow* find_kernel_row(std::string_view name);
// Pure: whether `row` takes `shape` (sizes >= 1; the GEMV rows one row or column).
// Pointer and leading-dimension checks are kernels/'s can_implement.
bool kernel_row_accepts(const KernelRow& row, const GemmShape& shape);

// Pure: whether C is one row or one column (m == 1 or n == 1): the memory-bound GEMV
// shapes, which the GEMV rows alone take and the SIMT family always runs as GEMV.
bool one_row_or_column(const GemmShape& shape);

// What a row choice may read of the operands' layout (kernels/ derives it from
// GemmArgs; the planner assumes the engine's own staging, the default).
struct KernelLayout {
  bool a_16byte_aligned = true;  // A's base address
  int64_t lda = 0;               // A's leading dimension; 0: round_up(k, 4), as the engine pads A's rows
};

// Pure: whether TMA can read A of `shape` in place with `layout`: a 16-byte aligned base,
// lda % 4 == 0 and a row stride below 2^40 bytes (fp32x3 then splits A in the kernel).
bool a_tma_readable(const GemmShape& shape, const KernelLayout& layout);

// A chosen row and what it runs with.
struct KernelPick {
  const KernelRow* row = nullptr;
  int64_t k_slices = 1;  // fp32x3's cut of K (common/fp32x3_slices.h); 1 for the other rows
  // The name reported for what ran: the row's, with "_splitkN" where fp32x3 cuts K in N.
  std::string name() const;
};

// The one choice of a row within `family` for one launch of `shape` on a GPU with
// `sm_count` SMs (measured on one H100; the reasons sit with each rule in
// kernel_registry.cc). Pure. Never null for a GPU family (kPingpong, kFp32x3,
// kCublas, kTf32); kOpenblas gets its host row.
KernelPick select_kernel_row_of(KernelKind family, const GemmShape& shape, const KernelLayout& layout, int sm_count);

// ---- Arithmetic the SIMT launchers and the choice share ---------------------

// Split-K count for a tile of bm x bn with `per_sm` resident units per SM: enough
// (tile, split) units for one full wave, each split keeping at least `min_k` of K.
int simt_split_k_count(const GemmShape& shape, int64_t bm, int64_t bn, int sm_count, int per_sm, int64_t min_k = 1024);
// The split count a launch really uses: clamped to [1, min(k tiles of bk, 64)], no empty split.
int simt_effective_splits(const GemmShape& shape, int bk, int splits);
// Whether the TMA-fed kernel's tile runs stream-K for `shape` (else whole tiles): the
// last wave is partial and at most 60% full, and its tails can be cut (tma_simt_sgemm.h).
bool tma_simt_stream_k_applies(const GemmShape& shape, const KernelTile& tile, int sm_count);

}  // namespace sgemm
