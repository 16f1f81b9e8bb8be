// engine-bench --cluster N: see engine_bench_cluster.h.
//
// For each shape: the product on the coordinator's GPU alone (split single,
// the local engine) and over the cluster (the shape's split forced, as
// sgemm-server --cluster-always does). Each is first checked on sampled rows
// against the fp64 reference, then run `warmup` untimed and `iters` timed
// times; medians of
//   kernel phase:            the slowest rank's summed kernel time (CUDA events)
//   device-side end to end:  wall time of Engine::run, pinned host in -> pinned host out
// and the ratio of each against one GPU. The link measured when the
// communicator was built (the broadcast and the fan-out) is printed with them.
#include "engine_bench_cluster.h"

#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <string_view>
#include <thread>

#include "common/reference_gemm.h"
#include "engine_bench_runs.h"
#include "server/cluster/cluster_engine.h"
#include "server/cluster/coordinator.h"
#include "server/cluster/member.h"
#include "server/devices/pinned_host_pool.h"
#include "server/engine/cuda/cuda_cluster_plane.h"
#include "server/engine/cuda/cuda_engine.h"

extern char** environ;

namespace sgemm::bench {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    const size_t end = std::min(s.find(',', pos), s.size());
    if (end > pos) out.push_back(s.substr(pos, end - pos));
    pos = end + 1;
  }
  return out;
}

unsigned threads() { return std::max(1u, std::thread::hardware_concurrency()); }

// fill_random over `threads()` chunks at once (each chunk its own seed): the
// inputs of a 32768^3 product are 2 Gi floats.
void fill_parallel(float* data, int64_t count, uint64_t seed) {
  const int64_t parts = threads();
  std::vector<std::thread> ts;
  for (int64_t p = 0; p < parts; ++p) {
    const int64_t b = count * p / parts, e = count * (p + 1) / parts;
    ts.emplace_back([=] { fill_random(data + b, e - b, seed * 1000003 + uint64_t(p)); });
  }
  for (auto& t : ts) t.join();
}

// verify_gemm on `rows`, the rows spread over threads.
VerifyResult verify_parallel(const GemmShape& s, const float* a, const float* b, const float* c,
                             const std::vector<int64_t>& rows) {
  const size_t parts = std::min<size_t>(threads(), rows.size());
  std::vector<VerifyResult> part(parts);
  std::vector<std::thread> ts;
  for (size_t p = 0; p < parts; ++p)
    ts.emplace_back([&, p] {
      std::vector<int64_t> mine;
      for (size_t i = p; i < rows.size(); i += parts) mine.push_back(rows[i]);
      part[p] = verify_gemm(s.m, s.n, s.k, 1.0f, a, b, 0.0f, nullptr, c, mine);
    });
  for (auto& t : ts) t.join();
  VerifyResult all;
  for (const VerifyResult& v : part) {
    all.checked += v.checked;
    all.mismatched_nonfinite += v.mismatched_nonfinite;
    if (v.max_rel_error > all.max_rel_error || (all.worst_row < 0 && v.worst_row >= 0)) {
      all.max_rel_error = std::max(all.max_rel_error, v.max_rel_error);
      all.worst_row = v.worst_row;
      all.worst_col = v.worst_col;
    }
  }
  return all;
}

// "est 1294.3 ms" from a cluster plan's reason (the planner's estimate), or "est ?".
std::string estimate_of(const std::string& reason) {
  const size_t b = reason.find("est ");
  const size_t e = b == std::string::npos ? b : reason.find(" ms", b);
  return e == std::string::npos ? "est ?" : reason.substr(b, e + 3 - b);
}

void log_line(std::string_view prefix, std::string_view msg) {
  std::fprintf(stderr, "%.*s%.*s\n", int(prefix.size()), prefix.data(), int(msg.size()), msg.data());
}

// The members: N - 1 copies of this program, one GPU each; their stdin is a
// pipe whose end closes when this process is done (or dies).
class Members {
 public:
  ~Members() { stop(); }

  Status spawn(int count, const std::string& coordinator, const std::vector<std::string>& gpus) {
    for (int i = 1; i <= count; ++i) {
      int fds[2];
      if (pipe(fds) != 0) return Internal(std::string("pipe: ") + std::strerror(errno));
      const std::string name = "member-" + std::to_string(i);
      std::vector<std::string> env_strings;
      for (char** e = environ; *e; ++e)
        if (std::strncmp(*e, "CUDA_VISIBLE_DEVICES=", 21) != 0) env_strings.emplace_back(*e);
      env_strings.push_back("CUDA_VISIBLE_DEVICES=" + gpus[size_t(i)]);
      std::vector<char*> env;
      for (auto& s : env_strings) env.push_back(s.data());
      env.push_back(nullptr);
      std::string exe = "/proc/self/exe", arg0 = "engine-bench", flag = "--cluster-member", addr = coordinator,
                  name_flag = "--cluster-name", name_arg = name;
      char* argv[] = {arg0.data(), flag.data(), addr.data(), name_flag.data(), name_arg.data(), nullptr};
      posix_spawn_file_actions_t fa;
      posix_spawn_file_actions_init(&fa);
      posix_spawn_file_actions_adddup2(&fa, fds[0], 0);
      posix_spawn_file_actions_addclose(&fa, fds[1]);
      pid_t pid = 0;
      const int rc = posix_spawn(&pid, exe.c_str(), &fa, nullptr, argv, env.data());
      posix_spawn_file_actions_destroy(&fa);
      close(fds[0]);
      if (rc != 0) {
        close(fds[1]);
        return Internal("cannot start " + name + ": " + std::strerror(rc));
      }
      children_.push_back(Child{pid, fds[1], name, gpus[size_t(i)]});
    }
    return Status::Ok();
  }
  // The first member that has exited, if any ("" when all run).
  std::string exited() {
    for (Child& c : children_) {
      if (c.pid <= 0) continue;
      int st = 0;
      if (waitpid(c.pid, &st, WNOHANG) == c.pid) {
        c.pid = 0;
        return c.name + " (GPU " + c.gpu + ") " +
               (WIFSIGNALED(st) ? "was killed by signal " + std::to_string(WTERMSIG(st))
                                : "exited with status " + std::to_string(WEXITSTATUS(st)));
      }
    }
    return "";
  }
  // Closes every member's stdin, then waits up to 20 s before SIGKILL.
  void stop() {
    for (Child& c : children_)
      if (c.stdin_fd >= 0) {
        close(c.stdin_fd);
        c.stdin_fd = -1;
      }
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    for (Child& c : children_) {
      while (c.pid > 0) {
        int st = 0;
        if (waitpid(c.pid, &st, WNOHANG) == c.pid) {
          c.pid = 0;
        } else if (Clock::now() > deadline) {
          kill(c.pid, SIGKILL);
          waitpid(c.pid, &st, 0);
          c.pid = 0;
        } else {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
      }
    }
    children_.clear();
  }

 private:
  struct Child {
    pid_t pid = 0;
    int stdin_fd = -1;
    std::string name, gpu;
  };
  std::vector<Child> children_;
};

struct Result {
  std::string shape, config;
  int processes = 1;
  double e2e_ms = 0, kernel_ms = 0, copy_in_ms = 0, reduce_ms = 0, copy_out_ms = 0;
  double scale_e2e = 0, scale_kernel = 0;
  double max_err = 0;
  std::string plan;
};

}  // namespace

int run_cluster_member(const std::string& coordinator, const std::string& name) {
  const std::string prefix = "engine-bench " + name + ": ";
  CudaClusterPlaneOptions po;
  po.log = [prefix](std::string_view m) { log_line(prefix, m); };
  auto plane = make_cuda_cluster_plane(po);
  if (!plane.ok()) {
    log_line(prefix, plane.status().to_string());
    return 1;
  }
  ClusterOptions o;
  o.host = name;
  o.log = po.log;
  ClusterMember member(**plane, coordinator, o);
  member.start();
  char buf[256];
  while (read(0, buf, sizeof buf) > 0) {
  }
  member.stop();
  return 0;
}

int run_cluster_bench(const ClusterBenchArgs& args) {
  const int n = args.processes;
  // GPUs: this process's CUDA_VISIBLE_DEVICES list (or 0, 1, ...); the
  // coordinator takes the first, each member one of the next, so every
  // process sees one GPU as the servers of scripts/cluster-check.sh do.
  std::vector<std::string> gpus;
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES"); v && *v) gpus = split_list(v);
  if (gpus.empty())
    for (int i = 0; i < n; ++i) gpus.push_back(std::to_string(i));
  if (int(gpus.size()) < n) {
    std::fprintf(stderr, "engine-bench: --cluster %d needs %d GPUs; CUDA_VISIBLE_DEVICES lists %zu\n", n, n,
                 gpus.size());
    return 1;
  }
  setenv("CUDA_VISIBLE_DEVICES", gpus[0].c_str(), 1);  // before any CUDA call in this process

  const std::string prefix = "engine-bench coord: ";
  auto log = [prefix](std::string_view m) { log_line(prefix, m); };
  CudaEngineOptions eo;
  eo.devices = {0};
  eo.lanes_per_device = 1;
  eo.default_kernel = args.kernel;
  auto local = make_cuda_engine(eo);
  if (!local.ok()) {
    std::fprintf(stderr, "engine-bench: %s\n", local.status().to_string().c_str());
    return 1;
  }
  Engine* local_engine = local->get();
  const EngineInfo info = local_engine->info();
  CudaClusterPlaneOptions po;
  po.devices = {0};
  po.log = log;
  auto plane = make_cuda_cluster_plane(po);
  if (!plane.ok()) {
    std::fprintf(stderr, "engine-bench: %s\n", plane.status().to_string().c_str());
    return 1;
  }
  ClusterOptions co;
  co.host = "coord";
  co.always = true;  // every request over the cluster, as sgemm-server --cluster-always
  co.log = log;
  auto coordinator = std::make_unique<ClusterCoordinator>(**plane, co);
  grpc::ServerBuilder sb;
  int port = 0;
  sb.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  sb.RegisterService(coordinator.get());
  sb.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  sb.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  sb.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  sb.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  std::unique_ptr<grpc::Server> server = sb.BuildAndStart();
  if (!server || port == 0) {
    std::fprintf(stderr, "engine-bench: cannot listen for cluster members on 127.0.0.1\n");
    return 1;
  }
  const std::string addr = "127.0.0.1:" + std::to_string(port);
  Members members;
  int rc = 0;
  std::unique_ptr<Engine> engine;
  auto finish = [&](int code) {
    engine.reset();
    members.stop();
    coordinator->shutdown();
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    return code;
  };
  if (Status s = members.spawn(n - 1, addr, gpus); !s.ok()) {
    std::fprintf(stderr, "engine-bench: %s\n", s.to_string().c_str());
    return finish(1);
  }
  const auto join_deadline = Clock::now() + std::chrono::seconds(120);
  while (coordinator->member_count() < n - 1) {
    if (std::string gone = members.exited(); !gone.empty()) {
      std::fprintf(stderr, "engine-bench: %s before joining\n", gone.c_str());
      return finish(1);
    }
    if (Clock::now() > join_deadline) {
      std::fprintf(stderr, "engine-bench: %d of %d members joined within 120 s\n", coordinator->member_count(), n - 1);
      return finish(1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // The communicator, and the link measured on it, before any product.
  ClusterView view;
  {
    MutexLock jobs(coordinator->job_mutex());
    StatusOr<ClusterView> v = coordinator->prepare();
    if (!v.ok()) {
      std::fprintf(stderr, "engine-bench: building the cluster: %s\n", v.status().to_string().c_str());
      return finish(1);
    }
    view = *v;
  }
  std::set<int> hosts;
  for (const auto& r : view.ranks) hosts.insert(r.host);
  char link[256];
  const size_t remote = view.ranks.size() - 1;  // this process has one GPU
  std::snprintf(link, sizeof link, "link at join: broadcast %.2f GB/s, fan-out %.2f GB/s to %zu remote rank%s (%.2fx)",
                view.net_gbps, view.fanout_gbps, remote, remote == 1 ? "" : "s",
                view.net_gbps > 0 ? view.fanout_gbps / view.net_gbps : 0.0);
  std::fprintf(stderr, "engine-bench: cluster of %zu ranks on %zu processes, %s; %s; kernel %s\n", view.ranks.size(),
               hosts.size(), info.devices.empty() ? "?" : info.devices[0].name.c_str(), link,
               args.kernel ? std::string(kernel_kind_name(*args.kernel)).c_str() : "chosen per shape");
  engine = make_cluster_engine(std::move(local).value(), *coordinator);

  PinnedHostPool host(0);
  std::vector<Result> results;
  for (const ClusterBenchShape& cs : args.shapes) {
    const GemmShape& s = cs.shape;
    const char* split = cs.split == SplitMode::kK ? "k" : "rows";
    char shape[64];
    std::snprintf(shape, sizeof shape, "%lldx%lldx%lld", (long long)s.m, (long long)s.n, (long long)s.k);
    auto a = host.allocate(size_t(s.m * s.k) * 4), b = host.allocate(size_t(s.k * s.n) * 4),
         c = host.allocate(size_t(s.m * s.n) * 4);
    if (!a.ok() || !b.ok() || !c.ok()) {
      std::fprintf(stderr, "engine-bench: pinned host memory for %s: out of memory\n", shape);
      return finish(1);
    }
    fill_parallel(a->floats(), s.m * s.k, 1);
    fill_parallel(b->floats(), s.k * s.n, 2);
    const auto rows = rows_to_verify(s.m, s.n, s.k, 3, args.sample);
    Result single;
    for (const SplitMode mode : {SplitMode::kSingle, cs.split}) {
      const bool cluster = mode != SplitMode::kSingle;
      const std::string config = cluster ? std::string("cluster-") + split : "single";
      GemmJob job;
      job.request.shape = s;
      job.request.options.split = mode;
      job.request.options.kernel = args.kernel;
      job.a = a->floats();
      job.b = b->floats();
      job.c = c->floats();
      std::memset(c->floats(), 0xff, size_t(s.m * s.n) * 4);  // NaN: unwritten rows fail verification
      auto first = engine->run(job);
      if (!first.ok()) {
        std::fprintf(stderr, "engine-bench: %s %s: %s\n", shape, config.c_str(), first.status().to_string().c_str());
        rc = 1;
        continue;
      }
      if (cluster && int(first->devices.size()) != n) {
        std::fprintf(stderr, "engine-bench: %s %s ran on %zu GPU(s), not the cluster's %d [%s]\n", shape,
                     config.c_str(), first->devices.size(), n, first->plan_reason.c_str());
        rc = 1;
        continue;
      }
      const VerifyResult v = verify_parallel(s, a->floats(), b->floats(), c->floats(), rows);
      if (!v.passed(kSgemmTolerance)) {
        std::fprintf(stderr, "engine-bench: %s %s: WRONG RESULT (max rel error %.3g at %lld,%lld); not timed\n", shape,
                     config.c_str(), v.max_rel_error, (long long)v.worst_row, (long long)v.worst_col);
        rc = 1;
        continue;
      }
      auto runs = time_engine_runs(*engine, job, args.warmup, args.iters);
      if (!runs.ok()) {
        std::fprintf(stderr, "engine-bench: %s %s: %s\n", shape, config.c_str(), runs.status().to_string().c_str());
        return finish(1);
      }
      const std::string& plan = runs->plan.empty() ? first->plan_reason : runs->plan;
      Result res;
      res.shape = shape;
      res.config = config;
      res.processes = cluster ? n : 1;
      res.e2e_ms = runs->e2e_ms;
      res.kernel_ms = runs->kernel_ms;
      res.copy_in_ms = runs->copy_in_ms;
      res.reduce_ms = runs->reduce_ms;
      res.copy_out_ms = runs->copy_out_ms;
      res.max_err = v.max_rel_error;
      res.plan = plan;
      if (!cluster) single = res;
      res.scale_e2e = single.e2e_ms > 0 ? single.e2e_ms / res.e2e_ms : 0;
      res.scale_kernel = single.kernel_ms > 0 ? single.kernel_ms / res.kernel_ms : 0;
      results.push_back(res);
      std::fprintf(stderr, "  %s %-13s e2e %9.2f ms  kernel %9.2f ms  nccl %9.2f ms  [%s]\n", shape, config.c_str(),
                   res.e2e_ms, res.kernel_ms, res.reduce_ms, plan.c_str());
      if (cluster && single.e2e_ms > 0)
        std::fprintf(args.csv ? stderr : stdout,
                     "cluster %dx1 GPU %s %s: kernel phase %.1f ms vs one GPU %.1f ms = %.2fx; device-side end to end "
                     "%.1f ms vs %.1f ms = %.2fx; planner %s; %s\n",
                     n, shape, split, res.kernel_ms, single.kernel_ms, res.scale_kernel, res.e2e_ms, single.e2e_ms,
                     res.scale_e2e, estimate_of(plan).c_str(), link);
    }
  }
  auto write_csv = [&](FILE* f) {
    std::fprintf(f,
                 "shape,config,processes,e2e_ms,e2e_scaling,kernel_ms,kernel_scaling,copy_in_ms,reduce_ms,copy_out_ms,"
                 "bcast_gbps,fanout_gbps,max_rel_err,plan\n");
    for (const auto& r : results)
      std::fprintf(f, "%s,%s,%d,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3g,\"%s\"\n", r.shape.c_str(),
                   r.config.c_str(), r.processes, r.e2e_ms, r.scale_e2e, r.kernel_ms, r.scale_kernel, r.copy_in_ms,
                   r.reduce_ms, r.copy_out_ms, view.net_gbps, view.fanout_gbps, r.max_err, r.plan.c_str());
  };
  if (!args.csv_out.empty()) {
    if (FILE* f = std::fopen(args.csv_out.c_str(), "w")) {
      write_csv(f);
      std::fclose(f);
    } else {
      std::fprintf(stderr, "engine-bench: cannot write %s\n", args.csv_out.c_str());
      rc = 1;
    }
  }
  if (args.csv) {
    write_csv(stdout);
  } else {
    std::printf("%-20s %-13s %5s %10s %7s %10s %7s %9s %9s %9s\n", "shape", "strategy", "procs", "e2e ms", "scale",
                "kernel ms", "scale", "in ms", "nccl ms", "out ms");
    for (const auto& r : results)
      std::printf("%-20s %-13s %5d %10.2f %6.2fx %10.2f %6.2fx %9.2f %9.2f %9.2f\n", r.shape.c_str(), r.config.c_str(),
                  r.processes, r.e2e_ms, r.scale_e2e, r.kernel_ms, r.scale_kernel, r.copy_in_ms, r.reduce_ms,
                  r.copy_out_ms);
    std::printf(
        "(medians of %d runs after %d warm-up; %d processes x 1 GPU; %s; e2e = Engine::run wall time, pinned host in "
        "-> pinned host out on the coordinator; kernel = slowest rank's summed kernel time; in/nccl/out = slowest "
        "rank's copy-in, NCCL and copy-out time)\n",
        args.iters, args.warmup, n, link);
  }
  return finish(rc);
}

}  // namespace sgemm::bench
