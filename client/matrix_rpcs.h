// sgemm::Client's resident-matrix calls (docs/resident.md), kept apart from
// the Multiply data plane: PutMatrix streams the matrix in chunks straight
// from the caller's memory (wire_codec.h: no copy into protobuf), DeleteMatrix
// and ListMatrices are unary. GrpcClient (sgemm_client.cc) forwards to these.
//
// Threads: the functions block their caller; gRPC's reactions run on its threads.
#pragma once

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <string>

#include "client/sgemm_client.h"
#include "sgemm/v1/sgemm.pb.h"

namespace sgemm::matrix_rpcs {

using Prepare = std::function<void(grpc::ClientContext&)>;  // adds the token

StatusOr<PutResult> put(const std::shared_ptr<grpc::Channel>& channel, const Prepare& prepare, int64_t chunk_bytes,
                        int64_t rows, int64_t cols, const float* data, const PutOptions& options);
StatusOr<PutResult> put_region(const std::shared_ptr<grpc::Channel>& channel, const Prepare& prepare, int64_t rows,
                               int64_t cols, const RegionMatrix& matrix, const PutOptions& options);
StatusOr<int> remove(const std::shared_ptr<grpc::Channel>& channel, const Prepare& prepare, const std::string& handle);
StatusOr<MatrixList> list(const std::shared_ptr<grpc::Channel>& channel, const Prepare& prepare);

// The header's resident fields from MultiplyOptions.
void set_header_fields(const MultiplyOptions& options, sgemm::v1::GemmHeader* header);

}  // namespace sgemm::matrix_rpcs
