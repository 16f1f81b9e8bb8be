#include "server/planner/plan.h"

namespace sgemm {

std::string_view split_mode_name(SplitMode mode) {
  switch (mode) {
    case SplitMode::kAuto: return "auto";
    case SplitMode::kSingle: return "single";
    case SplitMode::kRows: return "rows";
    case SplitMode::kK: return "k";
  }
  return "unknown";
}

bool parse_split_mode(std::string_view text, SplitMode* out) {
  for (SplitMode m : {SplitMode::kAuto, SplitMode::kSingle, SplitMode::kRows, SplitMode::kK}) {
    if (text == split_mode_name(m)) {
      *out = m;
      return true;
    }
  }
  return false;
}

}  // namespace sgemm
