// MultiplyCall's branch for headers that name shared-memory regions
// (docs/transport.md): the operands are bound in registered regions, the
// receive phase is skipped, and C is written into the output region (nothing
// but the summary goes back) or, without one, into a buffer from the budget
// that is sent back as chunks as usual.
#include "server/service/multiply_call.h"
#include "server/service/unix_connections.h"

namespace sgemm {

Status MultiplyCall::start_from_regions(const RegionOperands& regions) {
  RegionCaller caller = shared_.connections ? shared_.connections->find(ctx_->peer()) : RegionCaller{};
  if (client_) caller.client = client_->name();  // with tokens, regions belong to their client
  if (!shared_.regions || !caller.unix_socket)
    return regions_need_unix_socket("a Multiply naming shared-memory regions");
  SGEMM_ASSIGN_OR_RETURN(BoundOperands bound, bind_region_operands(*shared_.regions, caller, header_, regions));
  const GemmShape& s = header_.shape;
  from_regions_ = true;
  job_.a = bound.a;
  job_.lda = bound.lda;
  job_.b = bound.b;
  job_.ldb = bound.ldb;
  if (bound.out) {
    output_in_region_ = true;
    job_.c = bound.out;
    job_.ldc = bound.ld_out;
    // C in place needs nothing; C from elsewhere is first copied where the result goes.
    if (bound.c_in && !bound.c_in_place()) copy_matrix(bound.out, bound.ld_out, bound.c_in, bound.ldc_in, s.m, s.n);
  } else {
    // C comes back as chunks: a dense buffer from the host-memory budget (no
    // waiting for it here: the request holds regions, so it is refused instead).
    footprint_bytes_ = s.m * s.n * int64_t(sizeof(float));
    auto r = shared_.budget.try_reserve(footprint_bytes_);
    if (!r)
      return ResourceExhausted("the host memory budget has no room for C's " + std::to_string(footprint_bytes_) +
                               " bytes (--host-memory-bytes " + std::to_string(shared_.budget.capacity()) + ", " +
                               std::to_string(shared_.budget.in_use()) +
                               " in use); name an output region (header.out_region) or retry later");
    reservation_ = std::move(*r);
    const int c_idx = static_cast<int>(MatrixId::kC);
    auto got = shared_.engine.host_allocator().allocate(std::size_t(footprint_bytes_));
    if (!got.ok()) return got.status().with_context("allocating C");
    buffers_[c_idx] = std::make_shared<HostBuffer>(std::move(got).value());
    if (bound.c_in) copy_matrix(buffers_[c_idx]->floats(), s.n, bound.c_in, bound.ldc_in, s.m, s.n);
    job_.c = buffers_[c_idx]->floats();
    job_.ldc = 0;
  }
  regions_held_ = std::move(bound.held);
  // Nothing to receive: the upload is complete now, and computing never starts early.
  t_received_ = Clock::now();
  return start_compute(/*early=*/false);
}

}  // namespace sgemm
