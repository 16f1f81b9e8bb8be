// The checks of device-buffer operands (CUDA IPC) that need no GPU: the
// header's refs before anything is opened, and the registry's refusals (no
// cuda backend, TCP, another client's allocation) with a fake opener.
#include "server/service/device_operands.h"

#include <gtest/gtest.h>

#include <atomic>
#include <limits>

#include "server/service/device_handles.h"

namespace sgemm {
namespace {

DeviceRef ref(char tag = 'x') { return DeviceRef{std::string(kIpcHandleBytes, tag), "GPU-0000", 0, 0, false}; }

GemmRequest request(int64_t m, int64_t n, int64_t k) {
  GemmRequest r;
  r.shape = {m, n, k};
  return r;
}

constexpr int64_t kMaxLd = std::numeric_limits<int32_t>::max();

void expect_invalid(const Status& st, const std::string& names) {
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find(names), std::string::npos) << st.message();
}

TEST(DeviceRefs, AcceptsAWellFormedHeader) {
  DeviceRefs refs{ref('a'), ref('b'), std::nullopt, ref('c')};
  refs.a->ld = 5;  // 7 x 3 A inside rows of 5
  EXPECT_TRUE(check_device_refs(request(7, 5, 3), refs, 0, "", kMaxLd).ok());
}

TEST(DeviceRefs, NamesTheFieldAtFault) {
  const GemmRequest r = request(7, 5, 3);
  DeviceRefs refs{ref(), ref(), std::nullopt, std::nullopt};
  refs.b->ipc_handle = "short";
  expect_invalid(check_device_refs(r, refs, 0, "", kMaxLd), "header.b_device.ipc_handle has 5 bytes");
  refs = {ref(), ref(), std::nullopt, std::nullopt};
  refs.a->device.clear();
  expect_invalid(check_device_refs(r, refs, 0, "", kMaxLd), "header.a_device.device is empty");
  refs = {ref(), ref(), std::nullopt, std::nullopt};
  refs.a->offset = 6;
  expect_invalid(check_device_refs(r, refs, 0, "", kMaxLd), "header.a_device.offset 6");
  refs = {ref(), ref(), std::nullopt, std::nullopt};
  refs.b->ld = 4;  // B is 3 x 5
  expect_invalid(check_device_refs(r, refs, 0, "", kMaxLd), "header.b_device.ld 4");
  refs = {ref(), ref(), std::nullopt, ref()};
  refs.out->offset = -4;
  expect_invalid(check_device_refs(r, refs, 0, "", kMaxLd), "header.out_device.offset -4");
}

TEST(DeviceRefs, NeedsAAndBAndCExactlyWithHasC) {
  GemmRequest r = request(7, 5, 3);
  expect_invalid(check_device_refs(r, DeviceRefs{ref(), std::nullopt, std::nullopt, std::nullopt}, 0, "", kMaxLd),
                 "header.b_device");
  expect_invalid(check_device_refs(r, DeviceRefs{ref(), ref(), ref(), std::nullopt}, 0, "", kMaxLd),
                 "header.c_device is set but header.has_c is not");
  r.has_c = true;
  expect_invalid(check_device_refs(r, DeviceRefs{ref(), ref(), std::nullopt, std::nullopt}, 0, "", kMaxLd),
                 "header.c_device");
  EXPECT_TRUE(check_device_refs(r, DeviceRefs{ref(), ref(), ref(), std::nullopt}, 0, "", kMaxLd).ok());
}

TEST(DeviceRefs, RefusesTransposesStripesAndOtherSources) {
  GemmRequest r = request(7, 5, 3);
  const DeviceRefs refs{ref(), ref(), std::nullopt, std::nullopt};
  r.op_a = Op::kT;
  expect_invalid(check_device_refs(r, refs, 0, "", kMaxLd), "header.op_a");
  r.op_a = Op::kN;
  r.op_b = Op::kT;
  expect_invalid(check_device_refs(r, refs, 0, "", kMaxLd), "header.op_b");
  r.op_b = Op::kN;
  expect_invalid(check_device_refs(r, refs, 2, "", kMaxLd), "header.stripes 2");
  expect_invalid(check_device_refs(r, refs, 0, "shared-memory regions", kMaxLd), "shared-memory regions");
  EXPECT_TRUE(check_device_refs(r, DeviceRefs{}, 4, "anything", kMaxLd).ok()) << "no refs: nothing to check";
}

// Opens nothing on a GPU: each "allocation" is 4096 bytes of nowhere, counted.
class FakeOpener final : public DeviceMemoryAccess {
 public:
  class Memory final : public OpenedDeviceMemory {
   public:
    explicit Memory(std::atomic<int>* open) : open_(open) { ++*open_; }
    ~Memory() override { --*open_; }
    int device() const override { return 0; }
    std::byte* base() const override { return nullptr; }
    int64_t bytes() const override { return 4096; }

   private:
    std::atomic<int>* open_;
  };
  StatusOr<std::shared_ptr<const OpenedDeviceMemory>> open_ipc(const std::string&, const std::string&,
                                                               const std::string&) override {
    ++opens;
    return std::shared_ptr<const OpenedDeviceMemory>(std::make_shared<Memory>(&open));
  }
  std::atomic<int> opens{0}, open{0};
};

DeviceCaller caller(uint64_t connection, const std::string& client, uid_t uid = 1000) {
  return DeviceCaller{true, connection, uid, client};
}

TEST(DeviceHandleRegistry, RefusesWithoutCudaAndOverTcp) {
  DeviceHandleRegistry none(nullptr);
  const auto cpu = none.acquire(caller(1, ""), "header.a_device", ref());
  EXPECT_EQ(cpu.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(cpu.status().message().find("device buffers need the cuda backend"), std::string::npos);
  FakeOpener opener;
  DeviceHandleRegistry reg(&opener);
  DeviceCaller tcp = caller(0, "");
  tcp.unix_socket = false;
  const auto over_tcp = reg.acquire(tcp, "header.b_device", ref());
  EXPECT_EQ(over_tcp.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(over_tcp.status().message().find("header.b_device"), std::string::npos);
  EXPECT_EQ(opener.opens, 0);
}

TEST(DeviceHandleRegistry, OpensOncePerAllocationAndClosesWithTheConnection) {
  FakeOpener opener;
  DeviceHandleRegistry reg(&opener);
  auto first = reg.acquire(caller(1, "alice"), "header.a_device", ref('a'));
  auto again = reg.acquire(caller(1, "alice"), "header.a_device", ref('a'));
  auto other_conn = reg.acquire(caller(2, "alice"), "header.b_device", ref('a'));
  ASSERT_TRUE(first.ok() && again.ok() && other_conn.ok());
  EXPECT_EQ(opener.opens, 1);
  EXPECT_EQ(first->get(), again->get());
  first = Internal("dropped");
  again = Internal("dropped");
  other_conn = Internal("dropped");
  reg.drop_connection(1);
  EXPECT_EQ(reg.open_count(), 1) << "connection 2 still holds it";
  reg.drop_connection(2);
  EXPECT_EQ(reg.open_count(), 0);
  EXPECT_EQ(opener.open, 0) << "closed once no connection and no request holds it";
}

TEST(DeviceHandleRegistry, AnotherClientOrUserIsRefused) {
  FakeOpener opener;
  DeviceHandleRegistry reg(&opener);
  ASSERT_TRUE(reg.acquire(caller(1, "alice"), "header.a_device", ref('a')).ok());
  const auto bob = reg.acquire(caller(2, "bob"), "header.b_device", ref('a'));
  EXPECT_EQ(bob.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(bob.status().message().find("header.b_device.ipc_handle"), std::string::npos);
  const auto other_uid = reg.acquire(caller(1, "alice", 1001), "header.a_device", ref('a'));
  EXPECT_EQ(other_uid.status().code(), StatusCode::kPermissionDenied);
  reg.release(caller(2, "bob"), ref('a'));  // not bob's: nothing happens
  EXPECT_EQ(reg.open_count(), 1);
  reg.release(caller(1, "alice"), ref('a'));
  EXPECT_EQ(reg.open_count(), 0);
}

TEST(DeviceHandleRegistry, BindChecksTheSpanInsideTheAllocation) {
  FakeOpener opener;
  DeviceHandleRegistry reg(&opener);
  const GemmRequest r = request(7, 5, 3);
  DeviceRefs refs{ref('a'), ref('b'), std::nullopt, std::nullopt};
  refs.b->offset = 4096 - 4 * 14;  // B needs 3 x 5 = 15 floats
  const auto st = bind_device_operands(reg, caller(1, ""), r, refs, kMaxLd);
  expect_invalid(st.status(), "header.b_device");
  EXPECT_NE(st.status().message().find("overruns"), std::string::npos) << st.status().message();
  refs.b->offset = 4096 - 4 * 15;
  EXPECT_TRUE(bind_device_operands(reg, caller(1, ""), r, refs, kMaxLd).ok());
  // The output may not overlap A (same allocation), only be C itself.
  refs.out = ref('a');
  refs.out->offset = 8;
  expect_invalid(bind_device_operands(reg, caller(1, ""), r, refs, kMaxLd).status(), "header.out_device overlaps");
}

}  // namespace
}  // namespace sgemm
