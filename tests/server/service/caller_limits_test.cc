// The limits that keep a caller from holding what it has not paid for
// (docs/security.md): the minimum upload rate, outputs bounded by inputs,
// resident quotas charged at reservation.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "common/log_text.h"
#include "server/service/client_auth.h"
#include "server/service/request_assembly.h"

namespace sgemm {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(UploadPace, BytesNotMessagesCountAfterTheGrace) {
  RequestLimits l;
  l.min_upload_bytes_per_s = 1 << 20;
  const milliseconds grace(2000);
  // Within the grace anything goes, even nothing.
  EXPECT_TRUE(check_upload_pace(0, seconds(2), grace, 1 << 30, l, "the request").ok());
  // 1 s past it: 1 MiB is due.
  EXPECT_TRUE(check_upload_pace(1 << 20, seconds(3), grace, 1 << 30, l, "the request").ok());
  const Status slow = check_upload_pace((1 << 20) - 4, seconds(3), grace, 1 << 30, l, "the request");
  EXPECT_EQ(slow.code(), StatusCode::kDeadlineExceeded);
  for (const char* part : {"the request uploaded too slowly", "1073741824 bytes of server memory", "1048572 bytes",
                           "--min-upload-rate", "--idle-timeout"})
    EXPECT_NE(slow.message().find(part), std::string::npos) << part << " in: " << slow.message();
  // The report's trickler: 4 bytes per 10 s message, 40 bytes after 100 s.
  EXPECT_EQ(check_upload_pace(40, seconds(100), milliseconds(30000), int64_t{12} << 30, l, "x").code(),
            StatusCode::kDeadlineExceeded);
  // A whole upload of U bytes ends within grace + U / rate.
  EXPECT_TRUE(check_upload_pace(int64_t{64} << 20, seconds(66), grace, 1, l, "x").ok());
  EXPECT_FALSE(check_upload_pace(int64_t{64} << 20, seconds(67), grace, 1, l, "x").ok());
  l.min_upload_bytes_per_s = 0;  // off
  EXPECT_TRUE(check_upload_pace(0, seconds(1000), grace, 1 << 30, l, "x").ok());
}

TEST(OutputBound, CIsBoundedByItsInputsAboveTheFloor) {
  RequestLimits l;  // 64x, 256 MiB floor
  GemmRequest r;
  r.shape = {32768, 32768, 1};  // 4 GiB of C from 256 KiB
  Status st = check_output_bound(r, l);
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  for (const char* part : {"4294967296 bytes from 262144 bytes", "--max-output-ratio", "--output-floor-bytes"})
    EXPECT_NE(st.message().find(part), std::string::npos) << part << " in: " << st.message();
  r.shape = {8192, 8192, 1};  // 256 MiB: the floor
  EXPECT_TRUE(check_output_bound(r, l).ok());
  r.shape = {16384, 16384, 1};  // 1 GiB from 128 KiB
  EXPECT_FALSE(check_output_bound(r, l).ok());
  r.shape = {16384, 16384, 128};  // 1 GiB from 16 MiB: 64x
  EXPECT_TRUE(check_output_bound(r, l).ok());
  r.shape = {32768, 32768, 1};
  r.has_c = true;  // an input C is an input: the output is no larger than it
  EXPECT_TRUE(check_output_bound(r, l).ok());
  r.has_c = false;
  l.max_output_ratio = 0;  // off
  EXPECT_TRUE(check_output_bound(r, l).ok());
  l.max_output_ratio = 64;
  r.shape = {int64_t{1} << 40, int64_t{1} << 40, 1};  // no overflow in the arithmetic
  EXPECT_FALSE(check_output_bound(r, l).ok());
}

TEST(ResidentCharge, ConcurrentChargesNeverPassTheQuotaTogether) {
  ClientQuota q;
  q.max_resident_bytes = 4 * 1000;
  AuthClient client("dave", q);
  std::atomic<int64_t> in_store{0};
  std::atomic<int> granted{0}, denied{0};
  std::vector<std::thread> threads;
  std::vector<AuthClient::ResidentCharge> kept(16);
  for (int i = 0; i < 16; ++i)
    threads.emplace_back([&, i] {
      auto c = client.charge_resident(1000, [&] { return in_store.load(); });
      if (c.ok()) {
        ++granted;
        kept[std::size_t(i)] = std::move(*c);
      } else {
        ++denied;
        EXPECT_EQ(c.status().code(), StatusCode::kPermissionDenied);
        EXPECT_NE(c.status().message().find("max_resident_bytes"), std::string::npos);
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(granted, 4);
  EXPECT_EQ(denied, 12);
  // A matrix moving into the store: stored first, then its charge released.
  in_store = 1000;
  kept[0].reset();
  EXPECT_FALSE(client.charge_resident(1000, [&] { return in_store.load(); }).ok());
  EXPECT_FALSE(client.check_resident(1, in_store).ok());
  for (auto& k : kept) k.reset();
  EXPECT_TRUE(client.check_resident(3000, in_store).ok());
  EXPECT_FALSE(client.check_resident(3001, in_store).ok());
  // Without the quota nothing is charged.
  AuthClient free_client("erin", ClientQuota{});
  EXPECT_TRUE(free_client.charge_resident(int64_t{1} << 50, [] { return int64_t{1} << 50; }).ok());
}

TEST(LogText, ControlCharactersAndQuotesAreEscaped) {
  EXPECT_EQ(log_line("a\nb\rc\td\x01"
                     "e\x7f\"\\"),
            "a\\nb\\rc\\td\\x01e\\x7f\"\\");
  EXPECT_EQ(log_field("say \"hi\"\\\n"), "say \\\"hi\\\"\\\\\\n");
  EXPECT_EQ(log_line("caf\xc3\xa9"), "caf\xc3\xa9");  // UTF-8 passes
  EXPECT_EQ(log_line(""), "");
}

}  // namespace
}  // namespace sgemm
