#include "server/service/reflection_switch.h"

#include <grpcpp/impl/server_builder_plugin.h>

#include <algorithm>
#include <string>
#include <vector>

namespace sgemm {

namespace {

class WithoutReflection final : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    plugins->erase(std::remove_if(plugins->begin(), plugins->end(),
                                  [](const std::unique_ptr<grpc::ServerBuilderPlugin>& p) {
                                    return p && p->name() == "proto_server_reflection";
                                  }),
                   plugins->end());
  }
};

}  // namespace

std::unique_ptr<grpc::ServerBuilderOption> without_reflection() { return std::make_unique<WithoutReflection>(); }

}  // namespace sgemm
