#include "server/app/cluster_env.h"

#include <gtest/gtest.h>

#include <map>

namespace sgemm {
namespace {

// A fake environment: only the variables given are set.
EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

const std::map<std::string, std::string> kWorker2 = {
    {"LWS_WORKER_INDEX", "2"}, {"LWS_GROUP_SIZE", "4"}, {"LWS_LEADER_ADDRESS", "sgemm-0.sgemm.default"}};

TEST(ClusterEnv, OutsideALeaderWorkerSetNothingChanges) {
  ServerOptions o;
  auto note = apply_cluster_env(env_of({{"LWS_GROUP_SIZE", "4"}}), &o);
  ASSERT_TRUE(note.ok()) << note.status().to_string();
  EXPECT_EQ(*note, "");
  EXPECT_EQ(o.cluster_listen, "");
  EXPECT_EQ(o.join, "");
}

TEST(ClusterEnv, TheLeaderCoordinatesOnTheClusterPort) {
  ServerOptions o;
  auto note = apply_cluster_env(
      env_of({{"LWS_WORKER_INDEX", "0"}, {"LWS_GROUP_SIZE", "4"}, {"LWS_LEADER_ADDRESS", "sgemm-0.sgemm.default"}}),
      &o);
  ASSERT_TRUE(note.ok()) << note.status().to_string();
  EXPECT_EQ(o.cluster_listen, "0.0.0.0:50052");
  EXPECT_EQ(o.join, "");
  EXPECT_NE(note->find("3 members to join"), std::string::npos) << *note;
}

TEST(ClusterEnv, AWorkerJoinsItsLeader) {
  ServerOptions o;
  auto note = apply_cluster_env(env_of(kWorker2), &o);
  ASSERT_TRUE(note.ok()) << note.status().to_string();
  EXPECT_EQ(o.join, "sgemm-0.sgemm.default:50052");
  EXPECT_EQ(o.cluster_listen, "");
  EXPECT_NE(note->find("pod 2 of a group of 4"), std::string::npos) << *note;
}

TEST(ClusterEnv, FlagsWinOverTheVariables) {
  ServerOptions joined;
  joined.join = "elsewhere:6000";
  auto note = apply_cluster_env(env_of(kWorker2), &joined);
  ASSERT_TRUE(note.ok());
  EXPECT_EQ(joined.join, "elsewhere:6000");
  EXPECT_EQ(joined.cluster_listen, "");
  EXPECT_NE(note->find("not used"), std::string::npos) << *note;

  ServerOptions listening;
  listening.cluster_listen = "0.0.0.0:6000";
  ASSERT_TRUE(apply_cluster_env(env_of(kWorker2), &listening).ok());
  EXPECT_EQ(listening.cluster_listen, "0.0.0.0:6000");
  EXPECT_EQ(listening.join, "");  // a worker's variables do not make a coordinator a member too
}

TEST(ClusterEnv, AGroupOfOneIsNoCluster) {
  ServerOptions o;
  auto note = apply_cluster_env(env_of({{"LWS_WORKER_INDEX", "0"}, {"LWS_GROUP_SIZE", "1"}}), &o);
  ASSERT_TRUE(note.ok()) << note.status().to_string();
  EXPECT_EQ(o.cluster_listen, "");
  EXPECT_EQ(o.join, "");
}

TEST(ClusterEnv, BadVariablesAreNamed) {
  const std::vector<std::pair<std::map<std::string, std::string>, std::string>> cases = {
      {{{"LWS_WORKER_INDEX", "x"}, {"LWS_GROUP_SIZE", "4"}}, "LWS_WORKER_INDEX='x'"},
      {{{"LWS_WORKER_INDEX", "-1"}, {"LWS_GROUP_SIZE", "4"}}, "LWS_WORKER_INDEX='-1'"},
      {{{"LWS_WORKER_INDEX", "1"}}, "LWS_GROUP_SIZE is not set"},
      {{{"LWS_WORKER_INDEX", "1"}, {"LWS_GROUP_SIZE", "4 "}}, "LWS_GROUP_SIZE='4 '"},
      {{{"LWS_WORKER_INDEX", "0"}, {"LWS_GROUP_SIZE", "0"}}, "LWS_GROUP_SIZE=0"},
      {{{"LWS_WORKER_INDEX", "4"}, {"LWS_GROUP_SIZE", "4"}}, "LWS_WORKER_INDEX=4 is not below LWS_GROUP_SIZE=4"},
      {{{"LWS_WORKER_INDEX", "1"}, {"LWS_GROUP_SIZE", "4"}}, "LWS_LEADER_ADDRESS is not set"},
      {{{"LWS_WORKER_INDEX", "1"}, {"LWS_GROUP_SIZE", "4"}, {"LWS_LEADER_ADDRESS", ""}}, "LWS_LEADER_ADDRESS"},
  };
  for (const auto& [vars, message] : cases) {
    ServerOptions o;
    auto note = apply_cluster_env(env_of(vars), &o);
    ASSERT_FALSE(note.ok()) << message;
    EXPECT_EQ(note.status().code(), StatusCode::kInvalidArgument) << message;
    EXPECT_NE(note.status().message().find(message), std::string::npos) << note.status().message();
    EXPECT_EQ(o.cluster_listen, "");
    EXPECT_EQ(o.join, "");
  }
}

}  // namespace
}  // namespace sgemm
