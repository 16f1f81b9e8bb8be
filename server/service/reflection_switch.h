// gRPC server reflection, off unless asked for (docs/security.md): each
// reflection stream holds a server thread and needs no token.
//
// Linking grpc++_reflection registers its plugin with every ServerBuilder of
// the process (a static initialiser), so not calling
// InitProtoReflectionServerBuilderPlugin() is not enough; this option takes
// the plugin out of one builder: builder.SetOption(without_reflection()).
#pragma once

#include <grpcpp/impl/server_builder_option.h>

#include <memory>

namespace sgemm {

std::unique_ptr<grpc::ServerBuilderOption> without_reflection();

}  // namespace sgemm
