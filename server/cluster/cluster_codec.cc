#include "server/cluster/cluster_codec.h"

#include <algorithm>
#include <cstdint>
#include <string>

namespace sgemm {

void job_to_proto(const ClusterJobSpec& s, v1::ClusterJob* out) {
  out->set_job_id(s.job_id);
  out->set_epoch(s.epoch);
  out->set_kind(int(s.kind));
  out->set_m(s.shape.m);
  out->set_n(s.shape.n);
  out->set_k(s.shape.k);
  out->set_alpha(s.alpha);
  out->set_beta(s.beta);
  out->set_has_c(s.has_c);
  out->set_kernel(std::string(kernel_kind_name(s.kernel)));
  for (const Shard& sh : s.ranks) {
    auto* r = out->add_ranks();
    r->set_row_begin(sh.row_begin);
    r->set_row_end(sh.row_end);
    r->set_k_begin(sh.k_begin);
    r->set_k_end(sh.k_end);
  }
  out->set_probe_bytes(s.probe_bytes);
}

StatusOr<ClusterJobSpec> job_from_proto(const v1::ClusterJob& in) {
  ClusterJobSpec s;
  s.job_id = in.job_id();
  s.epoch = in.epoch();
  if (in.kind() != int(ClusterJobKind::kRows) && in.kind() != int(ClusterJobKind::kProbe) &&
      in.kind() != int(ClusterJobKind::kK))
    return InvalidArgument("cluster job kind " + std::to_string(in.kind()) + " is unknown to this member");
  s.kind = ClusterJobKind(in.kind());
  s.shape = GemmShape{in.m(), in.n(), in.k()};
  s.alpha = in.alpha();
  s.beta = in.beta();
  s.has_c = in.has_c();
  const auto kind = parse_kernel_kind(in.kernel());
  if (!kind) return InvalidArgument("cluster job kernel '" + in.kernel() + "' is unknown to this member");
  s.kernel = *kind;
  int rank = 0;
  for (const auto& r : in.ranks()) {
    // The row split gives every rank all of K (its coordinator may predate k_begin/k_end).
    const bool whole_k = s.kind == ClusterJobKind::kRows && r.k_end() == 0;
    s.ranks.push_back(
        Shard{rank++, r.row_begin(), r.row_end(), whole_k ? 0 : r.k_begin(), whole_k ? in.k() : r.k_end()});
  }
  s.probe_bytes = in.probe_bytes();
  if (s.kind != ClusterJobKind::kProbe && (s.shape.m < 1 || s.shape.n < 1 || s.shape.k < 1 || s.ranks.empty()))
    return InvalidArgument("cluster job without a shape or ranks");
  if (s.kind == ClusterJobKind::kK) {
    // Consecutive non-empty slices covering [0, k): what the data plane relies on.
    int64_t next = 0;
    for (const Shard& sh : s.ranks) {
      if (sh.k_begin != next || sh.k_end <= sh.k_begin)
        return InvalidArgument("cluster K-split job whose K slices do not cover [0, k) in rank order");
      next = sh.k_end;
    }
    if (next != s.shape.k)
      return InvalidArgument("cluster K-split job whose K slices do not cover [0, k) in rank order");
  }
  return s;
}

void timings_to_proto(const std::vector<DeviceTiming>& t, v1::ClusterJobDone* out) {
  for (const DeviceTiming& d : t) {
    auto* p = out->add_timings();
    p->set_device(d.device);
    p->set_name(d.name);
    p->set_row_begin(d.shard.row_begin);
    p->set_row_end(d.shard.row_end);
    p->set_copy_in_ms(d.copy_in_ms);
    p->set_kernel_ms(d.kernel_ms);
    p->set_reduce_ms(d.reduce_ms);
    p->set_copy_out_ms(d.copy_out_ms);
    p->set_k_begin(d.shard.k_begin);
    p->set_k_end(d.shard.k_end);
  }
}

std::vector<DeviceTiming> timings_from_proto(const v1::ClusterJobDone& in) {
  std::vector<DeviceTiming> v;
  for (const auto& p : in.timings()) {
    DeviceTiming d;
    d.device = p.device();
    d.name = p.name();
    d.shard.device = p.device();
    d.shard.row_begin = p.row_begin();
    d.shard.row_end = p.row_end();
    d.copy_in_ms = p.copy_in_ms();
    d.kernel_ms = p.kernel_ms();
    d.reduce_ms = p.reduce_ms();
    d.copy_out_ms = p.copy_out_ms();
    d.shard.k_begin = p.k_begin();
    d.shard.k_end = p.k_end();
    v.push_back(std::move(d));
  }
  return v;
}

void kernel_rows_to_proto(const std::vector<KernelRowUse>& rows, v1::ClusterJobDone* out) {
  for (const KernelRowUse& r : rows) {
    v1::ClusterKernelRow* p = out->add_kernel_rows();
    p->set_name(r.name);
    p->set_launches(r.launches);
  }
}

std::vector<KernelRowUse> kernel_rows_from_proto(const v1::ClusterJobDone& in) {
  std::vector<KernelRowUse> v;
  for (const auto& p : in.kernel_rows()) {
    const std::string name = p.name().substr(0, kMaxClusterKernelRowName);
    const bool listed = std::any_of(v.begin(), v.end(), [&](const KernelRowUse& k) { return k.name == name; });
    if (!listed && int(v.size()) == kMaxClusterKernelRows) continue;  // a row past the bound is dropped
    count_kernel_launches(&v, name, std::max<int64_t>(0, p.launches()));
  }
  return v;
}

}  // namespace sgemm
