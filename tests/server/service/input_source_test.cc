#include "server/service/input_source.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include "server/service/sgemm_service.h"
#include "tests/server/engine/fake_engine_base.h"

namespace sgemm {
namespace {

class NoResidentEngine final : public testing::FakeEngineBase {
 public:
  EngineInfo info() const override { return {}; }
  HostAllocator& host_allocator() override { return alloc_; }
  Status validate(const GemmRequest& r) const override { return check_gemm_request(r); }
  StatusOr<GemmReport> run(const GemmJob& /*job*/) override { return Internal("binding only: nothing runs"); }

 private:
  AlignedHostAllocator alloc_;
};

class InputSourceTest : public ::testing::Test {
 protected:
  InputSourceTest()
      : log_(std::make_shared<spdlog::logger>("input-source-test", std::make_shared<spdlog::sinks::null_sink_mt>())),
        shared_(engine_, options_, log_, nullptr) {
    header_.shape = {7, 5, 3};  // m, n, k: odd, so A (m x k) and B (k x n) differ in size
    header_.has_c = true;
  }
  SourceContext context() { return SourceContext{shared_, nullptr, "ipv4:127.0.0.1:1", header_}; }

  NoResidentEngine engine_;
  ServiceOptions options_;
  std::shared_ptr<spdlog::logger> log_;
  ServiceShared shared_;
  GemmRequest header_;
};

TEST_F(InputSourceTest, AHeaderWithNeitherRegionsNorHandlesIsOneUploadRowOfAAndBAndItsC) {
  MatrixAssembler assembler(header_.shape, header_.has_c, nullptr, nullptr, nullptr, 1 << 20);
  auto rows = make_input_sources({}, {}, {}, &assembler);
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  ASSERT_EQ(rows->size(), 1u);
  InputSource& upload = *rows->front();
  EXPECT_STREQ(upload.name(), "upload");
  GemmJob job;
  ASSERT_TRUE(upload.bind(context(), job).ok());
  for (MatrixId m : {MatrixId::kA, MatrixId::kB, MatrixId::kC}) EXPECT_TRUE(upload.provides(m));
  // A is 7 x 3 and B 3 x 5; an input C lands in C's own buffer, counted with the output.
  EXPECT_EQ(upload.footprint(header_.shape), (7 * 3 + 3 * 5) * int64_t(sizeof(float)));
  EXPECT_FALSE(upload.ready());
}

TEST_F(InputSourceTest, AnUploadBoundAfterAnotherRowReceivesOnlyWhatTheJobLacks) {
  MatrixAssembler assembler(header_.shape, header_.has_c, nullptr, nullptr, nullptr, 1 << 20);
  UploadSource upload(&assembler);
  GemmJob job;
  ResidentMatrix a;  // as the resident row leaves it: A pinned, B and C to come
  a.rows = 7;
  a.cols = 3;
  job.a_resident = &a;
  ASSERT_TRUE(upload.bind(context(), job).ok());
  EXPECT_FALSE(upload.provides(MatrixId::kA));
  EXPECT_TRUE(upload.provides(MatrixId::kB));
  EXPECT_EQ(upload.footprint(header_.shape), 3 * 5 * int64_t(sizeof(float)));
  const Status chunk = assembler.check_chunk(MatrixId::kA, 0, 4);
  EXPECT_EQ(chunk.code(), StatusCode::kInvalidArgument) << "A comes from another row: no chunk for it";
  EXPECT_NE(chunk.message().find("by handle"), std::string::npos) << chunk.message();
}

TEST_F(InputSourceTest, RegionsAndHandlesTogetherAreRefusedAndHandlesAddAResidentRowBeforeTheUpload) {
  MatrixAssembler assembler(header_.shape, header_.has_c, nullptr, nullptr, nullptr, 1 << 20);
  RegionOperands regions;
  regions.a = RegionRef{"r", 0, 0};
  ResidentOperands handles;
  handles.b = "0123456789abcdef0123456789abcdef";
  auto both = make_input_sources(regions, handles, {}, &assembler);
  EXPECT_EQ(both.status().code(), StatusCode::kInvalidArgument);

  auto region_rows = make_input_sources(regions, {}, {}, nullptr);
  ASSERT_TRUE(region_rows.ok());
  ASSERT_EQ(region_rows->size(), 1u) << "regions hold every operand: no upload row";
  EXPECT_STREQ(region_rows->front()->name(), "region");

  auto resident_rows = make_input_sources({}, handles, {}, &assembler);
  ASSERT_TRUE(resident_rows.ok());
  ASSERT_EQ(resident_rows->size(), 2u);
  EXPECT_STREQ((*resident_rows)[0]->name(), "resident");
  EXPECT_STREQ((*resident_rows)[1]->name(), "upload");
  GemmJob job;
  const Status st = (*resident_rows)[0]->bind(context(), job);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << "this engine keeps no resident matrices";
}

TEST_F(InputSourceTest, ARegionRowWithoutAUnixSocketCallerIsRefusedNamingTheNeed) {
  RegionOperands regions;
  regions.a = RegionRef{"a", 0, 0};
  regions.b = RegionRef{"b", 0, 0};
  RegionSource row(regions);
  GemmJob job;
  const Status st = row.bind(context(), job);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("Unix"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace sgemm
