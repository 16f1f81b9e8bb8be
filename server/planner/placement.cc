#include "server/planner/placement.h"

#include <algorithm>

namespace sgemm {

Layout layout_needed_for_b(const Plan& plan, int64_t k) {
  Layout need;
  for (const Shard& s : plan.shards) {
    if (plan.mode == SplitMode::kK) {
      if (s.k_end > s.k_begin) need.push_back(Piece{s.device, s.k_begin, s.k_end});
    } else {
      need.push_back(Piece{s.device, 0, k});
    }
  }
  return need;
}

Layout whole_on(int device, int64_t rows) { return {Piece{device, 0, rows}}; }

int find_covering(const Layout& have, int device, int64_t row_begin, int64_t row_end) {
  for (std::size_t i = 0; i < have.size(); ++i)
    if (have[i].device == device && have[i].row_begin <= row_begin && have[i].row_end >= row_end) return int(i);
  return -1;
}

bool satisfies(const Layout& have, const Layout& need) {
  return std::all_of(need.begin(), need.end(),
                     [&](const Piece& p) { return find_covering(have, p.device, p.row_begin, p.row_end) >= 0; });
}

int device_with_whole(const Layout& have, int64_t rows, int prefer) {
  if (prefer >= 0 && find_covering(have, prefer, 0, rows) >= 0) return prefer;
  for (const Piece& p : have)
    if (p.row_begin == 0 && p.row_end >= rows) return p.device;
  return -1;
}

int64_t Move::copied_bytes() const {
  int64_t rows = 0;
  for (const PieceCopy& c : copies) rows += c.row_end - c.row_begin;
  return rows * bytes_per_row;
}

int64_t Move::allocated_bytes_on(int device) const {
  int64_t rows = 0;
  for (std::size_t i = 0; i < target.size(); ++i)
    if (reuse[i] < 0 && target[i].device == device) rows += target[i].rows();
  return rows * bytes_per_row;
}

Move plan_move(const Layout& have, const Layout& need, int64_t bytes_per_row) {
  Move m;
  m.target = need;
  m.bytes_per_row = bytes_per_row;
  m.reuse.assign(need.size(), -1);
  std::vector<bool> kept(have.size(), false);
  for (std::size_t i = 0; i < need.size(); ++i) {
    const int j = find_covering(have, need[i].device, need[i].row_begin, need[i].row_end);
    // Reused only when it is exactly the needed piece: a larger piece would
    // keep rows the target does not account for.
    if (j >= 0 && have[std::size_t(j)] == need[i]) {
      m.reuse[i] = j;
      kept[std::size_t(j)] = true;
    }
  }
  int turn = 0;  // round-robin over source devices
  for (std::size_t i = 0; i < need.size(); ++i) {
    if (m.reuse[i] >= 0) continue;
    const Piece& t = need[i];
    int64_t row = t.row_begin;
    while (row < t.row_end) {
      // Prefer a piece on the target's own device; else the pieces holding
      // `row`, in turn.
      int src = -1;
      for (std::size_t j = 0; j < have.size(); ++j)
        if (have[j].device == t.device && have[j].row_begin <= row && have[j].row_end > row) src = int(j);
      if (src < 0) {
        std::vector<int> holders;
        for (std::size_t j = 0; j < have.size(); ++j)
          if (have[j].row_begin <= row && have[j].row_end > row) holders.push_back(int(j));
        if (holders.empty()) {
          m.ok = false;
          m.why = "rows from " + std::to_string(row) + " are held by no piece (" + describe_layout(have) + ")";
          return m;
        }
        src = holders[std::size_t(turn++) % holders.size()];
      }
      const Piece& s = have[std::size_t(src)];
      const int64_t end = std::min(t.row_end, s.row_end);
      m.copies.push_back(PieceCopy{src, int(i), row, end, s.device != t.device});
      row = end;
    }
  }
  for (std::size_t j = 0; j < have.size(); ++j)
    if (!kept[j]) m.freed.push_back(int(j));
  return m;
}

double resident_fraction_on(const Layout& have, int device, int64_t rows) {
  if (rows <= 0) return 0.0;
  int64_t held = 0;
  for (const Piece& p : have)
    if (p.device == device) held += p.rows();
  return std::min(1.0, double(held) / double(rows));
}

std::string describe_layout(const Layout& layout) {
  std::string out;
  for (const Piece& p : layout) {
    if (!out.empty()) out += ", ";
    out += (p.device < 0 ? std::string("host") : "GPU " + std::to_string(p.device)) + " rows " +
           std::to_string(p.row_begin) + "-" + std::to_string(p.row_end);
  }
  return out.empty() ? "nowhere" : out;
}

}  // namespace sgemm
