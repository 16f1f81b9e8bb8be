#include "server/service/stream_admission.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace sgemm {
namespace {

StreamPeer peer(const std::string& address, int port) {
  return {"ipv4:" + address + ":" + std::to_string(port), "ipv4:" + address};
}

TEST(StreamAdmission, PeerAddressDropsThePort) {
  EXPECT_EQ(peer_address("ipv4:10.0.0.5:41234"), "ipv4:10.0.0.5");
  EXPECT_EQ(peer_address("ipv6:[::1]:5000"), "ipv6:[::1]");
  EXPECT_EQ(peer_address("ipv6:%5B::1%5D:5000"), "ipv6:%5B::1%5D");
  EXPECT_EQ(peer_address("fd:17"), "fd:17");
  EXPECT_EQ(peer_address("unix:/run/x"), "unix:/run/x");
}

TEST(StreamAdmission, EachBoundRefusesWithItsFlagAndReleasesOnReset) {
  StreamLimits l;
  l.max_open_streams = 10;
  l.max_per_connection = 3;
  l.max_per_address = 5;
  StreamAdmission admission(l, nullptr, nullptr, nullptr);
  std::vector<StreamAdmission::Ticket> held;
  for (int i = 0; i < 3; ++i) {
    auto t = admission.open(peer("10.0.0.1", 1), nullptr);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    held.push_back(std::move(t).value());
  }
  auto over_connection = admission.open(peer("10.0.0.1", 1), nullptr);
  EXPECT_EQ(over_connection.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(over_connection.status().message().find("--max-streams-per-connection 3"), std::string::npos);
  for (int i = 0; i < 2; ++i) held.push_back(std::move(admission.open(peer("10.0.0.1", 2), nullptr)).value());
  auto over_address = admission.open(peer("10.0.0.1", 3), nullptr);
  EXPECT_EQ(over_address.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(over_address.status().message().find("--max-streams-per-address 5"), std::string::npos);
  for (int i = 0; i < 5; ++i) {
    auto t = admission.open(peer("10.0.0." + std::to_string(2 + i), 1), nullptr);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    held.push_back(std::move(t).value());
  }
  auto over_all = admission.open(peer("10.0.0.9", 1), nullptr);
  EXPECT_EQ(over_all.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(over_all.status().message().find("--max-open-streams 10"), std::string::npos);
  EXPECT_EQ(admission.open_streams(), 10);
  held.clear();
  EXPECT_EQ(admission.open_streams(), 0);
  EXPECT_TRUE(admission.open(peer("10.0.0.1", 1), nullptr).ok());
}

TEST(StreamAdmission, AConnectionRefusedTooOftenIsClosed) {
  StreamLimits l;
  l.max_open_streams = 100;
  l.max_per_connection = 2;
  std::vector<std::string> closed;
  StreamAdmission admission(
      l, nullptr, [&](const std::string& c) { closed.push_back(c); }, nullptr);
  std::vector<StreamAdmission::Ticket> held;
  for (int i = 0; i < 2; ++i) held.push_back(std::move(admission.open(peer("10.0.0.1", 7), nullptr)).value());
  for (int i = 0; i < 2; ++i) EXPECT_FALSE(admission.open(peer("10.0.0.1", 7), nullptr).ok());
  EXPECT_TRUE(closed.empty()) << "closed after only as many refusals as the bound";
  EXPECT_FALSE(admission.open(peer("10.0.0.1", 7), nullptr).ok());
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_EQ(closed[0], "ipv4:10.0.0.1:7");
}

}  // namespace
}  // namespace sgemm
