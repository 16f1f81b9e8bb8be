// The token table and per-client quotas (server/service/client_auth.h).
#include "server/service/client_auth.h"

#include <gtest/gtest.h>

namespace sgemm {
namespace {

constexpr const char* kTable = R"({"clients": [
  {"name": "a", "token": "aaaaaaaaaaaaaaaaaaaa", "max_in_flight": 2, "max_bytes_in_flight": 100},
  {"name": "b", "token": "bbbbbbbbbbbbbbbbbbbb", "multiply": false}
]})";

TEST(ClientAuth, FindsTheClientOfABearerToken) {
  auto table = ClientAuth::parse(kTable, "test");
  ASSERT_TRUE(table.ok()) << table.status().to_string();
  auto a = (*table)->authenticate("Bearer aaaaaaaaaaaaaaaaaaaa");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*a)->name(), "a");
  EXPECT_EQ((*a)->quota().max_in_flight, 2);
  auto b = (*table)->authenticate("Bearer bbbbbbbbbbbbbbbbbbbb");
  ASSERT_TRUE(b.ok());
  EXPECT_FALSE((*b)->quota().multiply);
}

TEST(ClientAuth, MissingMalformedAndUnknownTokensAreUnauthenticated) {
  auto table = ClientAuth::parse(kTable, "test");
  ASSERT_TRUE(table.ok());
  for (const char* v : {"", "Bearer ", "Basic aaaaaaaaaaaaaaaaaaaa", "Bearer aaaaaaaaaaaaaaaaaaa", "Bearer x"}) {
    auto r = (*table)->authenticate(v);
    ASSERT_FALSE(r.ok()) << v;
    EXPECT_EQ(r.status().code(), StatusCode::kUnauthenticated) << v;
    EXPECT_EQ(r.status().message().find("aaaaaaaaaa"), std::string::npos) << r.status().message();
  }
}

TEST(ClientAuth, QuotasOnRequestsAndBytesInFlight) {
  auto table = ClientAuth::parse(kTable, "test");
  ASSERT_TRUE(table.ok());
  AuthClient* a = *(*table)->authenticate("Bearer aaaaaaaaaaaaaaaaaaaa");
  auto too_big = a->admit(101);
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(too_big.status().message().find("max_bytes_in_flight"), std::string::npos);
  {
    auto first = a->admit(60);
    ASSERT_TRUE(first.ok());
    auto over_bytes = a->admit(60);
    ASSERT_FALSE(over_bytes.ok());
    EXPECT_EQ(a->in_flight(), 1);  // the refused request holds nothing
    EXPECT_EQ(a->bytes_in_flight(), 60);
    auto second = a->admit(10);
    ASSERT_TRUE(second.ok());
    auto third = a->admit(1);
    ASSERT_FALSE(third.ok());
    EXPECT_NE(third.status().message().find("max_in_flight 2"), std::string::npos) << third.status().message();
  }
  EXPECT_EQ(a->in_flight(), 0);
  EXPECT_EQ(a->bytes_in_flight(), 0);
  AuthClient* b = *(*table)->authenticate("Bearer bbbbbbbbbbbbbbbbbbbb");
  auto denied = b->admit(1);
  ASSERT_FALSE(denied.ok());
  EXPECT_EQ(denied.status().code(), StatusCode::kPermissionDenied);
}

TEST(ClientAuth, BadTablesNameTheEntryNeverTheToken) {
  const char* bad[] = {
      "not json",
      R"({"clients": {}})",
      R"({"clients": [{"token": "cccccccccccccccccccc"}]})",
      R"({"clients": [{"name": "c", "token": "short-secret"}]})",
      R"({"clients": [{"name": "c", "token": "cccccccccccccccccccc", "max_in_flight": -1}]})",
      R"({"clients": [{"name": "c", "token": "cccccccccccccccccccc", "quota": 1}]})",
      R"({"clients": [{"name": "c", "token": "cccccccccccccccccccc"}, {"name": "c", "token": "dddddddddddddddddddd"}]})",
      R"({"clients": [{"name": "c", "token": "cccccccccccccccccccc"}, {"name": "d", "token": "cccccccccccccccccccc"}]})",
  };
  for (const char* text : bad) {
    auto r = ClientAuth::parse(text, "tokens.json");
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("tokens.json"), std::string::npos) << r.status().message();
    EXPECT_EQ(r.status().message().find("cccccccccc"), std::string::npos) << r.status().message();
    EXPECT_EQ(r.status().message().find("short-secret"), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace sgemm
