// The gRPC service in-process against fake engines: behaviour that the real
// engines cannot be made to show on demand (a failure mid-upload, rows of C
// finished out of order).
#include "server/service/sgemm_service.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "sgemm/v1/sgemm.grpc.pb.h"
#include "tests/server/engine/fake_engine_base.h"

namespace sgemm {
namespace {

namespace v1 = ::sgemm::v1;

// Whether `pred` holds within 30 s, polled: the server's reactions run on
// gRPC's threads some time after the client's call returned, later on a
// loaded machine or under ThreadSanitizer.
template <typename Pred>
bool eventually(Pred pred) {
  for (const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30); !pred();) {
    if (std::chrono::steady_clock::now() >= give_up) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

class FakeEngine : public testing::FakeEngineBase {
 public:
  EngineInfo info() const override {
    EngineInfo info;
    info.backend = "fake";
    info.kernels = {KernelKind::kOpenblas};
    info.default_kernel = KernelKind::kOpenblas;
    info.precisions = {Precision::kFp32};
    return info;
  }
  HostAllocator& host_allocator() override { return alloc_; }
  Status validate(const GemmRequest& r) const override { return check_gemm_request(r); }

 private:
  AlignedHostAllocator alloc_;
};

// Fails at once, as a GPU engine does when device memory runs out.
class FailingEngine final : public FakeEngine {
 public:
  StatusOr<GemmReport> run(const GemmJob&) override {
    return ResourceExhausted("out of device memory on GPU 0 (fake)");
  }
};

// Computes C = alpha*A*B + beta*C naively and reports rows last to first.
class ReverseRowsEngine final : public FakeEngine {
 public:
  StatusOr<GemmReport> run(const GemmJob& job) override {
    const GemmShape s = job.request.shape;
    const float alpha = job.request.alpha, beta = job.request.beta;
    const bool has_c = job.request.has_c;
    if (job.feed) {
      // Started early (B complete, A arriving): the rows go in reverse, so all of A is needed first.
      ++early_starts;
      SGEMM_RETURN_IF_ERROR(job.feed->wait_for(MatrixId::kB, s.k * s.n));
      SGEMM_RETURN_IF_ERROR(job.feed->wait_for(MatrixId::kA, s.m * s.k));
    }
    ++runs;
    for (int64_t i = s.m - 1; i >= 0; --i) {
      for (int64_t j = 0; j < s.n; ++j) {
        float acc = 0;
        for (int64_t p = 0; p < s.k; ++p) acc += job.a[i * s.k + p] * job.b[p * s.n + j];
        job.c[i * s.n + j] = alpha * acc + (has_c ? beta * job.c[i * s.n + j] : 0.0f);
      }
      job.sink->rows_ready(i, i + 1);
    }
    GemmReport r;
    r.backend = "fake";
    r.kernel = KernelKind::kOpenblas;
    r.devices.push_back(DeviceTiming{.device = 7, .name = "fake device", .shard = {7, 0, s.m, 0, s.k}});
    return r;
  }
  std::atomic<int> runs{0};          // runs that computed
  std::atomic<int> early_starts{0};  // runs started before the upload ended
};

struct InProcessServer {
  explicit InProcessServer(Engine& engine, ServiceOptions opt = {}) {
    auto log = std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>());
    service = std::make_unique<SgemmService>(engine, opt, log, nullptr);
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(service.get());
    server = b.BuildAndStart();
    stub = v1::Sgemm::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  }
  ~InProcessServer() { server->Shutdown(); }
  int port = 0;
  std::unique_ptr<SgemmService> service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<v1::Sgemm::Stub> stub;
};

v1::MultiplyRequest header(int64_t m, int64_t n, int64_t k) {
  v1::MultiplyRequest r;
  r.mutable_header()->set_m(m);
  r.mutable_header()->set_n(n);
  r.mutable_header()->set_k(k);
  return r;
}

v1::MultiplyRequest chunk(v1::Matrix m, int64_t offset, const float* data, int64_t count) {
  v1::MultiplyRequest r;
  r.mutable_chunk()->set_matrix(m);
  r.mutable_chunk()->set_offset(offset);
  r.mutable_chunk()->set_data(reinterpret_cast<const char*>(data), std::size_t(count) * 4);
  return r;
}

TEST(SgemmService, EngineFailureReachesTheClientWithItsCodeAndFreesTheBuffers) {
  FailingEngine engine;
  InProcessServer srv(engine);
  grpc::ClientContext ctx;
  auto stream = srv.stub->Multiply(&ctx);
  ASSERT_TRUE(stream->Write(header(64, 64, 64)));
  std::vector<float> block(64 * 64, 1.0f);
  ASSERT_TRUE(stream->Write(chunk(v1::MATRIX_A, 0, block.data(), 64 * 64)));
  ASSERT_TRUE(stream->Write(chunk(v1::MATRIX_B, 0, block.data(), 64 * 64)));
  stream->WritesDone();
  grpc::Status st = stream->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(st.error_message().find("out of device memory"), std::string::npos) << st.error_message();
  EXPECT_TRUE(eventually([&] { return srv.service->host_bytes_in_use() == 0; })) << srv.service->host_bytes_in_use();
}

TEST(SgemmService, AnUnfinishedUploadHoldsNoComputeSlot) {
  ReverseRowsEngine engine;
  ServiceOptions opt;
  opt.max_in_flight = 1;
  opt.max_queued = 0;
  InProcessServer srv(engine, opt);
  // One stream sends B and half of A, then stalls.
  std::vector<float> v(16 * 16, 1.0f);
  grpc::ClientContext stalled_ctx;
  auto stalled = srv.stub->Multiply(&stalled_ctx);
  ASSERT_TRUE(stalled->Write(header(16, 16, 16)));
  ASSERT_TRUE(stalled->Write(chunk(v1::MATRIX_B, 0, v.data(), 256)));
  ASSERT_TRUE(stalled->Write(chunk(v1::MATRIX_A, 0, v.data(), 128)));
  // Write() returns once gRPC has the bytes: wait until the server has them
  // too and has started the stalled request early on the one slot.
  ASSERT_TRUE(eventually([&] { return engine.early_starts.load() > 0; }));
  // Others complete meanwhile, one after another on the single slot.
  for (int i = 0; i < 3; ++i) {
    grpc::ClientContext ctx;
    auto s = srv.stub->Multiply(&ctx);
    ASSERT_TRUE(s->Write(header(16, 16, 16)));
    ASSERT_TRUE(s->Write(chunk(v1::MATRIX_A, 0, v.data(), 256)));
    ASSERT_TRUE(s->Write(chunk(v1::MATRIX_B, 0, v.data(), 256)));
    s->WritesDone();
    v1::MultiplyResponse resp;
    while (s->Read(&resp)) {
    }
    ASSERT_TRUE(s->Finish().ok());
  }
  EXPECT_EQ(engine.runs.load(), 3);
  // It had started early (B complete, A arriving) and gave its slot up.
  EXPECT_EQ(engine.early_starts.load(), 1);
  // The stalled one finishes once the rest of A comes.
  ASSERT_TRUE(stalled->Write(chunk(v1::MATRIX_A, 128, v.data(), 128)));
  stalled->WritesDone();
  v1::MultiplyResponse resp;
  while (stalled->Read(&resp)) {
  }
  EXPECT_TRUE(stalled->Finish().ok());
}

TEST(SgemmService, AnEarlyStartWhoseAStallsYieldsAfterTheBudgetAndFinishesLater) {
  ReverseRowsEngine engine;
  ServiceOptions opt;
  opt.max_in_flight = 1;
  opt.feed_wait_budget = std::chrono::milliseconds(100);
  InProcessServer srv(engine, opt);
  std::vector<float> v(16 * 16, 1.0f);
  grpc::ClientContext ctx;
  auto s = srv.stub->Multiply(&ctx);
  ASSERT_TRUE(s->Write(header(16, 16, 16)));
  ASSERT_TRUE(s->Write(chunk(v1::MATRIX_B, 0, v.data(), 256)));
  ASSERT_TRUE(s->Write(chunk(v1::MATRIX_A, 0, v.data(), 128)));
  // Started early; after 100 ms of waiting for A it yields (no run computed).
  ASSERT_TRUE(eventually([&] { return engine.early_starts.load() > 0; }));
  EXPECT_EQ(engine.early_starts.load(), 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(engine.runs.load(), 0);
  ASSERT_TRUE(s->Write(chunk(v1::MATRIX_A, 128, v.data(), 128)));
  s->WritesDone();
  v1::MultiplyResponse resp;
  int64_t elements = 0;
  while (s->Read(&resp)) {
    if (resp.has_chunk()) {
      elements += int64_t(resp.chunk().data().size() / 4);
      const float* got = reinterpret_cast<const float*>(resp.chunk().data().data());
      for (std::size_t i = 0; i < resp.chunk().data().size() / 4; ++i) ASSERT_EQ(got[i], 16.0f);
    }
  }
  EXPECT_TRUE(s->Finish().ok());
  EXPECT_EQ(elements, 256) << "each element of C exactly once";
  EXPECT_EQ(engine.runs.load(), 1);
  EXPECT_EQ(engine.early_starts.load(), 1) << "after a yield, computing waits for the whole upload";
}

TEST(SgemmService, RowsFinishedOutOfOrderArriveAsCorrectChunksAndASummary) {
  ReverseRowsEngine engine;
  ServiceOptions opt;
  opt.response_chunk_bytes = 4096;  // 1 KiB rows: C comes back in many chunks
  InProcessServer srv(engine, opt);
  const int64_t m = 9, n = 256, k = 3;
  std::vector<float> a(m * k), b(k * n);
  for (int64_t i = 0; i < m * k; ++i) a[i] = float(i % 7) - 3;
  for (int64_t i = 0; i < k * n; ++i) b[i] = float(i % 5) - 2;
  grpc::ClientContext ctx;
  auto stream = srv.stub->Multiply(&ctx);
  ASSERT_TRUE(stream->Write(header(m, n, k)));
  ASSERT_TRUE(stream->Write(chunk(v1::MATRIX_A, 0, a.data(), m * k)));
  ASSERT_TRUE(stream->Write(chunk(v1::MATRIX_B, 0, b.data(), k * n)));
  stream->WritesDone();
  std::vector<float> c(m * n, std::nanf(""));
  std::vector<int> seen(m * n, 0);
  v1::MultiplyResponse resp;
  int summaries = 0, chunks = 0;
  while (stream->Read(&resp)) {
    if (resp.has_summary()) {
      ++summaries;
      ASSERT_EQ(resp.summary().devices_size(), 1);
      EXPECT_EQ(resp.summary().devices(0).name(), "fake device");
      EXPECT_EQ(resp.summary().bytes_sent(), m * n * 4);
      continue;
    }
    ++chunks;
    const auto& ch = resp.chunk();
    EXPECT_EQ(summaries, 0) << "a chunk after the summary";
    EXPECT_LE(ch.data().size(), 4096u);
    std::memcpy(c.data() + ch.offset(), ch.data().data(), ch.data().size());
    for (std::size_t e = 0; e < ch.data().size() / 4; ++e) seen[ch.offset() + e]++;
  }
  ASSERT_TRUE(stream->Finish().ok());
  EXPECT_EQ(summaries, 1);
  EXPECT_EQ(chunks, m);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float ref = 0;
      for (int64_t p = 0; p < k; ++p) ref += a[i * k + p] * b[p * n + j];
      EXPECT_EQ(c[i * n + j], ref);
      EXPECT_EQ(seen[i * n + j], 1);
    }
}

// Computes single products and groups exactly (small integers) and, while
// closed, holds each run at its gate: the test keeps the engine busy.
class GatedGroupEngine final : public FakeEngine {
 public:
  Status validate(const GemmRequest& r) const override {
    return r.batch ? check_batch_request(r) : check_gemm_request(r);
  }
  StatusOr<GemmReport> run(const GemmJob& job) override {
    {
      std::unique_lock lock(mu_);
      ++entered;
      if (!cv_.wait_for(lock, std::chrono::seconds(30), [&] { return open_; })) return Internal("gate never opened");
    }
    std::vector<BatchProduct> products;
    if (job.request.batch)
      products = job.request.batch->products;
    else
      products.push_back(BatchProduct{job.request.shape});
    GemmReport r;
    r.backend = "fake";
    r.kernel = KernelKind::kOpenblas;
    for (const BatchProduct& p : products) {
      const GemmShape& s = p.shape;
      for (int64_t i = 0; i < s.m; ++i)
        for (int64_t j = 0; j < s.n; ++j) {
          float acc = 0;
          for (int64_t q = 0; q < s.k; ++q) acc += job.a[p.a_offset + i * s.k + q] * job.b[p.b_offset + q * s.n + j];
          job.c[p.c_offset + i * s.n + j] = acc;
        }
      if (job.request.batch) r.product_status.push_back(Status::Ok());
    }
    if (!job.request.batch && job.sink) job.sink->rows_ready(0, job.request.shape.m);
    return r;
  }
  void set_open(bool open) {
    std::lock_guard lock(mu_);
    open_ = open;
    cv_.notify_all();
  }
  std::atomic<int> entered{0};

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;
};

// One m x n x k product over `stub`: C and the summary's launch_products (0 on a failure).
struct Answer {
  grpc::Status status;
  std::vector<float> c;
  int launch_products = 0;
};
Answer multiply_small(v1::Sgemm::Stub& stub, int64_t m, int64_t n, int64_t k, const std::vector<float>& a,
                      const std::vector<float>& b) {
  Answer out;
  out.c.assign(std::size_t(m * n), std::nanf(""));
  grpc::ClientContext ctx;
  auto stream = stub.Multiply(&ctx);
  stream->Write(header(m, n, k));
  stream->Write(chunk(v1::MATRIX_A, 0, a.data(), m * k));
  stream->Write(chunk(v1::MATRIX_B, 0, b.data(), k * n));
  stream->WritesDone();
  v1::MultiplyResponse resp;
  while (stream->Read(&resp)) {
    if (resp.has_summary()) {
      out.launch_products = resp.summary().launch_products();
      continue;
    }
    std::memcpy(out.c.data() + resp.chunk().offset(), resp.chunk().data().data(), resp.chunk().data().size());
  }
  out.status = stream->Finish();
  return out;
}

TEST(SgemmService, SmallRequestsThatWaitWhileTheEngineIsBusyShareOneLaunchAndEachSummarySaysSo) {
  GatedGroupEngine engine;
  ServiceOptions opt;
  opt.max_in_flight = 1;
  opt.feed_wait_budget = std::chrono::milliseconds(0);  // complete uploads only: none starts early
  opt.coalesce.max_products = 8;
  InProcessServer srv(engine, opt);
  auto operands = [](int64_t rows, int64_t cols, int salt) {
    std::vector<float> x(std::size_t(rows * cols));
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = float(int(i * 7 + salt) % 9) - 4;
    return x;
  };
  // The first request takes the one compute slot and is held there.
  engine.set_open(false);
  const std::vector<float> a0 = operands(4, 4, 0), b0 = operands(4, 4, 1);
  Answer first;
  std::thread first_thread([&] { first = multiply_small(*srv.stub, 4, 4, 4, a0, b0); });
  if (!eventually([&] { return engine.entered.load() == 1; })) {
    engine.set_open(true);
    first_thread.join();
    FAIL() << "the first request never reached the engine";
  }
  // Three more of odd shapes wait meanwhile: the coalescer's waiting requests count as queued.
  const int64_t shapes[3][3] = {{3, 5, 7}, {9, 1, 2}, {6, 6, 5}};
  std::vector<std::vector<float>> as, bs;
  for (int i = 0; i < 3; ++i) {
    as.push_back(operands(shapes[i][0], shapes[i][2], 10 + i));
    bs.push_back(operands(shapes[i][2], shapes[i][1], 20 + i));
  }
  std::vector<Answer> answers(3);
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i)
    threads.emplace_back([&, i] {
      answers[std::size_t(i)] =
          multiply_small(*srv.stub, shapes[i][0], shapes[i][1], shapes[i][2], as[std::size_t(i)], bs[std::size_t(i)]);
    });
  const bool all_waiting = eventually([&] { return srv.service->load().queued == 3; });
  engine.set_open(true);
  first_thread.join();
  for (auto& t : threads) t.join();
  ASSERT_TRUE(all_waiting) << "the three requests did not all wait while the engine was held";
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  EXPECT_EQ(first.launch_products, 1);
  EXPECT_EQ(engine.entered.load(), 2) << "the three waiting requests went in one launch";
  for (int i = 0; i < 3; ++i) {
    const Answer& got = answers[std::size_t(i)];
    ASSERT_TRUE(got.status.ok()) << got.status.error_message();
    EXPECT_EQ(got.launch_products, 3);
    const int64_t m = shapes[i][0], n = shapes[i][1], k = shapes[i][2];
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < n; ++j) {
        float ref = 0;
        for (int64_t q = 0; q < k; ++q) ref += as[std::size_t(i)][r * k + q] * bs[std::size_t(i)][q * n + j];
        EXPECT_EQ(got.c[std::size_t(r * n + j)], ref) << "request " << i << " (" << r << ", " << j << ")";
      }
  }
}

}  // namespace
}  // namespace sgemm
