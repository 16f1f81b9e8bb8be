// The golden record of kernel decisions (kernel_decisions.h): every line of
// tests/kernels/kernel_decisions.tsv.xz must be what the code decides today, in
// the same order. A difference names the grid point and both decisions.
#include "tests/kernels/kernel_decisions.h"

#include <gtest/gtest.h>
#include <lzma.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "common/kernel_registry.h"
#include "kernels/fp32x3_sgemm.h"
#include "kernels/pingpong_sgemm.h"

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

// Each registry row's `variant` is the launcher-table entry that runs it: the row's
// name is that entry's, with the data path in front.
TEST(KernelRegistry, RowsNameTheLaunchersTheyIndex) {
  std::set<std::string_view> names;
  for (const KernelRow& row : kernel_registry()) {
    EXPECT_TRUE(names.insert(row.name).second) << "duplicate row " << row.name;
    switch (row.family) {
      case KernelKind::kPingpong: {
        ASSERT_GE(row.variant, 0) << row.name;
        ASSERT_LT(row.variant, pingpong_variant_count()) << row.name;
        const std::string v(pingpong_variant_name(row.variant));
        const std::string want = v == "gemv" ? v : v.rfind("tma_", 0) == 0 ? "simt_" + v : "simt_cpasync_" + v;
        EXPECT_EQ(row.name, want);
        EXPECT_EQ(row.arithmetic, ArithmeticClass::kFfma);
        break;
      }
      case KernelKind::kFp32x3:
        ASSERT_GE(row.variant, 0) << row.name;
        ASSERT_LT(row.variant, fp32x3_variant_count()) << row.name;
        EXPECT_EQ(row.name, "fp32x3_wgmma_" + std::string(fp32x3_variant_name(row.variant)));
        EXPECT_EQ(row.arithmetic, ArithmeticClass::kFp32x3);
        EXPECT_EQ(row.arch, KernelArch::kSm90a) << row.name;
        break;
      default:
        EXPECT_EQ(row.variant, -1) << row.name;
        EXPECT_EQ(row.arithmetic, kernel_arithmetic(row.family)) << row.name;
        break;
    }
    EXPECT_EQ(find_kernel_row(row.name), &row);
  }
  EXPECT_EQ(find_kernel_row("no_such_kernel"), nullptr);
}

// A row takes a shape exactly where its launcher does (the GEMV rows one row or column only).
TEST(KernelRegistry, AcceptsWhatTheLauncherRuns) {
  for (const KernelRow& row : kernel_registry()) {
    if (row.family != KernelKind::kPingpong) continue;
    for (const GemmShape s : {GemmShape{1, 4096, 4096}, GemmShape{4096, 1, 33}, GemmShape{2, 2, 2},
                              GemmShape{777, 555, 333}, GemmShape{8192, 64, 8192}})
      EXPECT_EQ(kernel_row_accepts(row, s), pingpong_variant_accepts(s, row.variant))
          << row.name << " at " << gemm_shape_text(s);
  }
}

// The picker-free launchers ask the registry: pingpong_pick_variant and fp32x3_pick_variant
// return the variant of the row select_kernel_row_of chooses.
TEST(KernelRegistry, LaunchersWithoutARowAskTheSameChoice) {
  const float* const a = reinterpret_cast<const float*>(uintptr_t{0x10000});
  float* const c = reinterpret_cast<float*>(uintptr_t{0x30000});
  for (int sm : {132, 78})
    for (const GemmShape s : {GemmShape{1, 4096, 4096}, GemmShape{4096, 4096, 4096}, GemmShape{1024, 1024, 16384},
                              GemmShape{2560, 2560, 2560}, GemmShape{8192, 96, 8192}, GemmShape{777, 555, 333}}) {
      EXPECT_EQ(pingpong_pick_variant(s, sm),
                select_kernel_row_of(KernelKind::kPingpong, s, KernelLayout{}, sm).row->variant);
      for (const float* pa : {a, a + 1}) {
        const GemmArgs g = dense_gemm_args(s, 1.0f, pa, a, 0.0f, c);
        EXPECT_EQ(fp32x3_pick_variant(g),
                  select_kernel_row_of(KernelKind::kFp32x3, s, kernel_layout(g), sm).row->variant);
      }
    }
}

}  // namespace
}  // namespace sgemm
