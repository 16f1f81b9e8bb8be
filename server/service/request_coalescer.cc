// RequestCoalescer (request_coalescer.h): the waiting list, the launch task
// and the group launch with its copies in and out.
#include "server/service/request_coalescer.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

namespace sgemm {

namespace {

// Requests that may share one group: a group shares alpha, beta, has_c, op(A),
// op(B) and the execution options (server/engine/batch.h).
bool same_arithmetic(const GemmRequest& x, const GemmRequest& y) {
  return x.alpha == y.alpha && x.beta == y.beta && x.has_c == y.has_c && x.op_a == y.op_a && x.op_b == y.op_b &&
         x.options.precision == y.options.precision && x.options.kernel == y.options.kernel &&
         x.options.split == y.options.split;
}

StatusOr<GemmReport> run_job(Engine& engine, const GemmJob& job) {
  if (job.cancel && job.cancel->cancelled()) return job.cancel->status();
  return engine.run(job);
}

// Copies `elements` floats; both ends are host memory the request owns.
void copy_floats(float* to, const float* from, int64_t elements) {
  std::memcpy(to, from, std::size_t(elements) * sizeof(float));
}

}  // namespace

// A launch's concatenated A, B and C; reused by later launches while large enough.
struct RequestCoalescer::Arena {
  std::shared_ptr<HostBuffer> m[3];
  Status fit(HostAllocator& allocator, const int64_t elements[3]) {
    for (int i = 0; i < 3; ++i) {
      const std::size_t bytes = std::size_t(std::max<int64_t>(elements[i], 1)) * sizeof(float);
      if (m[i] && m[i]->bytes() >= bytes) continue;
      m[i].reset();  // the old buffer goes before the larger one is taken
      auto got = allocator.allocate(bytes);
      if (!got.ok()) return got.status().with_context("allocating a coalesced launch's operands");
      m[i] = std::make_shared<HostBuffer>(std::move(got).value());
    }
    return Status::Ok();
  }
};

Status check_coalesce_options(const CoalesceOptions& o) {
  if (o.max_products < 1 || o.max_products > kMaxBatchProducts)
    return InvalidArgument("--coalesce-max-products must be in [1, " + std::to_string(kMaxBatchProducts) + "], not " +
                           std::to_string(o.max_products));
  if (o.window.count() < 0 || o.window > CoalesceOptions::kMaxWindow)
    return InvalidArgument("--coalesce-window-us must be in [0, " +
                           std::to_string(CoalesceOptions::kMaxWindow.count()) + "], not " +
                           std::to_string(o.window.count()));
  if (o.max_bytes <= 0) return InvalidArgument("--coalesce-max-bytes must be positive");
  return Status::Ok();
}

RequestCoalescer::RequestCoalescer(Engine& engine, CoalesceOptions options, int max_waiting,
                                   std::function<void(int, const GemmReport*)> on_launch,
                                   std::function<void(const std::string&)> warn)
    : engine_(engine),
      options_(options),
      max_waiting_(std::max(1, max_waiting)),
      on_launch_(std::move(on_launch)),
      warn_(std::move(warn)) {}

RequestCoalescer::~RequestCoalescer() = default;

bool RequestCoalescer::eligible(const GemmJob& job, int64_t footprint_bytes) const {
  const ExecOptions& exec = job.request.options;
  // A request naming a kernel or a split asks for how it runs: it runs alone.
  const bool engine_chooses = !exec.kernel && (exec.split == SplitMode::kAuto || exec.split == SplitMode::kSingle);
  return options_.max_products > 1 && engine_chooses && footprint_bytes <= options_.max_bytes && !job.request.batch &&
         job.a && job.b && job.c && !job.a_resident && !job.b_resident && !job.c_resident && !job.device && !job.feed &&
         job.lda == 0 && job.ldb == 0 && job.ldc == 0;
}

int RequestCoalescer::waiting() const {
  std::lock_guard lock(mu_);
  return int(waiting_.size());
}

int RequestCoalescer::queued_beyond_pool() const {
  std::lock_guard lock(mu_);
  return std::max(0, int(waiting_.size()) - (scheduled_ ? 1 : 0));
}

StatusOr<RequestCoalescer::Start> RequestCoalescer::submit(CoalescedRequest* request, ComputePool& pool,
                                                           bool may_run_here) {
  std::lock_guard lock(mu_);
  if (int(waiting_.size()) >= max_waiting_)
    return Unavailable("server busy: " + std::to_string(waiting_.size()) +
                       " small requests wait to be coalesced (--max-queued x --coalesce-max-products); retry with "
                       "backoff");
  waiting_.push_back({request, std::chrono::steady_clock::now()});
  arrived_.notify_all();
  if (scheduled_ || here_) return Start::kQueued;  // that launch takes it
  if (may_run_here && waiting_.size() == 1 && pool.reserve_here()) {
    here_ = true;
    return Start::kHere;
  }
  if (!schedule_locked(pool) && launching_ == 0) {
    waiting_.pop_back();
    return Unavailable("server busy: " + std::to_string(pool.running()) + " requests computing and " +
                       std::to_string(pool.queued()) + " queued (--max-in-flight " + std::to_string(pool.threads()) +
                       ", --max-queued " + std::to_string(pool.max_queued()) + "); retry with backoff");
  }
  return Start::kQueued;  // a running launch schedules the next at its end
}

bool RequestCoalescer::schedule_locked(ComputePool& pool) {
  if (scheduled_ || here_ || waiting_.empty()) return true;
  scheduled_ = pool.submit([this, &pool] { launch(pool); });
  return scheduled_;
}

std::vector<CoalescedRequest*> RequestCoalescer::take(std::unique_lock<std::mutex>& lock) {
  if (options_.window.count() > 0 && !waiting_.empty()) {
    // The window counts from the oldest request's arrival: it bounds the wait any request adds.
    const auto deadline = waiting_.front().since + options_.window;
    arrived_.wait_until(lock, deadline, [&] { return int(waiting_.size()) >= options_.max_products; });
  }
  std::vector<CoalescedRequest*> taken;
  if (waiting_.empty()) return taken;
  const GemmRequest first = waiting_.front().request->coalesced_job().request;
  std::deque<Waiting> rest;
  for (Waiting& w : waiting_) {
    if (int(taken.size()) < options_.max_products && same_arithmetic(first, w.request->coalesced_job().request))
      taken.push_back(w.request);
    else
      rest.push_back(w);
  }
  waiting_.swap(rest);
  return taken;
}

void RequestCoalescer::launch(ComputePool& pool) {
  std::vector<CoalescedRequest*> taken;
  {
    std::unique_lock lock(mu_);
    scheduled_ = false;
    ++launching_;
    taken = take(lock);
    // What is left (another arithmetic, or past the largest batch) goes to the next free slot.
    schedule_locked(pool);
  }
  // A request cancelled while it waited is answered now and computes nothing.
  std::vector<CoalescedRequest*> cancelled;
  auto live = std::stable_partition(taken.begin(), taken.end(), [](CoalescedRequest* r) {
    const CancelToken* cancel = r->coalesced_job().cancel;
    return !cancel || !cancel->cancelled();
  });
  cancelled.assign(live, taken.end());
  taken.erase(live, taken.end());
  for (CoalescedRequest* r : cancelled) r->coalesced_done(r->coalesced_job().cancel->status(), 1);
  if (taken.size() == 1)
    run_alone(taken[0], pool);
  else if (!taken.empty())
    run_group(taken, pool);
  std::deque<Waiting> orphans;
  {
    std::lock_guard lock(mu_);
    --launching_;
    // The pool refused the next launch and no launch is left to retry it: those waiting are refused.
    if (!schedule_locked(pool) && launching_ == 0 && !here_) orphans.swap(waiting_);
  }
  for (Waiting& w : orphans)
    w.request->coalesced_done(Unavailable("server busy: the compute queue is full (--max-queued " +
                                          std::to_string(pool.max_queued()) + "); retry with backoff"),
                              1);
}

void RequestCoalescer::run_here(ComputePool& pool) {
  {
    std::lock_guard lock(mu_);
    here_ = false;
    scheduled_ = true;  // launch() below takes what waits and clears it
  }
  launch(pool);
  pool.end_here();
}

void RequestCoalescer::run_alone(CoalescedRequest* request, ComputePool& pool) {
  request->coalesced_started();
  StatusOr<GemmReport> result = run_job(engine_, request->coalesced_job());
  if (on_launch_) on_launch_(1, result.ok() ? &*result : nullptr);
  pool.release_slot();  // computing is over: the rest hands results to gRPC
  request->coalesced_done(std::move(result), 1);
}

void RequestCoalescer::run_group(std::vector<CoalescedRequest*>& requests, ComputePool& pool) {
  const int n = int(requests.size());
  std::vector<GemmShape> shapes;
  shapes.reserve(requests.size());
  for (CoalescedRequest* r : requests) {
    r->coalesced_started();
    shapes.push_back(r->coalesced_job().request.shape);
  }
  const GemmRequest& first = requests.front()->coalesced_job().request;
  auto spec = std::make_shared<BatchSpec>(make_batch_spec(BatchKind::kGroup, shapes, first.op_a, first.op_b));
  GemmJob group;
  group.request = first;
  group.request.shape = shapes.front();
  group.request.batch = spec;
  group.origin = std::chrono::steady_clock::now();

  std::unique_ptr<Arena> arena;
  {
    std::lock_guard lock(mu_);
    if (!arenas_.empty()) {
      arena = std::move(arenas_.back());
      arenas_.pop_back();
    }
  }
  if (!arena) arena = std::make_unique<Arena>();
  const int64_t elements[3] = {spec->a_elements, spec->b_elements, spec->c_elements};
  // An engine that cannot run these products as one group (its own limits
  // on a launch) is no failure: they run alone, as they came.
  const bool groupable = engine_.validate(group.request).ok();
  StatusOr<GemmReport> result = Internal("the engine would not run these products as one group");
  Status ready = groupable ? arena->fit(engine_.host_allocator(), elements) : Status::Ok();
  if (!ready.ok()) result = ready;
  if (groupable && ready.ok()) {
    float* a = arena->m[0]->floats();
    float* b = arena->m[1]->floats();
    float* c = arena->m[2]->floats();
    for (int i = 0; i < n; ++i) {
      const GemmJob& job = requests[i]->coalesced_job();
      const BatchProduct& p = spec->products[i];
      copy_floats(a + p.a_offset, job.a, job.request.a_dims().rows * job.request.a_dims().cols);
      copy_floats(b + p.b_offset, job.b, job.request.b_dims().rows * job.request.b_dims().cols);
      if (first.has_c) copy_floats(c + p.c_offset, job.c, p.c_elements());
    }
    group.a = a;
    group.b = b;
    group.c = c;
    result = engine_.run(group);
  }
  if (!result.ok()) {
    // The launch failed as a whole: each request runs again alone, so a
    // request that fails on its own fails alone.
    if (warn_ && groupable)
      warn_("a coalesced launch of " + std::to_string(n) + " requests failed (" + result.status().to_string() +
            "); each runs alone");
    {
      std::lock_guard lock(mu_);
      arenas_.push_back(std::move(arena));
    }
    std::vector<StatusOr<GemmReport>> alone;
    alone.reserve(requests.size());
    for (CoalescedRequest* r : requests) {
      alone.push_back(run_job(engine_, r->coalesced_job()));
      if (on_launch_) on_launch_(1, alone.back().ok() ? &*alone.back() : nullptr);
    }
    pool.release_slot();
    for (int i = 0; i < n; ++i) requests[i]->coalesced_done(std::move(alone[i]), 1);
    return;
  }
  if (on_launch_) on_launch_(n, &*result);
  std::vector<StatusOr<GemmReport>> outcomes;
  outcomes.reserve(requests.size());
  const GemmReport& report = *result;
  for (int i = 0; i < n; ++i) {
    const GemmJob& job = requests[i]->coalesced_job();
    Status st = i < int(report.product_status.size()) ? report.product_status[i] : Status::Ok();
    if (st.ok() && job.cancel && job.cancel->cancelled()) st = job.cancel->status();
    if (!st.ok()) {
      outcomes.emplace_back(std::move(st));
      continue;
    }
    copy_floats(job.c, arena->m[2]->floats() + spec->products[i].c_offset, spec->products[i].c_elements());
    GemmReport own = report;
    own.product_status.clear();
    own.split = SplitMode::kSingle;
    own.plan_reason = std::to_string(n) + " requests coalesced into one group launch: " + report.plan_reason;
    outcomes.emplace_back(std::move(own));
  }
  {
    std::lock_guard lock(mu_);
    arenas_.push_back(std::move(arena));
  }
  pool.release_slot();
  for (int i = 0; i < n; ++i) requests[i]->coalesced_done(std::move(outcomes[i]), n);
}

}  // namespace sgemm
