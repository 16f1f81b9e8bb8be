#include "server/app/cluster_env.h"

#include <charconv>

namespace sgemm {
namespace {

// A variable that must hold a non-negative integer.
StatusOr<int> env_int(const EnvLookup& env, const char* name) {
  const char* text = env(name);
  if (!text || !*text) return InvalidArgument(std::string(name) + " is not set (a LeaderWorkerSet sets it)");
  int value = 0;
  const char* end = text + std::char_traits<char>::length(text);
  const auto [last, ec] = std::from_chars(text, end, value);
  if (ec != std::errc() || last != end || value < 0)
    return InvalidArgument(std::string(name) + "='" + text + "' is not a non-negative integer");
  return value;
}

}  // namespace

StatusOr<std::string> apply_cluster_env(const EnvLookup& env, ServerOptions* options) {
  const char* index_text = env("LWS_WORKER_INDEX");
  if (!index_text) return std::string();  // not in a LeaderWorkerSet
  if (!options->cluster_listen.empty() || !options->join.empty())
    return std::string("LeaderWorkerSet: --cluster-listen/--join given, LWS_* variables not used");
  SGEMM_ASSIGN_OR_RETURN(const int index, env_int(env, "LWS_WORKER_INDEX"));
  SGEMM_ASSIGN_OR_RETURN(const int size, env_int(env, "LWS_GROUP_SIZE"));
  if (size < 1) return InvalidArgument("LWS_GROUP_SIZE=0: a group has at least its leader");
  if (index >= size)
    return InvalidArgument("LWS_WORKER_INDEX=" + std::to_string(index) +
                           " is not below LWS_GROUP_SIZE=" + std::to_string(size));
  const std::string port = std::to_string(kLwsClusterPort);
  const std::string group = "pod " + std::to_string(index) + " of a group of " + std::to_string(size);
  if (size == 1) return "LeaderWorkerSet: " + group + ": no members to coordinate, not a cluster";
  if (index == 0) {
    options->cluster_listen = "0.0.0.0:" + port;
    return "LeaderWorkerSet: " + group + ": coordinating on " + options->cluster_listen + " (" +
           std::to_string(size - 1) + " members to join)";
  }
  const char* leader = env("LWS_LEADER_ADDRESS");
  if (!leader || !*leader)
    return InvalidArgument("LWS_LEADER_ADDRESS is not set: worker " + std::to_string(index) +
                           " of a LeaderWorkerSet has no coordinator to join");
  options->join = std::string(leader) + ":" + port;
  return "LeaderWorkerSet: " + group + ": joining " + options->join;
}

}  // namespace sgemm
