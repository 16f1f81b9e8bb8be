// Batched and grouped requests before any data (server/service/batch_request.h,
// server/engine/batch.h): every field of a batch header converts or is refused
// with INVALID_ARGUMENT naming it; the engine-shared rules name a group entry's
// field; the service's limits apply to the concatenated operands; the summary
// carries each product's status at its offset.
#include "server/service/batch_request.h"

#include <gtest/gtest.h>

#include "server/service/codec.h"

namespace sgemm {
namespace {

namespace v1 = ::sgemm::v1;

void expect_error(const Status& s, StatusCode code, const std::string& words) {
  EXPECT_EQ(s.code(), code) << s.to_string();
  EXPECT_NE(s.message().find(words), std::string::npos) << "'" << words << "' not in: " << s.to_string();
}

v1::GemmHeader strided(int32_t count, int64_t m, int64_t n, int64_t k) {
  v1::GemmHeader h;
  h.set_m(m);
  h.set_n(n);
  h.set_k(k);
  h.set_batch(count);
  return h;
}

v1::GemmHeader group(const std::vector<GemmShape>& shapes) {
  v1::GemmHeader h;
  for (const GemmShape& s : shapes) {
    v1::ProductShape* p = h.add_group();
    p->set_m(s.m);
    p->set_n(s.n);
    p->set_k(s.k);
  }
  return h;
}

TEST(BatchRequest, StridedBatchLaysOperandsOutDenselyInProductOrder) {
  v1::GemmHeader h = strided(7, 33, 17, 29);
  h.set_op_a(v1::OP_T);
  h.set_fail_fast(true);
  auto r = header_from_proto(h);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_TRUE(r->batch);
  const BatchSpec& spec = *r->batch;
  EXPECT_EQ(spec.kind, BatchKind::kStrided);
  ASSERT_EQ(spec.count(), 7);
  EXPECT_TRUE(spec.fail_fast);
  EXPECT_FALSE(spec.check_finite);
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(spec.products[std::size_t(i)].a_offset, i * 33 * 29);
    EXPECT_EQ(spec.products[std::size_t(i)].b_offset, i * 29 * 17);
    EXPECT_EQ(spec.products[std::size_t(i)].c_offset, i * 33 * 17);
  }
  EXPECT_EQ(spec.a_elements, 7 * 33 * 29);
  EXPECT_EQ(spec.c_elements, 7 * 33 * 17);
  EXPECT_EQ(request_matrix_elements(*r, MatrixId::kB), 7 * 29 * 17);
  EXPECT_EQ(c_row_elements(*r), 1);
  EXPECT_TRUE(check_batch_request(*r).ok());
}

TEST(BatchRequest, GroupOffsetsFollowEachShape) {
  auto r = header_from_proto(group({{1, 1, 1}, {129, 65, 257}, {2, 3, 4}}));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const BatchSpec& spec = *r->batch;
  EXPECT_EQ(spec.kind, BatchKind::kGroup);
  EXPECT_EQ(spec.products[1].a_offset, 1);
  EXPECT_EQ(spec.products[2].a_offset, 1 + 129 * 257);
  EXPECT_EQ(spec.products[2].b_offset, 1 + 257 * 65);
  EXPECT_EQ(spec.products[2].c_offset, 1 + 129 * 65);
  EXPECT_EQ(spec.c_elements, 1 + 129 * 65 + 6);
  EXPECT_EQ(r->shape, (GemmShape{1, 1, 1}));  // the first product's, for logs
}

TEST(BatchRequest, SingleProductHasNoBatch) {
  v1::GemmHeader h;
  h.set_m(2);
  h.set_n(3);
  h.set_k(4);
  auto r = header_from_proto(h);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->batch);
  EXPECT_EQ(c_row_elements(*r), 3);
}

TEST(BatchRequest, HeaderFieldsAreRefusedByName) {
  expect_error(header_from_proto(strided(-1, 2, 2, 2)).status(), StatusCode::kInvalidArgument, "header.batch");
  {
    v1::GemmHeader h = group({{2, 2, 2}});
    h.set_batch(3);
    expect_error(header_from_proto(h).status(), StatusCode::kInvalidArgument, "header.batch (3) and header.group");
  }
  expect_error(header_from_proto(strided(int32_t(kMaxBatchProducts) + 1, 1, 1, 1)).status(),
               StatusCode::kInvalidArgument, "over the limit of 65536");
  {
    v1::GemmHeader h = group({{2, 2, 2}});
    h.set_k(5);
    expect_error(header_from_proto(h).status(), StatusCode::kInvalidArgument, "header.k is 5 with header.group");
  }
  {
    v1::GemmHeader h;
    h.set_m(2);
    h.set_n(2);
    h.set_k(2);
    h.set_fail_fast(true);
    expect_error(header_from_proto(h).status(), StatusCode::kInvalidArgument, "header.fail_fast");
    h.set_fail_fast(false);
    h.set_check_finite(true);
    expect_error(header_from_proto(h).status(), StatusCode::kInvalidArgument, "header.check_finite");
  }
  const std::pair<const char*, std::function<void(v1::GemmHeader&)>> refused[] = {
      {"header.a_region.ld", [](v1::GemmHeader& h) { h.mutable_a_region()->set_ld(7); }},
      {"header.out_region.ld", [](v1::GemmHeader& h) { h.mutable_out_region()->set_ld(2); }},
      {"header.c_handle", [](v1::GemmHeader& h) { h.set_c_handle("00"); }},
      {"header.c_at", [](v1::GemmHeader& h) { h.mutable_c_at()->set_row(1); }},
      {"header.keep_result", [](v1::GemmHeader& h) { h.set_keep_result(true); }},
      {"header.stripes", [](v1::GemmHeader& h) { h.set_stripes(2); }},
      {"header.a_device", [](v1::GemmHeader& h) { h.mutable_a_device()->set_ld(0); }},
  };
  for (const auto& [field, set] : refused) {
    v1::GemmHeader h = strided(3, 2, 2, 2);
    set(h);
    expect_error(header_from_proto(h).status(), StatusCode::kInvalidArgument, field);
  }
}

TEST(BatchRequest, RegionsAndASharedHandleAreAccepted) {
  {
    v1::GemmHeader h = strided(3, 2, 5, 4);
    h.mutable_a_region()->set_region("a");
    h.mutable_b_region()->set_region("b");
    h.mutable_out_region()->set_region("c");
    auto r = header_from_proto(h);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->batch->a_elements, 3 * 2 * 4);
    EXPECT_FALSE(r->batch->shared_b);
  }
  {
    // One resident B (4 x 5) for every product: stride 0.
    v1::GemmHeader h = strided(3, 2, 5, 4);
    h.set_b_handle("00");
    auto r = header_from_proto(h);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_TRUE(r->batch->shared_b);
    EXPECT_EQ(r->batch->b_elements, 4 * 5);
    for (const BatchProduct& p : r->batch->products) EXPECT_EQ(p.b_offset, 0);
    EXPECT_EQ(r->batch->products[2].a_offset, 2 * 2 * 4);
    EXPECT_TRUE(check_batch_request(*r).ok());
  }
  {
    v1::GemmHeader h = group({{2, 2, 2}, {3, 2, 2}});
    h.set_a_handle("00");
    expect_error(header_from_proto(h).status(), StatusCode::kInvalidArgument, "header.a_handle is set on a group");
  }
}

TEST(BatchRequest, EngineRulesNameTheProductField) {
  {
    auto r = header_from_proto(group({{2, 2, 2}, {4, 5, 6}, {3, 0, 1}}));
    ASSERT_TRUE(r.ok());
    expect_error(check_batch_request(*r), StatusCode::kInvalidArgument, "header.group[2].n must be >= 1, got 0");
  }
  {
    auto r = header_from_proto(strided(4, 2, 2, -3));
    ASSERT_TRUE(r.ok());
    expect_error(check_batch_request(*r), StatusCode::kInvalidArgument, "header.k must be >= 1, got -3");
  }
  {
    v1::GemmHeader h = strided(4, 2, 2, 2);
    h.set_split(v1::SPLIT_K);
    auto r = header_from_proto(h);
    ASSERT_TRUE(r.ok());
    expect_error(check_batch_request(*r), StatusCode::kInvalidArgument, "header.split 'k'");
  }
  {
    v1::GemmHeader h = strided(4, 2, 2, 2);
    h.set_alpha(std::numeric_limits<float>::infinity());
    auto r = header_from_proto(h);
    ASSERT_TRUE(r.ok());
    expect_error(check_batch_request(*r), StatusCode::kInvalidArgument, "header.alpha");
  }
}

TEST(BatchRequest, LimitsApplyToTheConcatenatedOperands) {
  RequestLimits limits;
  limits.max_matrix_elements = 1000;
  auto fits = header_from_proto(strided(10, 10, 10, 10));  // 1000 elements each
  ASSERT_TRUE(fits.ok());
  EXPECT_TRUE(check_batch_limits(*fits, limits, false).ok());
  auto over = header_from_proto(group({{20, 10, 25}, {20, 10, 25}, {1, 1, 1}}));  // A: 1001 elements
  ASSERT_TRUE(over.ok());
  expect_error(check_batch_limits(*over, limits, false), StatusCode::kResourceExhausted,
               "the concatenated A of the 3 products");
  // An output many times its inputs is bounded as for one product.
  limits.max_matrix_elements = int64_t{1} << 40;
  limits.output_floor_bytes = 1 << 20;
  auto wide = header_from_proto(strided(4, 4096, 4096, 1));
  ASSERT_TRUE(wide.ok());
  expect_error(check_batch_limits(*wide, limits, false), StatusCode::kResourceExhausted, "--max-output-ratio");
}

TEST(BatchRequest, SummaryCarriesEachProductsStatus) {
  auto r = header_from_proto(group({{2, 3, 4}, {5, 6, 7}, {1, 1, 1}}));
  ASSERT_TRUE(r.ok());
  GemmReport report;
  report.product_status = {Status::Ok(), InvalidArgument("product 1: A holds a non-finite value"), Status::Ok()};
  v1::MultiplySummary sum;
  products_to_proto(report, r->batch.get(), &sum);
  ASSERT_EQ(sum.products_size(), 3);
  EXPECT_EQ(sum.products_failed(), 1);
  EXPECT_EQ(sum.products(0).code(), 0);
  EXPECT_EQ(sum.products(1).code(), int(StatusCode::kInvalidArgument));
  EXPECT_EQ(sum.products(1).message(), "product 1: A holds a non-finite value");
  EXPECT_EQ(sum.products(1).c_offset(), 6);
  EXPECT_EQ(sum.products(1).c_elements(), 30);
  EXPECT_EQ(sum.products(2).c_offset(), 36);
  // timings.jsonl's batch member: 2 * (2*3*4 + 5*6*7 + 1*1*1) = 470 flops.
  EXPECT_EQ(batch_timing_json(*r, report),
            ",\"batch\":{\"kind\":\"group\",\"products\":3,\"products_failed\":1,\"flops\":470}");
  v1::MultiplySummary single;
  products_to_proto(report, nullptr, &single);
  EXPECT_EQ(single.products_size(), 0);
}

}  // namespace
}  // namespace sgemm
