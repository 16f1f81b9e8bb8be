// sgemm-kernel-decisions: prints every kernel decision of the host code over the
// golden grid (tests/kernels/kernel_decisions.h), one tab-separated line per grid
// point, in the record's compact form (row names by ID). Regenerate the record that kernel_decisions_test holds the
// code to with
//   build/tests/sgemm-kernel-decisions | xz -9 -T1 > tests/kernels/kernel_decisions.tsv.xz
// only where a GPU measurement justifies the changed decisions (docs/kernels.md).
#include "tests/kernels/kernel_decisions.h"

#include <cstdio>
#include <string>
#include <vector>

int main() {
  std::vector<std::string> lines;
  sgemm::for_each_kernel_decision([&](const std::string& line) { lines.push_back(line); });
  const std::string record = sgemm::encode_kernel_decisions(lines);
  std::fwrite(record.data(), 1, record.size(), stdout);
  return std::ferror(stdout) ? 1 : 0;
}
