// How a batch is spread over GPUs (batch_plan.h) and which batched launch runs
// it (kernel_choice.h, select_batch_kernel): contiguous ranges covering every
// product once, balanced by work; the precision contract decides the row.
#include "server/planner/batch_plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "server/planner/kernel_choice.h"

namespace sgemm {
namespace {

// Every product in exactly one range, in order, none empty.
void expect_cover(const std::vector<ProductRange>& ranges, int64_t count) {
  int64_t next = 0;
  for (const ProductRange& r : ranges) {
    EXPECT_EQ(r.begin, next);
    EXPECT_LT(r.begin, r.end);
    next = r.end;
  }
  EXPECT_EQ(next, count);
}

TEST(BatchPlan, EqualProductsSplitEvenly) {
  const std::vector<double> work(1000, 1.0);
  auto two = split_products(work, 2);
  ASSERT_EQ(two.size(), 2u);
  expect_cover(two, 1000);
  EXPECT_EQ(two[0], (ProductRange{0, 500}));
  auto eight = split_products(work, 8);
  ASSERT_EQ(eight.size(), 8u);
  expect_cover(eight, 1000);
  for (const ProductRange& r : eight) EXPECT_EQ(r.end - r.begin, 125);
  EXPECT_EQ(split_products(work, 1), (std::vector<ProductRange>{{0, 1000}}));
}

TEST(BatchPlan, FewerProductsThanDevicesAndNone) {
  auto r = split_products({5.0, 1.0, 2.0}, 8);
  expect_cover(r, 3);
  EXPECT_EQ(r.size(), 3u);
  EXPECT_TRUE(split_products({}, 4).empty());
}

TEST(BatchPlan, WorkBalancesUnevenShapes) {
  // One large product and many small ones: the large one gets a device alone.
  std::vector<double> work(101, 1.0);
  work[0] = 100.0;
  auto r = split_products(work, 2);
  ASSERT_EQ(r.size(), 2u);
  expect_cover(r, 101);
  EXPECT_EQ(r[0], (ProductRange{0, 1}));
  // Growing shapes (a group from 32 to 2048): each range's work within 2x of the mean.
  std::vector<double> grow;
  for (int i = 0; i < 100; ++i) grow.push_back(2.0 * std::pow(32.0 + 20.0 * i, 3));
  for (int devices : {2, 3, 4, 8}) {
    auto g = split_products(grow, devices);
    expect_cover(g, 100);
    ASSERT_EQ(int(g.size()), devices);
    const double total = std::accumulate(grow.begin(), grow.end(), 0.0);
    for (const ProductRange& p : g) {
      const double w = std::accumulate(grow.begin() + p.begin, grow.begin() + p.end, 0.0);
      EXPECT_LT(w, 2.0 * total / devices) << devices << " devices, range " << p.begin << "-" << p.end;
    }
  }
}

TEST(BatchKernelChoice, PrecisionDecidesTheRow) {
  const std::vector<KernelKind> all = {KernelKind::kPingpong, KernelKind::kCublas, KernelKind::kTf32,
                                       KernelKind::kFp32x3};
  struct Case {
    BatchLaunch launch;
    Precision precision;
    const char* row;
  } cases[] = {
      {BatchLaunch::kStridedBatched, Precision::kFp32, "cublas_sgemm_strided_batched"},
      {BatchLaunch::kStridedBatched, Precision::kFp32Ffma, "cublas_sgemm_strided_batched"},
      {BatchLaunch::kGrouped, Precision::kFp32, "cublas_sgemm_grouped"},
      {BatchLaunch::kStridedBatched, Precision::kTf32, "cublas_tf32_strided_batched"},
      {BatchLaunch::kGrouped, Precision::kTf32, "cublas_tf32_per_product"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.row);
    auto sel = select_batch_kernel({c.launch, c.precision, std::nullopt, all});
    ASSERT_TRUE(sel.ok()) << sel.status().to_string();
    EXPECT_STREQ(sel->row->name, c.row);
    EXPECT_EQ(sel->row->launch, c.launch);
  }
  auto named = select_batch_kernel({BatchLaunch::kGrouped, Precision::kFp32, KernelKind::kCublas, all});
  ASSERT_TRUE(named.ok());
  EXPECT_STREQ(named->row->name, "cublas_sgemm_grouped");
}

TEST(BatchKernelChoice, RefusalsNameTheCause) {
  const std::vector<KernelKind> all = {KernelKind::kPingpong, KernelKind::kCublas, KernelKind::kTf32};
  auto pingpong = select_batch_kernel({BatchLaunch::kStridedBatched, Precision::kFp32, KernelKind::kPingpong, all});
  EXPECT_EQ(pingpong.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(pingpong.status().message().find("kernel: 'pingpong'"), std::string::npos);
  auto x3 = select_batch_kernel({BatchLaunch::kGrouped, Precision::kFp32x3, std::nullopt, all});
  EXPECT_EQ(x3.status().code(), StatusCode::kFailedPrecondition);
  auto no_tf32 = select_batch_kernel({BatchLaunch::kGrouped, Precision::kTf32, std::nullopt, {KernelKind::kCublas}});
  EXPECT_EQ(no_tf32.status().code(), StatusCode::kFailedPrecondition);
  auto tf32_named = select_batch_kernel({BatchLaunch::kGrouped, Precision::kTf32, KernelKind::kCublas, all});
  EXPECT_EQ(tf32_named.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sgemm
