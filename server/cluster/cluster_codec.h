// ClusterJobSpec and timings <-> sgemm.v1.Cluster messages. Private to server/cluster.
#pragma once

#include <cstddef>
#include <vector>

#include "common/status.h"
#include "server/engine/cluster_plane.h"
#include "sgemm/v1/cluster.pb.h"

namespace sgemm {

void job_to_proto(const ClusterJobSpec& spec, v1::ClusterJob* out);
StatusOr<ClusterJobSpec> job_from_proto(const v1::ClusterJob& in);
void timings_to_proto(const std::vector<DeviceTiming>& t, v1::ClusterJobDone* out);
std::vector<DeviceTiming> timings_from_proto(const v1::ClusterJobDone& in);
void kernel_rows_to_proto(const std::vector<KernelRowUse>& rows, v1::ClusterJobDone* out);
// At most kMaxClusterKernelRows rows, names cut at kMaxClusterKernelRowName
// characters, negative counts taken as 0: a member's message is bounded.
std::vector<KernelRowUse> kernel_rows_from_proto(const v1::ClusterJobDone& in);
inline constexpr int kMaxClusterKernelRows = 64;
inline constexpr std::size_t kMaxClusterKernelRowName = 256;

}  // namespace sgemm
