// The planner's cost model: the pieces every strategy's estimate is made of
// (transfers over a link, the kernel's rate for a shape, a pipelined shard).
// Private to server/planner; the constants come from PlannerOptions and
// DeviceCaps (measured, docs/engine.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "server/planner/plan.h"

namespace sgemm::cost {

constexpr double kBytesPerElement = 4.0;

// Milliseconds to move `bytes` at `gbps` (1e9 bytes/s).
double transfer_ms(double bytes, double gbps);
// Effective fp32 rate (flop/s) of a device for a product of this extent.
double rate_flops(const DeviceCaps& d, int64_t m, int64_t n, int64_t k, const PlannerOptions& o);
// Host link rate of a device, shared with the requests already on it.
double link_gbps(const DeviceCaps& d, const PlannerOptions& o);
// A pipelined shard: `in_ms` of copies split over `chunks`, kernel `k_ms`,
// copy-out `out_ms`. The first chunk's copy and the last chunk's copy-out are
// exposed; in between the slowest stream sets the pace.
double pipelined_ms(double in_ms, double k_ms, double out_ms, int chunks);
// Rows of one device: A rows (and C rows) in, kernel, C rows out. B excluded.
double rows_shard_ms(const GemmShape& s, bool has_c, int64_t rows, const DeviceCaps& d, const PlannerOptions& o);
// The devices' rates for the request's shape: the weights of an uneven split.
std::vector<double> device_weights(const PlanRequest& r, const PlannerOptions& o);
// "0.123 ms" / "12.1 ms".
std::string fmt_ms(double ms);

}  // namespace sgemm::cost
