// Planner types: how one GEMM is split across devices. Pure C++: no CUDA.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/gemm_args.h"

namespace sgemm {

enum class SplitMode {
  kAuto,    // let the planner decide (requests only; a Plan never holds it)
  kSingle,  // whole product on one device
  kRows,    // each device computes a block of rows of C (all of B on every device)
  kK,       // each device computes a K slice; partial Cs are summed with NCCL
};

std::string_view split_mode_name(SplitMode mode);
bool parse_split_mode(std::string_view text, SplitMode* out);

// One device's part of a product: rows [row_begin, row_end) of C, using
// columns [k_begin, k_end) of A and the same rows of B.
struct Shard {
  int device = -1;
  int64_t row_begin = 0;
  int64_t row_end = 0;
  int64_t k_begin = 0;
  int64_t k_end = 0;
  friend bool operator==(const Shard&, const Shard&) = default;
};

}  // namespace sgemm
