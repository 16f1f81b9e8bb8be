// The golden record of kernel decisions (kernel_decisions.h): every line of
// tests/kernels/kernel_decisions.tsv.xz must be what the code decides today, in
// the same order. A difference names the grid point and both decisions.
#include "tests/kernels/kernel_decisions.h"

#include <gtest/gtest.h>
#include <lzma.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace sgemm {
namespace {

// The whole file at `path`, xz-decompressed; empty with `error` set on failure.
std::string read_xz(const std::string& path, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = "cannot open " + path;
    return {};
  }
  const std::string packed((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  lzma_stream strm = LZMA_STREAM_INIT;
  if (lzma_stream_decoder(&strm, UINT64_MAX, 0) != LZMA_OK) {
    *error = "lzma_stream_decoder failed";
    return {};
  }
  std::string out;
  std::vector<uint8_t> buf(1 << 20);
  strm.next_in = reinterpret_cast<const uint8_t*>(packed.data());
  strm.avail_in = packed.size();
  lzma_ret ret = LZMA_OK;
  while (ret == LZMA_OK) {
    strm.next_out = buf.data();
    strm.avail_out = buf.size();
    ret = lzma_code(&strm, LZMA_FINISH);
    out.append(reinterpret_cast<const char*>(buf.data()), buf.size() - strm.avail_out);
  }
  lzma_end(&strm);
  if (ret != LZMA_STREAM_END) {
    *error = path + ": xz stream is corrupt (lzma_ret " + std::to_string(int(ret)) + ")";
    return {};
  }
  return out;
}

TEST(KernelDecisions, MatchTheGoldenRecord) {
  std::string error;
  const std::string golden = read_xz(SGEMM_KERNEL_DECISIONS_FILE, &error);
  ASSERT_TRUE(error.empty()) << error;
  std::vector<std::string> lines;
  ASSERT_TRUE(decode_kernel_decisions(golden, &lines, &error)) << error;
  std::size_t next = 0;
  int64_t compared = 0, differing = 0;
  for_each_kernel_decision([&](const std::string& got) {
    if (next >= lines.size()) {
      ++next;
      return;
    }
    const std::string& want = lines[next++];
    ++compared;
    if (got != want && ++differing <= 20)
      ADD_FAILURE() << "decision changed\n  golden: " << want << "\n  now:    " << got;
  });
  EXPECT_EQ(next, lines.size()) << "the grid has " << next << " lines, the golden record " << lines.size()
                                << " (regenerate it only as kernel_decisions.h says)";
  EXPECT_EQ(differing, 0) << differing << " of " << compared << " decisions differ from the golden record";
  EXPECT_GT(compared, 100000);
}

}  // namespace
}  // namespace sgemm
