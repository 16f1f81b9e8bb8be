// Placement of resident matrices (docs/resident.md): where the parts of a
// matrix kept by the server live, which layout a plan needs, and the copies
// that turn one layout into another. Pure C++ (no CUDA): the CUDA engine
// allocates the pieces and issues the copies; these functions decide.
//
// A layout is a list of pieces, each a range of a matrix's rows on one
// device. A matrix used as B under a row split (or on one GPU) needs all of
// its rows on every device that computes; under a K split device i needs
// rows [k_i, k_i+1) of B, its K slice. A layout that already holds what a
// plan needs is used in place ("keep the layout for reuse"); otherwise
// plan_move() says how to build the needed layout from the current one (peer
// copies between GPUs, never through the host) and the needed layout replaces
// the current one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "server/planner/plan.h"

namespace sgemm {

// Rows [row_begin, row_end) of a matrix, stored densely on `device` (CUDA
// ordinal; -1 for host memory).
struct Piece {
  int device = -1;
  int64_t row_begin = 0;
  int64_t row_end = 0;
  int64_t rows() const { return row_end - row_begin; }
  friend bool operator==(const Piece&, const Piece&) = default;
};
using Layout = std::vector<Piece>;

// What a plan needs of a resident B (k rows): every shard's device holds all
// k rows (single, rows), or its own K range (K split; empty ranges need
// nothing). Pieces in shard order.
Layout layout_needed_for_b(const Plan& plan, int64_t k);
// A whole matrix of `rows` rows on `device` (the layout a resident A or C is
// read from, and where PutMatrix first puts a matrix).
Layout whole_on(int device, int64_t rows);

// The piece of `have` that holds rows [row_begin, row_end) on `device`, or -1.
int find_covering(const Layout& have, int device, int64_t row_begin, int64_t row_end);
// Every piece of `need` is covered by a piece of `have` on the same device.
bool satisfies(const Layout& have, const Layout& need);
// A device holding the whole matrix, preferring `prefer`; -1 when none does.
int device_with_whole(const Layout& have, int64_t rows, int prefer = -1);

// One copy of rows [row_begin, row_end) from piece `src` of the current
// layout into piece `dst` of the target layout.
struct PieceCopy {
  int src = 0;
  int dst = 0;
  int64_t row_begin = 0;
  int64_t row_end = 0;
  bool across_devices = false;  // source and target on different devices (a peer copy)
};

// How to go from `have` to `need`. Pieces of `need` already present in `have`
// (same device, covering range) are reused as they are (`reuse[i]` is the
// piece of `have`, else -1); the others are allocated and filled by `copies`,
// each from a piece on the same device when there is one, else from the
// device that holds the rows (spreading sources round-robin so no one GPU
// sends everything). Pieces of `have` that no target piece reuses are freed
// after the copies. NOT possible (ok == false, `why` says) when some needed
// rows are held by no piece at all.
struct Move {
  bool ok = true;
  std::string why;
  Layout target;
  std::vector<int> reuse;         // per target piece: the piece of `have` reused, or -1 (allocate)
  std::vector<PieceCopy> copies;  // into the allocated target pieces
  std::vector<int> freed;         // pieces of `have` released afterwards
  int64_t bytes_per_row = 0;      // as given
  int64_t copied_bytes() const;
  int64_t allocated_bytes_on(int device) const;  // new pieces on a device (what the budget must admit)
};
Move plan_move(const Layout& have, const Layout& need, int64_t bytes_per_row);

// How much of B each device already holds, as a fraction of its rows, for
// the planner's cost model (DeviceCaps::b_resident_fraction).
double resident_fraction_on(const Layout& have, int device, int64_t rows);

// "GPU 0 rows 0-4096, GPU 1 rows 0-4096" for listings and plan reasons.
std::string describe_layout(const Layout& layout);

}  // namespace sgemm
