// ClusterJobSpec and timings <-> sgemm.v1.Cluster messages. Private to server/cluster.
#pragma once

#include <vector>

#include "common/status.h"
#include "server/engine/cluster_plane.h"
#include "sgemm/v1/cluster.pb.h"

namespace sgemm {

void job_to_proto(const ClusterJobSpec& spec, v1::ClusterJob* out);
StatusOr<ClusterJobSpec> job_from_proto(const v1::ClusterJob& in);
void timings_to_proto(const std::vector<DeviceTiming>& t, v1::ClusterJobDone* out);
std::vector<DeviceTiming> timings_from_proto(const v1::ClusterJobDone& in);

}  // namespace sgemm
