#include "server/engine/cuda/batch_executor.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cuda_status.h"
#include "server/engine/cuda/job_run.h"
#include "server/engine/cuda/resident_gpu.h"
#include "server/planner/batch_plan.h"

namespace sgemm {
namespace {

// A piece of one GPU's range: products [begin, end), copied in, launched and
// copied out as one step of the GPU's pipeline, with the events around each.
struct BatchPiece {
  int64_t begin = 0, end = 0;
  std::optional<CublasBatchedGemm::GroupLaunch> group;  // a group's staged launch (none: nothing to compute)
  cudaEvent_t in_start = nullptr, in_done = nullptr, k_start = nullptr, k_done = nullptr, out_start = nullptr,
              out_done = nullptr;
};

// One GPU's share of a batch while it runs: its lane, its products, its
// device buffers and its pieces. Destroyed after its streams are synchronised
// (run()'s Drain): the buffers go back stream-ordered first, then the lane
// (members go in reverse order).
struct DeviceShare {
  LaneLease lease;
  int index = -1;  // pool index
  ProductRange range;
  int64_t a0 = 0, b0 = 0, c0 = 0;     // first element of the range's slice of each concatenated operand
  int64_t a_n = 0, b_n = 0, c_n = 0;  // 0 for a shared operand: nothing is copied in
  DeviceBuffer a, b, c, pointers;
  // A shared operand: this GPU's whole copy of the resident matrix (null: not shared).
  const GpuPiece* a_shared = nullptr;
  const GpuPiece* b_shared = nullptr;
  std::vector<BatchPiece> pieces;
};

// Pieces per GPU: enough that copies in, launches and copies out of
// successive pieces overlap (h2d and d2h run together on the link), few
// enough that each piece is worth its launch: about kPieceBytes of operands
// each, at most the executor's max_pieces.
constexpr int64_t kPieceBytes = int64_t{4} << 20;

// The resident matrix's values, dense in host memory, read from any whole
// copy of it: check_finite's view of a shared operand.
StatusOr<std::vector<float>> resident_to_host(const ResidentMatrix& m) {
  auto data = std::dynamic_pointer_cast<const GpuResident>(m.data());
  if (!data) return Internal("resident matrix '" + m.handle + "' has no GPU data");
  for (const auto& piece : data->pieces()) {
    if (piece->where.row_begin != 0 || piece->where.row_end != m.rows) continue;
    std::vector<float> host(std::size_t(m.rows * m.cols));
    SGEMM_CUDA_TRY(cudaSetDevice(piece->where.device));
    SGEMM_CUDA_TRY(cudaMemcpy2D(host.data(), std::size_t(m.cols) * sizeof(float), piece->data,
                                std::size_t(piece->ld) * sizeof(float), std::size_t(m.cols) * sizeof(float),
                                std::size_t(m.rows), cudaMemcpyDeviceToHost));
    return host;
  }
  return Internal("resident matrix '" + m.handle + "' has no whole copy on a GPU");
}

double elapsed_ms(cudaEvent_t from, cudaEvent_t to) {
  float ms = 0;
  if (cudaEventElapsedTime(&ms, from, to) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return ms;
}

}  // namespace

StatusOr<BatchKernelSelection> BatchExecutor::select(const GemmRequest& r) const {
  BatchKernelQuery q;
  q.launch = r.batch->kind == BatchKind::kStrided ? BatchLaunch::kStridedBatched : BatchLaunch::kGrouped;
  q.precision = r.options.precision;
  q.named = r.options.kernel;
  q.available = pool_->kernels();
  return select_batch_kernel(q);
}

Status BatchExecutor::validate(const GemmRequest& r) const {
  SGEMM_RETURN_IF_ERROR(check_batch_request(r));
  const BatchSpec& spec = *r.batch;
  SGEMM_RETURN_IF_ERROR(select(r).status());
  // A shared operand is read in place, its rows padded (resident_ld): cuBLAS takes that as an int.
  for (auto [shared, field, width] :
       {std::tuple{spec.shared_a, "a_handle", r.a_dims().cols}, std::tuple{spec.shared_b, "b_handle", r.b_dims().cols}})
    if (shared && resident_ld(width) > INT32_MAX)
      return InvalidArgument(std::string("header.") + field + ": its rows of " + std::to_string(width) +
                             " elements, padded to " + std::to_string(resident_ld(width)) +
                             " on the GPU, are over cuBLAS's limit of 2^31 - 1 for a leading dimension");
  for (std::size_t i = 0; i < spec.products.size(); ++i) {
    const GemmShape& s = spec.products[i].shape;
    for (auto [dim, v] : {std::pair{'m', s.m}, std::pair{'n', s.n}, std::pair{'k', s.k}})
      if (v > INT32_MAX)
        return InvalidArgument(batch_shape_field(spec, i, dim) + " = " + std::to_string(v) +
                               " is over cuBLAS's limit of 2^31 - 1 for a batched launch");
    if (spec.kind == BatchKind::kStrided) break;
  }
  return Status::Ok();
}

StatusOr<CublasBatchedGemm*> BatchExecutor::handle_for(const Lane& lane) {
  MutexLock lock(mu_);
  auto& h = handles_[&lane];
  if (!h) {
    SGEMM_CUDA_TRY(cudaSetDevice(lane.device()));
    SGEMM_ASSIGN_OR_RETURN(h, CublasBatchedGemm::create());
  }
  return h.get();
}

StatusOr<GemmReport> BatchExecutor::run(const GemmJob& job, const std::vector<int>& healthy) {
  const GemmRequest& r = job.request;
  if (!r.batch) return Internal("BatchExecutor::run without a batch");
  const BatchSpec& spec = *r.batch;
  if (Status v = validate(r); !v.ok())
    return Internal("a batch that was not validated reached run(): " + v.to_string());
  // A shared operand is the resident matrix; every other operand is in host memory.
  if (spec.shared_a != (job.a_resident != nullptr) || spec.shared_b != (job.b_resident != nullptr))
    return Internal("a batch's shared operands and its resident matrices disagree");
  if ((!job.a && !spec.shared_a) || (!job.b && !spec.shared_b) || !job.c)
    return Internal("a batch without its host matrices reached run()");
  if (healthy.empty()) return Unavailable("no GPU is in service");
  SGEMM_ASSIGN_OR_RETURN(const BatchKernelSelection sel, select(r));
  const BatchedArithmetic arithmetic =
      sel.row->arithmetic == ArithmeticClass::kTf32 ? BatchedArithmetic::kTf32 : BatchedArithmetic::kFp32;
  const std::size_t count = spec.products.size();

  GemmReport report;
  HostSteps steps(&report.host_ms);
  report.backend = "cuda";
  report.kernel = sel.row->family;
  report.kernel_row = sel.row->name;
  report.precision = r.options.precision;
  report.product_status.assign(count, Status::Ok());

  // Inputs with NaN or infinity, when asked: those products stay out of every
  // launch. A shared operand is checked from a host copy of it (one product's
  // matrix), as the cpu backend checks it where it keeps it.
  std::vector<bool> runs(count, true);
  int failed = 0;
  if (spec.check_finite) {
    GemmJob probe = job;
    std::vector<float> shared_a, shared_b;
    if (spec.shared_a) {
      SGEMM_ASSIGN_OR_RETURN(shared_a, resident_to_host(*job.a_resident));
      probe.a = shared_a.data();
    }
    if (spec.shared_b) {
      SGEMM_ASSIGN_OR_RETURN(shared_b, resident_to_host(*job.b_resident));
      probe.b = shared_b.data();
    }
    for (std::size_t i = 0; i < count; ++i) {
      Status finite = check_product_finite(probe, i);
      if (finite.ok()) continue;
      if (spec.fail_fast) return finite;
      report.product_status[i] = std::move(finite);
      runs[i] = false;
      ++failed;
    }
    steps.stamp("check finite");
  }

  // Which GPUs: all healthy ones split by product, or the least busy with split single.
  std::vector<int> devices = healthy;
  if (r.options.split == SplitMode::kSingle || devices.size() == 1) {
    const int idle = *std::min_element(devices.begin(), devices.end(),
                                       [&](int x, int y) { return pool_->busy_lanes(x) < pool_->busy_lanes(y); });
    devices = {idle};
  }
  std::vector<double> work(count, 0.0);
  for (std::size_t i = 0; i < count; ++i)
    if (runs[i]) work[i] = spec.products[i].shape.flops() + 1.0;  // + 1: a product costs a launch slot
  const std::vector<ProductRange> ranges = split_products(work, int(devices.size()));
  steps.stamp("plan");

  auto slice_end = [&](int64_t end, int64_t BatchProduct::*offset, int64_t total) {
    return end < int64_t(count) ? spec.products[std::size_t(end)].*offset : total;
  };
  // A shared operand: a whole copy on every GPU of the batch (added beside
  // the copies the matrix has, never moved). Held until run() returns,
  // after the streams are drained (declared before `shares`).
  std::shared_ptr<const GpuResident> resident_a, resident_b;
  if (spec.shared_a || spec.shared_b) {
    const std::size_t used = ranges.size();
    auto whole_on_each = [&](int64_t rows) {
      Layout l;
      for (std::size_t d = 0; d < used; ++d) l.push_back(Piece{pool_->ordinal(devices[d]), 0, rows});
      return l;
    };
    if (spec.shared_a) {
      SGEMM_ASSIGN_OR_RETURN(resident_a, ensure_layout(*store_, *job.a_resident, whole_on_each(job.a_resident->rows),
                                                       /*additive=*/true));
    }
    if (spec.shared_b) {
      SGEMM_ASSIGN_OR_RETURN(resident_b, ensure_layout(*store_, *job.b_resident, whole_on_each(job.b_resident->rows),
                                                       /*additive=*/true));
    }
    steps.stamp("resident");
  }
  std::vector<DeviceShare> shares(ranges.size());
  // Whichever way run() returns, no copy into the job's host buffers is still in flight.
  struct Drain {
    std::vector<DeviceShare>& shares;
    ~Drain() {
      for (DeviceShare& sh : shares) {
        if (sh.lease.index() < 0 || cudaSetDevice(sh.lease->device()) != cudaSuccess) continue;
        for (cudaStream_t st : {sh.lease->h2d(), sh.lease->compute(), sh.lease->d2h()})
          if (cudaStreamSynchronize(st) != cudaSuccess) (void)cudaGetLastError();
      }
    }
  } drain{shares};
  for (std::size_t d = 0; d < ranges.size(); ++d) {
    DeviceShare& sh = shares[d];
    sh.index = devices[d];
    sh.range = ranges[d];
    const BatchProduct& first = spec.products[std::size_t(sh.range.begin)];
    sh.a0 = first.a_offset;
    sh.b0 = first.b_offset;
    sh.c0 = first.c_offset;
    sh.a_n = spec.shared_a ? 0 : slice_end(sh.range.end, &BatchProduct::a_offset, spec.a_elements) - sh.a0;
    sh.b_n = spec.shared_b ? 0 : slice_end(sh.range.end, &BatchProduct::b_offset, spec.b_elements) - sh.b0;
    sh.c_n = slice_end(sh.range.end, &BatchProduct::c_offset, spec.c_elements) - sh.c0;
    const int ordinal = pool_->ordinal(sh.index);
    if (resident_a) {
      sh.a_shared = resident_a->find(ordinal, 0, job.a_resident->rows);
      if (!sh.a_shared) return Internal("resident A has no whole copy on GPU " + std::to_string(ordinal));
    }
    if (resident_b) {
      sh.b_shared = resident_b->find(ordinal, 0, job.b_resident->rows);
      if (!sh.b_shared) return Internal("resident B has no whole copy on GPU " + std::to_string(ordinal));
    }
    SGEMM_ASSIGN_OR_RETURN(sh.lease, pool_->acquire(sh.index, job.cancel));
  }
  steps.stamp("lanes");

  // Issue every GPU's work before waiting for any. Per GPU a pipeline of
  // pieces: piece j's copy in (h2d stream) overlaps piece j-1's launch
  // (compute) and piece j-2's copy out (d2h), as the row pipeline does.
  // Without an input C, beta must not read the buffer (cuBLAS reads no C when beta is 0).
  const float beta = r.has_c ? r.beta : 0.0f;
  for (DeviceShare& sh : shares) {
    if (job.cancel) SGEMM_RETURN_IF_ERROR(job.cancel->status());
    Lane& lane = *sh.lease;
    const int ordinal = lane.device();
    const cudaStream_t h2d = lane.h2d(), compute = lane.compute(), d2h = lane.d2h();
    SGEMM_CUDA_TRY(cudaSetDevice(ordinal));
    lane.reset_events();
    SGEMM_ASSIGN_OR_RETURN(CublasBatchedGemm * gemm, handle_for(lane));
    // Buffers on the compute stream (where they are freed); the other streams wait for them below.
    if (!sh.a_shared) {
      SGEMM_ASSIGN_OR_RETURN(sh.a, DeviceBuffer::allocate(ordinal, std::size_t(sh.a_n) * sizeof(float), compute));
    }
    if (!sh.b_shared) {
      SGEMM_ASSIGN_OR_RETURN(sh.b, DeviceBuffer::allocate(ordinal, std::size_t(sh.b_n) * sizeof(float), compute));
    }
    SGEMM_ASSIGN_OR_RETURN(sh.c, DeviceBuffer::allocate(ordinal, std::size_t(sh.c_n) * sizeof(float), compute));
    // A product's operands on this GPU (a shared one: the GPU's copy, for every product).
    auto dev = [&](const BatchProduct& p) {
      return BatchedProduct{p.shape, sh.a_shared ? sh.a_shared->data : sh.a.floats() + (p.a_offset - sh.a0),
                            sh.b_shared ? sh.b_shared->data : sh.b.floats() + (p.b_offset - sh.b0),
                            sh.c.floats() + (p.c_offset - sh.c0)};
    };
    // Cut the range into pieces of about equal bytes copied (a shared operand is not copied).
    const int64_t bytes = (sh.a_n + sh.b_n + (r.has_c ? 2 : 1) * sh.c_n) * int64_t(sizeof(float));
    const int64_t pieces =
        std::clamp<int64_t>(bytes / kPieceBytes, 1, std::min<int64_t>(max_pieces_, sh.range.end - sh.range.begin));
    std::vector<double> piece_work;
    for (int64_t i = sh.range.begin; i < sh.range.end; ++i) {
      const BatchProduct& p = spec.products[std::size_t(i)];
      piece_work.push_back(double((spec.shared_a ? 0 : p.shape.m * p.shape.k) +
                                  (spec.shared_b ? 0 : p.shape.k * p.shape.n) + p.c_elements()));
    }
    for (const ProductRange& pr : split_products(piece_work, int(pieces))) {
      BatchPiece piece;
      piece.begin = sh.range.begin + pr.begin;
      piece.end = sh.range.begin + pr.end;
      for (cudaEvent_t* e :
           {&piece.in_start, &piece.in_done, &piece.k_start, &piece.k_done, &piece.out_start, &piece.out_done}) {
        SGEMM_ASSIGN_OR_RETURN(*e, lane.next_event());
      }
      sh.pieces.push_back(std::move(piece));
    }
    // A group's pointer arrays first, one block of them per piece: their pageable copies wait for the
    // compute stream's earlier work, which is only the allocations, so the host never waits for operands.
    if (spec.kind == BatchKind::kGroup) {
      std::size_t computed = 0;
      for (int64_t i = sh.range.begin; i < sh.range.end; ++i) computed += runs[std::size_t(i)] ? 1 : 0;
      if (computed > 0) {
        SGEMM_ASSIGN_OR_RETURN(
            sh.pointers,
            DeviceBuffer::allocate(ordinal, CublasBatchedGemm::grouped_workspace_bytes(computed), compute));
        char* at = reinterpret_cast<char*>(sh.pointers.floats());
        for (BatchPiece& piece : sh.pieces) {
          std::vector<BatchedProduct> products;
          for (int64_t i = piece.begin; i < piece.end; ++i)
            if (runs[std::size_t(i)]) products.push_back(dev(spec.products[std::size_t(i)]));
          if (products.empty()) continue;
          SGEMM_ASSIGN_OR_RETURN(piece.group, CublasBatchedGemm::stage_group(products, r.op_a, r.op_b, at, compute));
          at += CublasBatchedGemm::grouped_workspace_bytes(products.size());
        }
      }
    }
    SGEMM_ASSIGN_OR_RETURN(cudaEvent_t ready, lane.next_event());
    SGEMM_CUDA_TRY(cudaEventRecord(ready, compute));
    SGEMM_CUDA_TRY(cudaStreamWaitEvent(h2d, ready, 0));
    SGEMM_CUDA_TRY(cudaStreamWaitEvent(d2h, ready, 0));
    auto end_of = [&](int64_t i, int64_t BatchProduct::*offset, int64_t total) { return slice_end(i, offset, total); };
    for (BatchPiece& piece : sh.pieces) {
      const BatchProduct& first = spec.products[std::size_t(piece.begin)];
      const int64_t a1 = end_of(piece.end, &BatchProduct::a_offset, spec.a_elements);
      const int64_t b1 = end_of(piece.end, &BatchProduct::b_offset, spec.b_elements);
      const int64_t c1 = end_of(piece.end, &BatchProduct::c_offset, spec.c_elements);
      SGEMM_CUDA_TRY(cudaEventRecord(piece.in_start, h2d));
      if (!sh.a_shared)
        SGEMM_CUDA_TRY(cudaMemcpyAsync(sh.a.floats() + (first.a_offset - sh.a0), job.a + first.a_offset,
                                       std::size_t(a1 - first.a_offset) * sizeof(float), cudaMemcpyHostToDevice, h2d));
      if (!sh.b_shared)
        SGEMM_CUDA_TRY(cudaMemcpyAsync(sh.b.floats() + (first.b_offset - sh.b0), job.b + first.b_offset,
                                       std::size_t(b1 - first.b_offset) * sizeof(float), cudaMemcpyHostToDevice, h2d));
      if (r.has_c)
        SGEMM_CUDA_TRY(cudaMemcpyAsync(sh.c.floats() + (first.c_offset - sh.c0), job.c + first.c_offset,
                                       std::size_t(c1 - first.c_offset) * sizeof(float), cudaMemcpyHostToDevice, h2d));
      SGEMM_CUDA_TRY(cudaEventRecord(piece.in_done, h2d));
      SGEMM_CUDA_TRY(cudaStreamWaitEvent(compute, piece.in_done, 0));
      SGEMM_CUDA_TRY(cudaEventRecord(piece.k_start, compute));
      if (spec.kind == BatchKind::kStrided) {
        // One launch per run of consecutive products that compute (the whole piece unless check_finite left some out).
        for (int64_t i = piece.begin; i < piece.end;) {
          if (!runs[std::size_t(i)]) {
            ++i;
            continue;
          }
          int64_t j = i;
          while (j < piece.end && runs[std::size_t(j)]) ++j;
          const BatchedProduct p = dev(spec.products[std::size_t(i)]);
          StridedBatchArgs args;
          args.shape = p.shape;
          args.count = j - i;
          args.a = p.a;
          args.b = p.b;
          args.c = p.c;
          args.alpha = r.alpha;
          args.beta = beta;
          args.op_a = r.op_a;
          args.op_b = r.op_b;
          args.arithmetic = arithmetic;
          if (sh.a_shared) {  // every product reads the one copy: stride 0, its padded rows
            args.lda = sh.a_shared->ld;
            args.stride_a = 0;
          }
          if (sh.b_shared) {
            args.ldb = sh.b_shared->ld;
            args.stride_b = 0;
          }
          SGEMM_RETURN_IF_ERROR(gemm->strided(args, compute));
          count_kernel_launches(&report.kernel_rows, sel.row->name);
          i = j;
        }
      } else if (piece.group) {
        SGEMM_RETURN_IF_ERROR(gemm->grouped(*piece.group, r.alpha, beta, arithmetic, compute));
        count_kernel_launches(&report.kernel_rows, sel.row->name);
      }
      SGEMM_CUDA_TRY(cudaEventRecord(piece.k_done, compute));
      // C back: a product left out keeps what the host buffer held (it is not sent).
      SGEMM_CUDA_TRY(cudaStreamWaitEvent(d2h, piece.k_done, 0));
      SGEMM_CUDA_TRY(cudaEventRecord(piece.out_start, d2h));
      for (int64_t i = piece.begin; i < piece.end;) {
        if (!runs[std::size_t(i)]) {
          ++i;
          continue;
        }
        int64_t j = i;  // consecutive computed products: one copy
        while (j < piece.end && runs[std::size_t(j)]) ++j;
        const int64_t e0 = spec.products[std::size_t(i)].c_offset;
        const int64_t e1 = end_of(j, &BatchProduct::c_offset, spec.c_elements);
        SGEMM_CUDA_TRY(cudaMemcpyAsync(job.c + e0, sh.c.floats() + (e0 - sh.c0), std::size_t(e1 - e0) * sizeof(float),
                                       cudaMemcpyDeviceToHost, d2h));
        i = j;
      }
      SGEMM_CUDA_TRY(cudaEventRecord(piece.out_done, d2h));
    }
  }
  steps.stamp("issue");

  for (DeviceShare& sh : shares) {
    SGEMM_CUDA_TRY(cudaSetDevice(sh.lease->device()));
    for (cudaStream_t st : {sh.lease->h2d(), sh.lease->compute(), sh.lease->d2h()})
      SGEMM_CUDA_TRY(cudaStreamSynchronize(st));
  }
  steps.stamp("wait");
  if (job.cancel) SGEMM_RETURN_IF_ERROR(job.cancel->status());

  std::string where;
  for (DeviceShare& sh : shares) {
    DeviceTiming t;
    t.device = sh.lease->device();
    t.name = pool_->info(sh.index).name;
    // For a batch a device's "rows" are its products [begin, end).
    t.shard = Shard{t.device, sh.range.begin, sh.range.end, 0, 0};
    // Working time per phase, summed over the pieces (docs/observability.md).
    for (const BatchPiece& piece : sh.pieces) {
      t.copy_in_ms += elapsed_ms(piece.in_start, piece.in_done);
      t.kernel_ms += elapsed_ms(piece.k_start, piece.k_done);
      t.copy_out_ms += elapsed_ms(piece.out_start, piece.out_done);
    }
    report.devices.push_back(std::move(t));
    if (!where.empty()) where += ", ";
    where += "products " + std::to_string(sh.range.begin) + "-" + std::to_string(sh.range.end - 1) + " on GPU " +
             std::to_string(sh.lease->device());
    // Elements of C (batch.h), one report per run of consecutive computed products: they are final together.
    for (int64_t i = sh.range.begin; i < sh.range.end && job.sink;) {
      if (!runs[std::size_t(i)]) {
        ++i;
        continue;
      }
      int64_t j = i;
      while (j < sh.range.end && runs[std::size_t(j)]) ++j;
      job.sink->rows_ready(spec.products[std::size_t(i)].c_offset,
                           slice_end(j, &BatchProduct::c_offset, spec.c_elements));
      i = j;
    }
  }
  // One GPU: split single. Several: no split mode of one product describes it (SPLIT_UNSPECIFIED on the wire).
  report.split = shares.size() == 1 ? SplitMode::kSingle : SplitMode::kAuto;
  report.plan_reason = std::string(spec.kind == BatchKind::kStrided ? "a strided batch of " : "a group of ") +
                       std::to_string(count) + " products" +
                       (spec.kind == BatchKind::kStrided ? " of " + gemm_shape_text(spec.products[0].shape) : "") +
                       ", " + sel.row->name + " (one launch per GPU), split by product: " + where + sel.reason;
  if (spec.shared_a || spec.shared_b)
    report.plan_reason += std::string("; ") +
                          (spec.shared_a && spec.shared_b ? "A and B"
                           : spec.shared_a                ? "A"
                                                          : "B") +
                          " resident, read by every product from each GPU's copy (stride 0)";
  if (failed > 0) report.plan_reason += "; " + std::to_string(failed) + " not computed (see their status)";
  return report;
}

}  // namespace sgemm
