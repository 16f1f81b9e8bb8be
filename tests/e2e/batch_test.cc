// Batched and grouped products in one request, end to end: the real server
// (SGEMM_E2E_BACKEND: cpu in CI, cuda through the GPU checks) and the real
// client. A strided batch of 7 products of 33x17x29 and a group of odd shapes
// from 1x1x1 to 129x65x257, with every op(A)/op(B) and alpha, beta and C,
// each product against the fp64 reference; a product with a NaN input
// reported alone (check_finite) or failing the request (fail_fast); bad
// headers refused with INVALID_ARGUMENT naming the field; the CLI's --batch
// and --group with --verify, over gRPC and through a shared-memory region
// (the Unix socket), and --batch with a resident A or B (--a-handle,
// --b-handle) every product reads, its C (--out) checked here against fp64.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "client/batch_command.h"
#include "client/sgemm_client.h"
#include "sgemm/v1/sgemm.grpc.pb.h"
#include "tests/e2e/in_process_server.h"

namespace sgemm {
namespace {

namespace v1 = ::sgemm::v1;
using testing::InProcessServer;

uint64_t fresh_seed() { return std::random_device{}() | (uint64_t(std::random_device{}()) << 32); }

const std::vector<GemmShape> kOddGroup = {{1, 1, 1},   {1, 65, 33}, {47, 1, 19},    {33, 17, 29},
                                          {7, 129, 3}, {3, 5, 1},   {129, 65, 257}, {64, 64, 64}};

struct Scalars {
  float alpha, beta;
  bool has_c;
};
constexpr Scalars kScalars[] = {{1.0f, 0.0f, false}, {-1.5f, 0.75f, true}, {2.0f, 0.0f, true}};

struct Operands {
  std::vector<float> a, b, c0;
  Operands(const BatchLayout& l, uint64_t seed)
      : a(std::size_t(l.a_elements)), b(std::size_t(l.b_elements)), c0(std::size_t(l.c_elements)) {
    fill_random(a, seed);
    fill_random(b, seed + 1);
    fill_random(c0, seed + 2);
  }
};

class BatchE2E : public testing::SuiteServer<BatchE2E> {
 public:
  static void configure(ServerOptions& o, EngineOptions&) { o.service.log_lines_per_second = 0; }

 protected:
  void SetUp() override {
    ASSERT_TRUE(server_->running()) << server_->log();
    ClientOptions o;
    o.retry.max_attempts = 1;
    o.chunk_bytes = 4096;  // several chunks per operand, some crossing products
    client_ = Client::connect(server_->tcp_address(), o);
  }

  // Runs `batch` with every op and scalar combination; every product checked.
  void run_every_combination(const BatchProducts& batch) {
    const BatchLayout layout = batch_layout(batch);
    for (Op op_a : {Op::kN, Op::kT})
      for (Op op_b : {Op::kN, Op::kT})
        for (const Scalars& sc : kScalars) {
          const uint64_t seed = fresh_seed();
          SCOPED_TRACE("op_a " + std::string(op_name(op_a)) + " op_b " + std::string(op_name(op_b)) + " alpha " +
                       std::to_string(sc.alpha) + " beta " + std::to_string(sc.beta) + (sc.has_c ? " C" : "") +
                       " seed " + std::to_string(seed));
          Operands x(layout, seed);
          MultiplyOptions opt;
          opt.alpha = sc.alpha;
          opt.beta = sc.beta;
          opt.op_a = op_a;
          opt.op_b = op_b;
          auto r = client_->multiply_batch(batch, x.a.data(), x.b.data(), sc.has_c ? x.c0.data() : nullptr, opt);
          ASSERT_TRUE(r.ok()) << r.status().to_string();
          ASSERT_EQ(r->products.size(), layout.c_offset.size());
          EXPECT_EQ(r->products_failed, 0);
          EXPECT_EQ(r->bytes_received, layout.c_elements * 4);
          for (const ProductResult& p : r->products) {
            SCOPED_TRACE("product " + std::to_string(p.index));
            EXPECT_TRUE(p.status.ok()) << p.status.to_string();
            const VerifyResult v =
                cli::verify_batch_product(batch, layout, std::size_t(p.index), sc.alpha, sc.beta, op_a, op_b,
                                          x.a.data(), x.b.data(), sc.has_c ? x.c0.data() : nullptr, r->c.data(), seed);
            EXPECT_TRUE(v.passed(kSgemmTolerance))
                << "max rel error " << v.max_rel_error << " at (" << v.worst_row << ", " << v.worst_col << ")";
            EXPECT_GT(v.checked, 0);
          }
        }
  }

  // Sends a raw header (and nothing else) and returns the final status.
  Status send_header(const v1::GemmHeader& h) {
    auto stub = v1::Sgemm::NewStub(grpc::CreateChannel(server_->tcp_address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    auto stream = stub->Multiply(&ctx);
    v1::MultiplyRequest req;
    *req.mutable_header() = h;
    stream->Write(req);
    stream->WritesDone();
    v1::MultiplyResponse resp;
    while (stream->Read(&resp)) {
    }
    const grpc::Status g = stream->Finish();
    return Status(StatusCode(int(g.error_code())), g.error_message());
  }
  static void expect_invalid(const Status& s, const std::string& words) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find(words), std::string::npos) << "'" << words << "' not in " << s.to_string();
  }

  std::unique_ptr<Client> client_;
};

TEST_F(BatchE2E, StridedBatchOfOddShapesEveryOpAndScalars) {
  BatchProducts batch;
  batch.shape = {33, 17, 29};
  batch.count = 7;
  run_every_combination(batch);
}

TEST_F(BatchE2E, GroupFromOneToLargeShapesEveryOpAndScalars) {
  BatchProducts batch;
  batch.group = kOddGroup;
  run_every_combination(batch);
}

TEST_F(BatchE2E, SummaryNamesTheBatchAndStreamsCPerProduct) {
  BatchProducts batch;
  batch.group = kOddGroup;
  const BatchLayout layout = batch_layout(batch);
  Operands x(layout, 9);
  MultiplyOptions opt;
  std::mutex mu;
  int64_t received = 0;
  opt.on_chunk = [&](int64_t offset, int64_t count) {
    std::lock_guard lock(mu);
    EXPECT_GE(offset, 0);
    EXPECT_LE(offset + count, layout.c_elements);
    received += count;
  };
  auto r = client_->multiply_batch(batch, x.a.data(), x.b.data(), nullptr, opt);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(received, layout.c_elements);
  EXPECT_FALSE(r->summary.kernel.empty());
  EXPECT_NE(r->summary.plan_reason.find("group of 8"), std::string::npos) << r->summary.plan_reason;
  // timings.jsonl says it was a group and how many products it carried.
  // (written before the summary is sent; polled with a deadline all the same).
  const std::string want = "\"batch\":{\"kind\":\"group\",\"products\":8,\"products_failed\":0";
  bool found = false;
  for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
       !found && std::chrono::steady_clock::now() < until;) {
    std::ifstream f(server_->dir() + "/logs/timings.jsonl");
    const std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    found = all.find(want) != std::string::npos;
    if (!found) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(found) << want;
}

TEST_F(BatchE2E, NonFiniteProductIsReportedAloneOrFailsTheRequestWithFailFast) {
  BatchProducts batch;
  batch.shape = {33, 17, 29};
  batch.count = 7;
  batch.check_finite = true;
  const BatchLayout layout = batch_layout(batch);
  Operands x(layout, 77);
  x.a[std::size_t(layout.a_offset[4] + 3 * 29 + 11)] = std::numeric_limits<float>::infinity();
  MultiplyOptions opt;
  opt.alpha = 0.5f;
  opt.beta = 2.0f;
  auto r = client_->multiply_batch(batch, x.a.data(), x.b.data(), x.c0.data(), opt);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->products_failed, 1);
  EXPECT_EQ(r->bytes_received, (layout.c_elements - 33 * 17) * 4);  // product 4's C is not sent
  for (const ProductResult& p : r->products) {
    SCOPED_TRACE("product " + std::to_string(p.index));
    if (p.index == 4) {
      EXPECT_EQ(p.status.code(), StatusCode::kInvalidArgument);
      EXPECT_NE(p.status.message().find("product 4 (33x17x29): A holds a non-finite value (inf) at stored element "
                                        "(3, 11)"),
                std::string::npos)
          << p.status.to_string();
      continue;
    }
    EXPECT_TRUE(p.status.ok());
    EXPECT_TRUE(cli::verify_batch_product(batch, layout, std::size_t(p.index), opt.alpha, opt.beta, Op::kN, Op::kN,
                                          x.a.data(), x.b.data(), x.c0.data(), r->c.data(), 1)
                    .passed(kSgemmTolerance));
  }
  batch.fail_fast = true;
  auto ff = client_->multiply_batch(batch, x.a.data(), x.b.data(), x.c0.data(), opt);
  ASSERT_FALSE(ff.ok());
  expect_invalid(ff.status(), "product 4 (33x17x29)");
}

TEST_F(BatchE2E, BadHeadersAreRefusedNamingTheField) {
  auto group_header = [](const std::vector<GemmShape>& shapes) {
    v1::GemmHeader h;
    for (const GemmShape& s : shapes) {
      v1::ProductShape* p = h.add_group();
      p->set_m(s.m);
      p->set_n(s.n);
      p->set_k(s.k);
    }
    return h;
  };
  expect_invalid(send_header(group_header({{4, 4, 4}, {2, 3, 0}})), "header.group[1].k must be >= 1");
  {
    v1::GemmHeader h;
    h.set_m(2);
    h.set_n(2);
    h.set_k(2);
    h.set_batch(int32_t(kMaxBatchProducts) + 1);
    expect_invalid(send_header(h), "header.batch asks for 65537 products");
    h.set_batch(3);
    h.set_stripes(2);
    expect_invalid(send_header(h), "header.stripes");
    h.set_stripes(0);
    h.set_split(v1::SPLIT_ROWS);
    expect_invalid(send_header(h), "header.split");
    h.set_split(v1::SPLIT_UNSPECIFIED);
    h.set_m(0);
    expect_invalid(send_header(h), "header.m must be >= 1");
  }
  {
    v1::GemmHeader h = group_header({{4, 4, 4}});
    h.set_n(4);
    expect_invalid(send_header(h), "header.n is 4 with header.group");
  }
  // Through the client: a batch with neither a count nor a group.
  float x = 1;
  auto r = client_->multiply_batch(BatchProducts{}, &x, &x, nullptr, {});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(BatchE2E, CliBatchAndGroupVerifyEveryProduct) {
  const std::string group_file = ::testing::TempDir() + "/sgemm-batch-group.txt";
  {
    std::ofstream f(group_file);
    f << "# m n k\n1 1 1\n33 17 29\n\n129 65 257\n5 1 7\n";
  }
  const std::string base = testing::client_bin() + " submit --server " + server_->tcp_address() + " --no-retry";
  auto batch = testing::run_command(base + " --batch 7 --m 33 --n 17 --k 29 --alpha 2 --beta 0.5 --op-a t --verify");
  EXPECT_EQ(batch.exit_code, 0) << batch.output;
  EXPECT_NE(batch.output.find("strided batch of 7 products"), std::string::npos) << batch.output;
  EXPECT_NE(batch.output.find("PASS"), std::string::npos) << batch.output;
  auto group = testing::run_command(base + " --group " + group_file + " --op-b t --with-c --verify --json");
  EXPECT_EQ(group.exit_code, 0) << group.output;
  EXPECT_NE(group.output.find("\"products\":4"), std::string::npos) << group.output;
  EXPECT_NE(group.output.find("\"passed\":true"), std::string::npos) << group.output;
  {
    std::ofstream f(group_file);
    f << "1 1 1\n2 0 3\n";
  }
  auto bad = testing::run_command(base + " --group " + group_file + " 2>&1");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("line 2"), std::string::npos) << bad.output;
}

// --transport shm (and auto on the Unix socket): the CLI writes the operands
// into one region of its own and the server computes C in place; every run
// of --repeat starts from the input C again, which --verify checks.
TEST_F(BatchE2E, CliBatchAndGroupThroughARegion) {
  const std::string group_file = ::testing::TempDir() + "/sgemm-batch-region-group.txt";
  {
    std::ofstream f(group_file);
    f << "1 1 1\n33 17 29\n129 65 257\n5 1 7\n";
  }
  const std::string base =
      testing::client_bin() + " submit --server " + server_->unix_address() + " --no-retry --json --verify";
  for (const char* transport : {"shm", "auto"}) {
    SCOPED_TRACE(transport);
    auto batch = testing::run_command(base + " --transport " + transport +
                                      " --batch 7 --m 33 --n 17 --k 29 --alpha -1.5 --beta 0.75 --op-a t --repeat 2");
    ASSERT_EQ(batch.exit_code, 0) << batch.output;
    std::istringstream lines(batch.output);
    std::string line;
    int runs = 0;
    while (std::getline(lines, line)) {
      const auto j = nlohmann::json::parse(line);
      EXPECT_EQ(j["transport"], "shm") << line;
      EXPECT_EQ(j["products"], 7) << line;
      EXPECT_EQ(j["verify"]["passed"], true) << line;
      ++runs;
    }
    EXPECT_EQ(runs, 2) << batch.output;
  }
  auto group = testing::run_command(base + " --transport shm --group " + group_file + " --op-b t --with-c");
  ASSERT_EQ(group.exit_code, 0) << group.output;
  const auto j = nlohmann::json::parse(group.output);
  EXPECT_EQ(j["transport"], "shm");
  EXPECT_EQ(j["products"], 4);
  EXPECT_EQ(j["verify"]["passed"], true);
  // Over TCP a region cannot be named: shm is refused, saying what it needs.
  auto tcp = testing::run_command(testing::client_bin() + " submit --server " + server_->tcp_address() +
                                  " --no-retry --transport shm --batch 2 --size 8 2>&1");
  EXPECT_EQ(tcp.exit_code, 3) << tcp.output;
  EXPECT_NE(tcp.output.find("Unix socket"), std::string::npos) << tcp.output;
}

// A raw fp32 file (--out without .npy) of `elements` floats.
std::vector<float> read_raw(const std::string& path, int64_t elements) {
  std::vector<float> v(static_cast<std::size_t>(elements));
  std::ifstream f(path, std::ios::binary);
  f.read(reinterpret_cast<char*>(v.data()), std::streamsize(v.size() * sizeof(float)));
  EXPECT_EQ(f.gcount(), std::streamsize(v.size() * sizeof(float))) << path;
  EXPECT_EQ(std::filesystem::file_size(path), v.size() * sizeof(float)) << path;
  return v;
}

// --batch with one resident A or B (or both) that every product reads: the
// matrix put by `sgemm-client put --seed S` (fill_random(S)), the other
// operands the CLI's own (A from --seed T, B from T + 1, C from T + 2); C
// written with --out and every product checked here against the fp64
// reference, for every op and with alpha, beta and C. On the Unix socket the
// handle keeps auto on gRPC.
TEST_F(BatchE2E, CliBatchWithAResidentOperandEveryProductChecked) {
  const GemmShape s{37, 23, 19};
  const int64_t count = 6;
  const std::string dir = ::testing::TempDir();
  const std::string cli = testing::client_bin();
  auto put = [&](int64_t rows, int64_t cols, uint64_t seed) {
    auto r = testing::run_command(cli + " put --server " + server_->tcp_address() + " --json --rows " +
                                  std::to_string(rows) + " --cols " + std::to_string(cols) + " --seed " +
                                  std::to_string(seed));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r.exit_code == 0 ? nlohmann::json::parse(r.output)["handle"].get<std::string>() : std::string();
  };
  const std::vector<std::vector<MatrixId>> shared_sets = {{MatrixId::kB}, {MatrixId::kA}, {MatrixId::kA, MatrixId::kB}};
  uint64_t seed = fresh_seed() % 1000000;
  for (const auto& shared : shared_sets)
    for (Op op_a : {Op::kN, Op::kT})
      for (Op op_b : {Op::kN, Op::kT}) {
        const bool a_shared = std::find(shared.begin(), shared.end(), MatrixId::kA) != shared.end();
        const bool b_shared = std::find(shared.begin(), shared.end(), MatrixId::kB) != shared.end();
        const uint64_t put_seed = seed += 10, run_seed = seed + 5;
        SCOPED_TRACE(std::string(a_shared ? "A " : "") + (b_shared ? "B " : "") + "resident, op_a " +
                     std::string(op_name(op_a)) + " op_b " + std::string(op_name(op_b)) + ", seeds " +
                     std::to_string(put_seed) + " " + std::to_string(run_seed));
        const MatrixDims da = stored_a_dims(s, op_a), db = stored_b_dims(s, op_b);
        std::string flags;
        std::vector<std::string> handles;
        if (a_shared) {
          handles.push_back(put(da.rows, da.cols, put_seed));
          flags += " --a-handle " + handles.back();
        }
        if (b_shared) {
          handles.push_back(put(db.rows, db.cols, put_seed + 1));
          flags += " --b-handle " + handles.back();
        }
        for (const std::string& h : handles) ASSERT_FALSE(h.empty());
        const std::string out = dir + "/sgemm-batch-resident-c.f32";
        std::filesystem::remove(out);
        auto r =
            testing::run_command(cli + " submit --server " + server_->unix_address() + " --no-retry --json --batch " +
                                 std::to_string(count) + " --m 37 --n 23 --k 19" + flags + " --op-a " +
                                 std::string(op_name(op_a)) + " --op-b " + std::string(op_name(op_b)) +
                                 " --alpha -1.5 --beta 0.75 --seed " + std::to_string(run_seed) + " --out " + out);
        ASSERT_EQ(r.exit_code, 0) << r.output;
        const auto j = nlohmann::json::parse(r.output);
        EXPECT_EQ(j["transport"], "grpc");
        EXPECT_EQ(j["products_failed"], 0);
        // What the products read: the shared operand at offset 0 for every product.
        BatchProducts batch;
        batch.shape = s;
        batch.count = count;
        BatchLayout l = batch_layout(batch);
        std::vector<float> a(std::size_t(l.a_elements)), b(std::size_t(l.b_elements)), c0(std::size_t(l.c_elements));
        if (a_shared) {
          std::fill(l.a_offset.begin(), l.a_offset.end(), 0);
          a.resize(std::size_t(s.m * s.k));
          fill_random(a, put_seed);
        } else {
          fill_random(a, run_seed);
        }
        if (b_shared) {
          std::fill(l.b_offset.begin(), l.b_offset.end(), 0);
          b.resize(std::size_t(s.k * s.n));
          fill_random(b, put_seed + 1);
        } else {
          fill_random(b, run_seed + 1);
        }
        fill_random(c0, run_seed + 2);
        const std::vector<float> c = read_raw(out, l.c_elements);
        for (std::size_t i = 0; i < std::size_t(count); ++i) {
          SCOPED_TRACE("product " + std::to_string(i));
          const VerifyResult v = cli::verify_batch_product(batch, l, i, -1.5f, 0.75f, op_a, op_b, a.data(), b.data(),
                                                           c0.data(), c.data(), run_seed);
          EXPECT_TRUE(v.passed(kSgemmTolerance))
              << "max rel error " << v.max_rel_error << " at (" << v.worst_row << ", " << v.worst_col << ")";
          EXPECT_EQ(v.checked, s.m * s.n);
        }
        for (const std::string& h : handles) {
          auto rm = testing::run_command(cli + " rm --server " + server_->tcp_address() + " " + h);
          EXPECT_EQ(rm.exit_code, 0) << rm.output;
        }
      }
}

// What cannot work is refused before anything is sent (exit 2), naming the flags.
TEST_F(BatchE2E, CliBatchRefusesCombinationsThatCannotWork) {
  const std::string group_file = ::testing::TempDir() + "/sgemm-batch-refusal-group.txt";
  std::ofstream(group_file) << "2 3 4\n";
  const std::string base =
      testing::client_bin() + " submit --server " + server_->unix_address() + " --no-retry --batch 3 --size 8";
  const std::string h = " --b-handle 0123456789abcdef0123456789abcdef";
  const std::pair<std::string, std::string> cases[] = {
      {base + h + " --transport shm", "--b-handle with --transport shm"},
      {base + h + " --verify", "--verify needs every operand's values here"},
      {testing::client_bin() + " submit --server " + server_->unix_address() + " --group " + group_file + h,
       "--b-handle with --group"},
      {base + " --c-handle 0123456789abcdef0123456789abcdef", "--c-handle"},
      {base + h + " --b-at 1,1", "--a-at/--b-at/--c-at"},
      {base + " --keep", "--keep"},
      {base + " --split rows", "--split rows/k"},
      {base + " --transport cuda-ipc", "--transport cuda-ipc"},
  };
  for (const auto& [cmd, words] : cases) {
    SCOPED_TRACE(cmd);
    auto r = testing::run_command(cmd + " 2>&1");
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(words), std::string::npos) << r.output;
  }
}

#ifdef SGEMM_LOAD_BIN
// sgemm-load's batched and grouped request modes: every verified product
// correct (exit 0), products/s counted per product.
TEST_F(BatchE2E, LoadGeneratorSendsBatchesAndGroups) {
  const char* load_bin = std::getenv("SGEMM_LOAD_BIN");  // a build carried to another host
  const std::string base = std::string(load_bin ? load_bin : SGEMM_LOAD_BIN) + " --server " + server_->tcp_address() +
                           " --clients 2 --requests 4 --verify-every 2 --json";
  auto batch = testing::run_command(base + " --sizes 33x17x29,16 --batch 25 --with-c");
  ASSERT_EQ(batch.exit_code, 0) << batch.output;
  const auto jb = nlohmann::json::parse(batch.output);
  EXPECT_EQ(jb["mode"], "batch");
  EXPECT_EQ(jb["ok"], 8);
  EXPECT_EQ(jb["products_ok"], 200);
  EXPECT_EQ(jb["wrong_results"], 0);
  EXPECT_GT(jb["products_per_s"].get<double>(), jb["throughput_rps"].get<double>());
  auto group = testing::run_command(base + " --sizes 1,33x17x29,129x65x257 --group");
  ASSERT_EQ(group.exit_code, 0) << group.output;
  const auto jg = nlohmann::json::parse(group.output);
  EXPECT_EQ(jg["mode"], "group");
  EXPECT_EQ(jg["products_ok"], 24);
  EXPECT_EQ(jg["wrong_results"], 0);
}
#endif

}  // namespace
}  // namespace sgemm
