// End to end through request rings (sgemm.proto OpenRing, docs/transport.md
// "Request rings"): the in-process server on its Unix socket, the client
// library's MultiplyRpc::kRing and, for what a well-behaved client never
// does, a ring driven by hand. Every product is checked against the fp64
// reference; every refusal's status and message are asserted, and the server
// answers the next request right after each.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "client/request_ring.h"
#include "client/sgemm_client.h"
#include "common/reference_gemm.h"
#include "common/request_ring.h"
#include "sgemm/v1/sgemm.grpc.pb.h"
#include "tests/e2e/in_process_server.h"

namespace sgemm {
namespace {

namespace v1 = ::sgemm::v1;
using Clock = std::chrono::steady_clock;

uint64_t fresh_seed() { return (uint64_t(std::random_device{}()) << 32) | std::random_device{}(); }

class RingE2E : public testing::SuiteServer<RingE2E> {
 public:
  static void configure(ServerOptions& o, EngineOptions&) { o.service.max_rings = 3; }

 protected:
  static std::unique_ptr<Client> ring_client() {
    ClientOptions co;
    co.rpc = MultiplyRpc::kRing;
    co.transport = Transport::kGrpc;  // operands in the ring's messages
    return Client::connect(server_->unix_address(), co);
  }

  // A ring opened by hand in a region of `client`'s: the test writes its slots itself.
  struct HandRing {
    std::unique_ptr<Region> region;
    std::unique_ptr<RequestRing> ring;
    ring::RingView view;
  };
  static StatusOr<HandRing> hand_ring(Client& client, int slots = 2, int64_t slot_bytes = 64 << 10) {
    HandRing h;
    SGEMM_ASSIGN_OR_RETURN(h.region, client.create_region(ring::ring_bytes(slots, slot_bytes)));
    RingOptions o;
    o.slots = slots;
    o.slot_bytes = slot_bytes;
    SGEMM_ASSIGN_OR_RETURN(
        h.ring, RequestRing::open(grpc::CreateChannel(server_->unix_address(), grpc::InsecureChannelCredentials()),
                                  nullptr, h.region->name(), h.region->data(), o));
    h.view = ring::RingView(h.region->data(), slots, slot_bytes);
    return h;
  }
};

void expect_product(const GemmShape& s, Op op_a, Op op_b, float alpha, float beta, const std::vector<float>& a,
                    const std::vector<float>& b, const std::vector<float>* c0, const std::vector<float>& c,
                    uint64_t seed) {
  // The reference takes row-major m x k and k x n: transpose what is stored transposed.
  std::vector<float> an = a, bn = b;
  if (op_a == Op::kT)
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t p = 0; p < s.k; ++p) an[std::size_t(i * s.k + p)] = a[std::size_t(p * s.m + i)];
  if (op_b == Op::kT)
    for (int64_t p = 0; p < s.k; ++p)
      for (int64_t j = 0; j < s.n; ++j) bn[std::size_t(p * s.n + j)] = b[std::size_t(j * s.k + p)];
  const auto rows = rows_to_verify(s.m, s.n, s.k, seed);
  auto v = verify_gemm(s.m, s.n, s.k, alpha, an.data(), bn.data(), beta, c0 ? c0->data() : nullptr, c.data(), rows);
  EXPECT_TRUE(v.passed(kSgemmTolerance)) << "max rel error " << v.max_rel_error << " at (" << v.worst_row << ", "
                                         << v.worst_col << ")";
}

TEST_F(RingE2E, OddShapesEveryOpAndCThroughTheRing) {
  auto client = ring_client();
  for (GemmShape s : {GemmShape{1, 1, 1}, GemmShape{17, 33, 65}, GemmShape{64, 64, 64}, GemmShape{129, 3, 257},
                      GemmShape{1, 300, 7}}) {
    for (Op op_a : {Op::kN, Op::kT})
      for (Op op_b : {Op::kN, Op::kT})
        for (bool with_c : {false, true}) {
          const uint64_t seed = fresh_seed();
          SCOPED_TRACE("shape " + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) +
                       " op_a " + std::string(op_name(op_a)) + " op_b " + std::string(op_name(op_b)) + " C " +
                       std::to_string(with_c) + " seed " + std::to_string(seed));
          std::vector<float> a(std::size_t(s.m * s.k)), b(std::size_t(s.k * s.n)), c0(std::size_t(s.m * s.n));
          fill_random(a, seed);
          fill_random(b, seed + 1);
          fill_random(c0, seed + 2);
          MultiplyOptions opt;
          opt.op_a = op_a;
          opt.op_b = op_b;
          opt.alpha = 0.75f;
          opt.beta = with_c ? -1.25f : 0.0f;
          auto res = client->multiply(s, a.data(), b.data(), with_c ? c0.data() : nullptr, opt);
          ASSERT_TRUE(res.ok()) << res.status().to_string();
          EXPECT_EQ(res->rpc, MultiplyRpc::kRing);
          EXPECT_FALSE(res->summary.devices.empty());
          expect_product(s, op_a, op_b, opt.alpha, opt.beta, a, b, with_c ? &c0 : nullptr, res->c, seed);
        }
  }
  EXPECT_TRUE(server_->log_has("rpc=ring")) << "the log line names the ring";
}

TEST_F(RingE2E, RegionOperandsThroughTheRing) {
  ClientOptions co;
  co.rpc = MultiplyRpc::kRing;
  auto client = Client::connect(server_->unix_address(), co);
  const GemmShape s{77, 45, 130};
  const uint64_t seed = fresh_seed();
  std::vector<float> a(std::size_t(s.m * s.k)), b(std::size_t(s.k * s.n));
  fill_random(a, seed);
  fill_random(b, seed + 1);
  auto res = client->multiply(s, a.data(), b.data(), nullptr, {});  // A and B through a region of the client's
  ASSERT_TRUE(res.ok()) << res.status().to_string();
  EXPECT_EQ(res->rpc, MultiplyRpc::kRing);
  EXPECT_EQ(res->summary.bytes_in, 0) << "the operands went through shared memory, not the ring's message";
  expect_product(s, Op::kN, Op::kN, 1.0f, 0.0f, a, b, nullptr, res->c, seed);
}

TEST_F(RingE2E, ManyThreadsShareOneRing) {
  auto client = ring_client();
  std::atomic<int> wrong{0}, failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 15; ++i) {
        const GemmShape s{int64_t(5 + 7 * t), int64_t(3 + i), 33};
        const uint64_t seed = fresh_seed();
        std::vector<float> a(std::size_t(s.m * s.k)), b(std::size_t(s.k * s.n));
        fill_random(a, seed);
        fill_random(b, seed + 1);
        auto res = client->multiply(s, a.data(), b.data(), nullptr, {});
        if (!res.ok() || res->rpc != MultiplyRpc::kRing) {
          ++failed;
          continue;
        }
        const auto rows = rows_to_verify(s.m, s.n, s.k, seed);
        if (!verify_gemm(s.m, s.n, s.k, 1.0f, a.data(), b.data(), 0.0f, nullptr, res->c.data(), rows)
                 .passed(kSgemmTolerance))
          ++wrong;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
}

TEST_F(RingE2E, ABadSlotGetsItsStatusAndTheRingServesOn) {
  auto client = Client::connect(server_->unix_address());
  auto h = hand_ring(*client);
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  const auto deadline = [] { return Clock::now() + std::chrono::seconds(30); };

  // Bytes that are no MultiplyUnaryRequest.
  const std::string junk = "\xff\xff\xff\xff not a message";
  grpc::Slice junk_slice(junk);
  grpc::ByteBuffer response;
  Status st = h->ring->exchange(grpc::ByteBuffer(&junk_slice, 1), &response, deadline());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();

  // A header the checks refuse: the field is named, as MultiplyUnary names it.
  v1::MultiplyRequest req;
  req.mutable_header()->set_m(-3);
  req.mutable_header()->set_n(4);
  req.mutable_header()->set_k(5);
  grpc::Slice bad_shape(req.SerializeAsString());
  st = h->ring->exchange(grpc::ByteBuffer(&bad_shape, 1), &response, deadline());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find("m"), std::string::npos) << st.message();

  // A request_bytes past the slot, written by hand (the library never does it).
  ring::SlotHeader* slot = h->view.slot(1);
  slot->request_bytes = uint32_t(h->view.payload_capacity() + 1);
  slot->caller_waiting.store(0);
  slot->state.store(ring::kPosted, std::memory_order_seq_cst);
  h->view.header()->doorbell.fetch_add(1);
  ring::futex_wake_all(&h->view.header()->doorbell);
  const auto until = deadline();
  while (slot->state.load(std::memory_order_acquire) != ring::kAnswered && Clock::now() < until)
    ring::futex_wait(&slot->state, slot->state.load(), 10000);
  ASSERT_EQ(slot->state.load(), uint32_t(ring::kAnswered));
  EXPECT_EQ(slot->status_code, int32_t(grpc::StatusCode::INVALID_ARGUMENT));
  const std::string message(reinterpret_cast<const char*>(h->view.payload(1)), slot->answer_bytes);
  EXPECT_NE(message.find("request_bytes"), std::string::npos) << message;
  slot->state.store(ring::kFree);

  // An answer larger than the slot: RESOURCE_EXHAUSTED, saying so.
  const GemmShape big{200, 200, 1};
  std::vector<float> a(std::size_t(big.m * big.k), 1.0f), b(std::size_t(big.k * big.n), 2.0f);
  v1::MultiplyRequest head;
  head.mutable_header()->set_m(big.m);
  head.mutable_header()->set_n(big.n);
  head.mutable_header()->set_k(big.k);
  head.mutable_header()->set_alpha(1.0f);
  auto chunk = [](v1::Matrix id, const std::vector<float>& v) {
    v1::MultiplyRequest r;
    r.mutable_chunk()->set_matrix(id);
    r.mutable_chunk()->set_data(v.data(), v.size() * sizeof(float));
    return r.SerializeAsString();
  };
  grpc::Slice big_request(head.SerializeAsString() + chunk(v1::MATRIX_A, a) + chunk(v1::MATRIX_B, b));
  st = h->ring->exchange(grpc::ByteBuffer(&big_request, 1), &response, deadline());
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.to_string();
  EXPECT_NE(st.message().find("slot"), std::string::npos) << st.message();

  // The same ring answers a good product right after.
  const GemmShape s{20, 30, 1};
  std::vector<float> a2(std::size_t(s.m * s.k), 2.0f), b2(std::size_t(s.k * s.n), 3.0f);
  head.mutable_header()->set_m(s.m);
  head.mutable_header()->set_n(s.n);
  grpc::Slice good(head.SerializeAsString() + chunk(v1::MATRIX_A, a2) + chunk(v1::MATRIX_B, b2));
  st = h->ring->exchange(grpc::ByteBuffer(&good, 1), &response, deadline());
  ASSERT_TRUE(st.ok()) << st.to_string();
  v1::MultiplyUnaryResponse answer;
  std::string bytes;
  std::vector<grpc::Slice> parts;
  ASSERT_TRUE(response.Dump(&parts).ok());
  for (const auto& p : parts) bytes.append(reinterpret_cast<const char*>(p.begin()), p.size());
  ASSERT_TRUE(answer.ParseFromString(bytes));
  ASSERT_EQ(answer.c().data().size(), std::size_t(s.m * s.n) * sizeof(float));
  const float* c = reinterpret_cast<const float*>(answer.c().data().data());
  for (int64_t i = 0; i < s.m * s.n; ++i) ASSERT_EQ(c[i], 6.0f) << "element " << i;
}

// An unfriendly ring caller, by what it costs the server: rings opened and
// never used (and a thousand more asked for), answers never read, a request
// at the slot's size limit, a request whose operands stop short. A normal
// caller is served correctly throughout, and nothing is held afterwards.
TEST_F(RingE2E, UnfriendlyRingCallersCostBoundedResources) {
  auto client = Client::connect(server_->unix_address());
  ClientOptions normal_options;
  normal_options.rpc = MultiplyRpc::kUnary;  // the rings are all taken by the unfriendly caller
  auto normal = Client::connect(server_->unix_address(), normal_options);
  const auto served_right = [&](const char* beside) {
    const GemmShape s{45, 29, 71};
    const uint64_t seed = fresh_seed();
    std::vector<float> a(std::size_t(s.m * s.k)), b(std::size_t(s.k * s.n));
    fill_random(a, seed);
    fill_random(b, seed + 1);
    auto res = normal->multiply(s, a.data(), b.data(), nullptr, {});
    ASSERT_TRUE(res.ok()) << beside << ": " << res.status().to_string();
    expect_product(s, Op::kN, Op::kN, 1.0f, 0.0f, a, b, nullptr, res->c, seed);
  };

  // Idle rings: --max-rings (3) of them, each a sleeping thread; a thousand more are refused at once.
  std::vector<HandRing> rings;
  for (int i = 0; i < 3; ++i) {
    auto h = hand_ring(*client);
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    rings.push_back(std::move(*h));
  }
  auto stub = v1::Sgemm::NewStub(grpc::CreateChannel(server_->unix_address(), grpc::InsecureChannelCredentials()));
  int refused = 0;
  for (int i = 0; i < 1000; ++i) {
    grpc::ClientContext ctx;
    v1::OpenRingRequest req;
    req.set_region(rings[0].region->name());  // a formatted ring of the same caller's
    req.set_slots(2);
    req.set_slot_bytes(64 << 10);
    auto reader = stub->OpenRing(&ctx, req);
    v1::RingEvent e;
    if (!reader->Read(&e) && reader->Finish().error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) ++refused;
  }
  EXPECT_EQ(refused, 1000) << "a ring past --max-rings was not refused with RESOURCE_EXHAUSTED";
  served_right("beside 3 idle rings and 1,000 refused");

  // Answers never read: the server answers into the caller's memory and holds nothing for it.
  HandRing& h = rings[0];
  const GemmShape s{30, 20, 10};
  v1::MultiplyRequest head;
  head.mutable_header()->set_m(s.m);
  head.mutable_header()->set_n(s.n);
  head.mutable_header()->set_k(s.k);
  auto chunk = [](v1::Matrix id, int64_t count) {
    v1::MultiplyRequest r;
    r.mutable_chunk()->set_matrix(id);
    r.mutable_chunk()->set_data(std::string(std::size_t(count) * sizeof(float), '\0'));
    return r.SerializeAsString();
  };
  const std::string product =
      head.SerializeAsString() + chunk(v1::MATRIX_A, s.m * s.k) + chunk(v1::MATRIX_B, s.k * s.n);
  const auto post = [&](int slot, const std::string& bytes) {
    std::memcpy(h.view.payload(slot), bytes.data(), bytes.size());
    h.view.slot(slot)->request_bytes = uint32_t(bytes.size());
    h.view.slot(slot)->state.store(ring::kPosted, std::memory_order_seq_cst);
    h.view.header()->doorbell.fetch_add(1);
    ring::futex_wake_all(&h.view.header()->doorbell);
  };
  const auto answered = [&](int slot) {
    ring::SlotHeader* sh = h.view.slot(slot);
    const auto until = Clock::now() + std::chrono::seconds(30);
    while (sh->state.load(std::memory_order_acquire) != ring::kAnswered && Clock::now() < until)
      ring::futex_wait(&sh->state, sh->state.load(), 10000);
    return sh->state.load() == ring::kAnswered ? sh->status_code : -1;
  };
  post(0, product);
  post(1, product);
  EXPECT_EQ(answered(0), 0);
  EXPECT_EQ(answered(1), 0);
  testing::expect_released(*client, "with two answers never read");
  served_right("beside two answers never read");

  // A request of exactly the slot's payload (a header, then padding that is no message).
  std::string at_limit = head.SerializeAsString();
  at_limit.resize(std::size_t(h.view.payload_capacity()), '\xff');
  post(0, at_limit);
  EXPECT_EQ(answered(0), int32_t(grpc::StatusCode::INVALID_ARGUMENT));
  // Operands that stop short: A's chunk covers half of A.
  post(1, head.SerializeAsString() + chunk(v1::MATRIX_A, s.m * s.k / 2) + chunk(v1::MATRIX_B, s.k * s.n));
  EXPECT_EQ(answered(1), int32_t(grpc::StatusCode::INVALID_ARGUMENT));
  const std::string message(reinterpret_cast<const char*>(h.view.payload(1)), h.view.slot(1)->answer_bytes);
  EXPECT_NE(message.find("A"), std::string::npos) << message;
  served_right("after the refused slots");

  // Closed: the rings' threads and regions go, and nothing is held.
  rings.clear();
  testing::expect_released(*client, "after the rings closed");
  served_right("after the rings closed");
}

TEST_F(RingE2E, OpeningIsCheckedAndBounded) {
  auto client = Client::connect(server_->unix_address());
  auto region = client->create_region(ring::ring_bytes(2, 4096));
  ASSERT_TRUE(region.ok()) << region.status().to_string();
  auto open = [&](const std::string& target, const std::string& name, int slots, int64_t slot_bytes) {
    auto stub = v1::Sgemm::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    v1::OpenRingRequest req;
    req.set_region(name);
    req.set_slots(slots);
    req.set_slot_bytes(slot_bytes);
    auto reader = stub->OpenRing(&ctx, req);
    v1::RingEvent e;
    EXPECT_FALSE(reader->Read(&e)) << "the ring opened";
    return reader->Finish();
  };
  // Not formatted: the region holds zeros.
  grpc::Status st = open(server_->unix_address(), (*region)->name(), 2, 4096);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_NE(st.error_message().find("magic"), std::string::npos) << st.error_message();
  ring::RingView((*region)->data(), 2, 4096).format();
  st = open(server_->unix_address(), (*region)->name(), 3, 4096);  // past the region
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  st = open(server_->unix_address(), (*region)->name(), 2, 100);  // not a multiple of 64
  EXPECT_NE(st.error_message().find("slot_bytes"), std::string::npos) << st.error_message();
  st = open(server_->unix_address(), "no-such-region", 2, 4096);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND) << st.error_message();
  st = open(server_->tcp_address(), (*region)->name(), 2, 4096);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << st.error_message();

  // --max-rings 3: a fourth is refused while three are open, and admitted once one closes.
  std::vector<HandRing> open_rings;
  for (int i = 0; i < 3; ++i) {
    auto h = hand_ring(*client);
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    open_rings.push_back(std::move(*h));
  }
  auto fourth = hand_ring(*client);
  EXPECT_EQ(fourth.status().code(), StatusCode::kResourceExhausted) << fourth.status().to_string();
  EXPECT_NE(fourth.status().message().find("--max-rings"), std::string::npos) << fourth.status().to_string();
  open_rings.pop_back();  // closes the ring, then unregisters its region (which waits for the ring's end)
  const auto until = Clock::now() + std::chrono::seconds(30);
  StatusOr<HandRing> again = ResourceExhausted("not tried");
  while (!again.ok() && Clock::now() < until) again = hand_ring(*client);
  EXPECT_TRUE(again.ok()) << again.status().to_string();
}

TEST_F(RingE2E, ClosingARingReleasesItsRegion) {
  auto client = Client::connect(server_->unix_address());
  auto h = hand_ring(*client);
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  h->ring.reset();  // cancels OpenRing and waits for the call's end
  // The server's ring held the region; once it ends the region goes without
  // waiting for any request.
  auto waited = h->region->unregister();
  ASSERT_TRUE(waited.ok()) << waited.status().to_string();
  EXPECT_LE(*waited, 1) << "only the ring's own hold, if its end has not reached the region yet";
}

TEST_F(RingE2E, CliSubmitThroughTheRingVerifies) {
  const std::string cli = testing::client_bin();
  for (const char* transport : {"grpc", "shm"}) {
    SCOPED_TRACE(transport);
    auto r = testing::run_command(cli + " submit --server " + server_->unix_address() + " --transport " + transport +
                                  " --rpc ring --m 67 --n 31 --k 45 --op-a t --beta 0.5 --verify 2>&1");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("rpc: ring"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("PASS"), std::string::npos) << r.output;
  }
}

TEST_F(RingE2E, TheRingNeedsTheUnixSocket) {
  ClientOptions co;
  co.rpc = MultiplyRpc::kRing;
  auto client = Client::connect(server_->tcp_address(), co);
  std::vector<float> a(4, 1.0f), b(4, 1.0f);
  auto res = client->multiply({2, 2, 2}, a.data(), b.data(), nullptr, {});
  EXPECT_EQ(res.status().code(), StatusCode::kFailedPrecondition) << res.status().to_string();
  EXPECT_NE(res.status().message().find("unix:"), std::string::npos) << res.status().to_string();
}

// A server that stops closes its rings (UNAVAILABLE), and a client's next
// product through its ring says so instead of waiting for an answer.
TEST(RingShutdownE2E, AServerThatStopsClosesItsRingsAndTheClientIsTold) {
  testing::InProcessServer server;
  ASSERT_TRUE(server.running()) << server.log();
  ClientOptions co;
  co.rpc = MultiplyRpc::kRing;
  co.transport = Transport::kGrpc;
  co.retry.max_attempts = 1;
  auto client = Client::connect(server.unix_address(), co);
  std::vector<float> a(12, 1.0f), b(12, 2.0f);
  auto first = client->multiply({3, 4, 4}, a.data(), b.data(), nullptr, {});
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_EQ(first->rpc, MultiplyRpc::kRing);
  EXPECT_EQ(server.stop(), 0) << "the open ring does not hold the server up";
  auto after = client->multiply({3, 4, 4}, a.data(), b.data(), nullptr, {});
  EXPECT_EQ(after.status().code(), StatusCode::kUnavailable) << after.status().to_string();
}

}  // namespace
}  // namespace sgemm
