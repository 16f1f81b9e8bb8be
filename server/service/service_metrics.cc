#include "server/service/service_metrics.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

namespace sgemm {
namespace {

// Gauges computed when Prometheus scrapes, from the service's own counters.
class LoadCollectable final : public prometheus::Collectable {
 public:
  explicit LoadCollectable(std::function<LoadGauges()> load) : load_(std::move(load)) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    const LoadGauges g = load_();
    std::vector<prometheus::MetricFamily> out;
    auto family = [&](const char* name, const char* help) -> prometheus::MetricFamily& {
      prometheus::MetricFamily f;
      f.name = name;
      f.help = help;
      f.type = prometheus::MetricType::Gauge;
      out.push_back(std::move(f));
      return out.back();
    };
    auto sample = [](prometheus::MetricFamily& f, double value, std::vector<prometheus::ClientMetric::Label> labels) {
      prometheus::ClientMetric m;
      m.gauge.value = value;
      m.label = std::move(labels);
      f.metric.push_back(std::move(m));
    };
    auto gauge = [&](const char* name, const char* help, double value) { sample(family(name, help), value, {}); };
    gauge("sgemm_queued_requests", "Requests waiting for a compute slot or for host memory", g.queued);
    gauge("sgemm_in_flight_requests", "Requests being computed", g.in_flight);
    gauge("sgemm_open_streams",
          "Multiply and PutMatrix streams open and not yet answered (what --max-open-streams bounds)", g.open_streams);
    gauge("sgemm_host_memory_in_use_bytes", "Host memory budget reserved by requests", double(g.host_bytes_in_use));
    gauge("sgemm_host_memory_budget_bytes", "Host memory budget (--host-memory-bytes)", double(g.host_bytes_budget));
    gauge("sgemm_region_bytes_in_use", "Bytes of registered shared-memory regions", double(g.region_bytes_in_use));
    gauge("sgemm_region_budget_bytes", "Shared-memory region budget (--region-bytes)", double(g.region_bytes_budget));
    gauge("sgemm_regions", "Shared-memory regions registered", g.regions);
    if (g.resident_budget >= 0) {
      gauge("sgemm_resident_budget_bytes", "Resident-matrix budget per device (--resident-bytes)",
            double(g.resident_budget));
      gauge("sgemm_resident_matrices", "Resident matrices held", g.resident_matrices);
      auto& used = family("sgemm_resident_bytes_in_use", "Bytes of resident matrices, by device");
      for (const DeviceGauge& d : g.devices)
        if (d.resident_in_use >= 0) sample(used, double(d.resident_in_use), {{"device", d.label}});
    }
    // A faulted device stays in the list with 0, so an alert can fire on it.
    auto& healthy = family("sgemm_device_healthy", "1 while the device serves requests, 0 once taken out of service");
    auto& memory = family("sgemm_device_memory_bytes", "Memory of the device");
    for (const DeviceGauge& d : g.devices) {
      sample(healthy, d.healthy ? 1.0 : 0.0, {{"device", d.label}, {"name", d.name}});
      sample(memory, double(d.memory_bytes), {{"device", d.label}, {"name", d.name}});
    }
    // Only devices whose use is known: a GPU out of service, or the host, has no sample.
    bool any_used = false;
    for (const DeviceGauge& d : g.devices) any_used = any_used || d.memory_used >= 0;
    if (any_used) {
      auto& used = family("sgemm_device_memory_used_bytes",
                          "Memory in use on the device, by every process (the driver's total - free)");
      for (const DeviceGauge& d : g.devices)
        if (d.memory_used >= 0) sample(used, double(d.memory_used), {{"device", d.label}, {"name", d.name}});
    }
    return out;
  }

 private:
  std::function<LoadGauges()> load_;
};

std::string device_label(int index) { return index < 0 ? "cpu" : std::to_string(index); }

// A minimal HTTP/1.0 endpoint for GET /metrics. prometheus-cpp's own exposer
// (civetweb) cannot start its threads inside sgemm-server: it asks for small
// thread stacks, and the static TLS of the CUDA libraries does not fit them.
//
// One thread serves up to kMaxConnections connections at once, each without
// blocking (poll): a connection has kDeadline in all to send its request and
// take the answer, however it trickles. When every place is taken, the
// connection that has held one longest without a complete request gives it
// up to the next in the kernel's queue (once it has had kMinHold). So a
// slowloris client (one byte now and then) holds a place for at most
// kDeadline, and a scrape waits behind at most one round of them.
class MetricsEndpoint {
 public:
  using Body = std::function<std::string()>;
  static constexpr int kMaxConnections = 32;
  static constexpr auto kDeadline = std::chrono::seconds(2);
  static constexpr auto kMinHold = std::chrono::milliseconds(250);
  static constexpr std::size_t kMaxRequestBytes = 16384;

  static StatusOr<std::unique_ptr<MetricsEndpoint>> listen(const std::string& address, Body body) {
    const auto colon = address.rfind(':');
    if (colon == std::string::npos) return InvalidArgument("--metrics-listen " + address + ": expected HOST:PORT");
    std::string host = address.substr(0, colon);
    const std::string port = address.substr(colon + 1);
    if (host.size() > 1 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    addrinfo* found = nullptr;
    if (int e = getaddrinfo(host.empty() || host == "*" ? nullptr : host.c_str(), port.c_str(), &hints, &found); e)
      return InvalidArgument("--metrics-listen " + address + ": " + gai_strerror(e));
    int fd = -1;
    std::string why = "no address";
    for (addrinfo* ai = found; ai && fd < 0; ai = ai->ai_next) {
      fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
      if (fd < 0) continue;
      const int one = 1;
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, 64) != 0) {
        why = std::strerror(errno);
        close(fd);
        fd = -1;
      }
    }
    freeaddrinfo(found);
    if (fd < 0) return Unavailable("--metrics-listen " + address + ": cannot listen: " + why);
    sockaddr_storage bound{};
    socklen_t len = sizeof bound;
    getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
    const int bound_port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                                       : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    return std::unique_ptr<MetricsEndpoint>(new MetricsEndpoint(fd, bound_port, std::move(body)));
  }
  ~MetricsEndpoint() {
    stop_ = true;
    thread_.join();
    for (const Connection& c : connections_) close(c.fd);
    close(fd_);
  }
  int port() const { return port_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Connection {
    int fd = -1;
    Clock::time_point deadline;
    std::string in;   // the request so far
    std::string out;  // the answer, once the request is complete
    std::size_t sent = 0;
  };

  MetricsEndpoint(int fd, int port, Body body)
      : fd_(fd), port_(port), body_(std::move(body)), thread_([this] { serve(); }) {}

  // Serve thread only.
  void serve() {
    std::vector<pollfd> fds;
    while (!stop_.load()) {
      const auto now = Clock::now();
      // While every place is taken and none may be given up yet, new
      // connections wait in the kernel's queue, in the order they came.
      const bool may_accept = int(connections_.size()) < kMaxConnections || evictable(now) != connections_.end();
      fds.clear();
      fds.push_back({may_accept ? fd_ : -1, POLLIN, 0});
      for (const Connection& c : connections_) fds.push_back({c.fd, short(c.out.empty() ? POLLIN : POLLOUT), 0});
      // Wakes every 50 ms at most: to see stop_, deadlines, and places that may be given up.
      if (poll(fds.data(), fds.size(), 50) < 0 && errno != EINTR) continue;
      for (std::size_t i = 1; i < fds.size(); ++i)
        if (fds[i].revents) step(connections_[i - 1]);
      const auto later = Clock::now();
      std::erase_if(connections_, [&](const Connection& c) {
        const bool over = c.fd < 0 || later >= c.deadline;
        if (over && c.fd >= 0) close(c.fd);
        return over;
      });
      if (fds[0].revents & POLLIN) accept_all(later);
    }
  }

  // The connection that has held a place longest without a complete request,
  // once it has had kMinHold (a scraper sends its request at once; a flood of
  // new connections must not push out one that just came); end() if none.
  std::vector<Connection>::iterator evictable(Clock::time_point now) {
    auto oldest = connections_.end();
    for (auto it = connections_.begin(); it != connections_.end(); ++it)
      if (it->out.empty() && it->deadline - kDeadline + kMinHold <= now &&
          (oldest == connections_.end() || it->deadline < oldest->deadline))
        oldest = it;
    return oldest;
  }

  void accept_all(Clock::time_point now) {
    for (;;) {
      auto give_up = connections_.end();
      if (int(connections_.size()) >= kMaxConnections) {
        give_up = evictable(now);
        if (give_up == connections_.end()) return;  // the rest wait in the queue
      }
      const int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (c < 0) return;
      if (give_up != connections_.end()) {
        close(give_up->fd);
        connections_.erase(give_up);
      }
      connections_.push_back(Connection{c, now + kDeadline, {}, {}, 0});
    }
  }

  // Reads what the connection sent, or writes what it is owed; fd = -1 once done.
  void step(Connection& c) {
    if (c.out.empty()) {
      char buf[2048];
      const ssize_t n = recv(c.fd, buf, sizeof buf, 0);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return drop(c);
      if (n > 0) c.in.append(buf, std::size_t(n));
      if (c.in.find("\r\n\r\n") == std::string::npos) {
        if (c.in.size() > kMaxRequestBytes) drop(c);
        return;
      }
      c.out = answer(c.in);
    }
    const ssize_t n = send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN && errno != EINTR) return drop(c);
    if (n > 0) c.sent += std::size_t(n);
    if (c.sent == c.out.size()) drop(c);
  }

  static void drop(Connection& c) {
    close(c.fd);
    c.fd = -1;
  }

  std::string answer(const std::string& req) const {
    const bool metrics = req.rfind("GET /metrics ", 0) == 0 || req.rfind("GET /metrics?", 0) == 0;
    const std::string body = metrics ? body_() : "not found: metrics are at /metrics\n";
    return std::string(metrics ? "HTTP/1.0 200 OK\r\n" : "HTTP/1.0 404 Not Found\r\n") +
           "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: " + std::to_string(body.size()) +
           "\r\nConnection: close\r\n\r\n" + body;
  }

  const int fd_;
  const int port_;
  Body body_;
  std::atomic<bool> stop_{false};
  std::vector<Connection> connections_;  // serve thread only
  std::thread thread_;                   // last: starts once the rest is set
};

}  // namespace

struct ServiceMetrics::Impl {
  std::unique_ptr<MetricsEndpoint> endpoint;
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
  std::shared_ptr<LoadCollectable> load;
  prometheus::Family<prometheus::Counter>* requests = nullptr;
  prometheus::Family<prometheus::Histogram>* phases = nullptr;
  prometheus::Counter* bytes_in = nullptr;
  prometheus::Counter* bytes_out = nullptr;
  prometheus::Family<prometheus::Counter>* busy = nullptr;
  prometheus::Family<prometheus::Counter>* wait = nullptr;
  prometheus::Histogram* launch_products = nullptr;
  prometheus::Family<prometheus::Counter>* kernel_launches = nullptr;

  void count_kernels(const std::vector<KernelRowRecord>& rows) {
    for (const KernelRowRecord& k : rows) kernel_launches->Add({{"row", k.name}}).Increment(double(k.launches));
  }
};

StatusOr<std::unique_ptr<ServiceMetrics>> ServiceMetrics::start(const std::string& listen, const BuildInfo& build,
                                                                std::function<LoadGauges()> load) {
  auto impl = std::make_unique<Impl>();
  auto& reg = *impl->registry;
  prometheus::BuildGauge()
      .Name("sgemm_build_info")
      .Help("Always 1; the labels say which build of sgemm-server is running")
      .Register(reg)
      .Add({{"version", build.version}, {"commit", build.commit}})
      .Set(1);
  impl->requests = &prometheus::BuildCounter()
                        .Name("sgemm_requests_total")
                        .Help("Finished Multiply calls by status code and client (--auth-tokens)")
                        .Register(reg);
  impl->phases = &prometheus::BuildHistogram()
                      .Name("sgemm_request_phase_seconds")
                      .Help("Time successful requests spent in each phase (receive, queue, compute, send, total)")
                      .Register(reg);
  impl->bytes_in = &prometheus::BuildCounter()
                        .Name("sgemm_received_bytes_total")
                        .Help("Matrix payload received (A, B, C)")
                        .Register(reg)
                        .Add({});
  impl->bytes_out =
      &prometheus::BuildCounter().Name("sgemm_sent_bytes_total").Help("Matrix payload sent (C)").Register(reg).Add({});
  impl->busy = &prometheus::BuildCounter()
                    .Name("sgemm_gpu_busy_seconds_total")
                    .Help("Device time spent working, by phase (copy_in, kernel, reduce, copy_out)")
                    .Register(reg);
  impl->wait = &prometheus::BuildCounter()
                    .Name("sgemm_gpu_wait_seconds_total")
                    .Help(
                        "Device phases waiting: copy_in (for input), kernel (for copies), reduce (for peers), "
                        "copy_out (for kernels), order (for the NCCL order)")
                    .Register(reg);
  impl->launch_products = &prometheus::BuildHistogram()
                               .Name("sgemm_launch_products")
                               .Help("Products per engine launch of small requests (coalescing; 1: ran alone)")
                               .Register(reg)
                               .Add({}, prometheus::Histogram::BucketBoundaries{1, 2, 4, 8, 16, 32, 64, 128, 256});
  impl->kernel_launches = &prometheus::BuildCounter()
                               .Name("sgemm_kernel_launches_total")
                               .Help("Engine launches of each concrete kernel (registry row) by successful requests")
                               .Register(reg);
  impl->load = std::make_shared<LoadCollectable>(std::move(load));
  Impl* raw = impl.get();
  SGEMM_ASSIGN_OR_RETURN(impl->endpoint, MetricsEndpoint::listen(listen, [raw] {
                           std::vector<prometheus::MetricFamily> families = raw->registry->Collect();
                           for (auto& f : raw->load->Collect()) families.push_back(std::move(f));
                           return prometheus::TextSerializer().Serialize(families);
                         }));
  return std::unique_ptr<ServiceMetrics>(new ServiceMetrics(std::move(impl)));
}

ServiceMetrics::ServiceMetrics(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ServiceMetrics::~ServiceMetrics() {
  impl_->endpoint.reset();  // stop serving before the metrics go
}

int ServiceMetrics::port() const { return impl_->endpoint->port(); }

void ServiceMetrics::record_launch(int products, const std::vector<KernelRowRecord>& kernel_rows) {
  impl_->launch_products->Observe(double(products));
  impl_->count_kernels(kernel_rows);
}

void ServiceMetrics::record(StatusCode code, const std::string& client, int64_t bytes_in, int64_t bytes_out,
                            const TimingRecord* t, bool count_kernels) {
  impl_->requests->Add({{"code", std::string(status_code_name(code))}, {"client", client}}).Increment();
  impl_->bytes_in->Increment(double(bytes_in));
  impl_->bytes_out->Increment(double(bytes_out));
  if (!t) return;
  // 1 ms to ~9 min, x2 per bucket: GEMMs from tiny to 65536^3 on a CPU.
  static const prometheus::Histogram::BucketBoundaries kBuckets = [] {
    prometheus::Histogram::BucketBoundaries b;
    for (double s = 0.001; s < 1000; s *= 2) b.push_back(s);
    return b;
  }();
  const std::pair<const char*, double> phases[] = {{"receive", t->receive_ms},
                                                   {"queue", t->queue_ms},
                                                   {"compute", t->compute_ms},
                                                   {"send", t->send_ms},
                                                   {"total", t->total_ms}};
  for (const auto& [name, ms] : phases) impl_->phases->Add({{"phase", name}}, kBuckets).Observe(ms / 1000.0);
  if (count_kernels) impl_->count_kernels(t->kernel_rows);
  for (const DeviceTimingRecord& d : t->devices) {
    const std::string dev = device_label(d.index);
    const std::pair<const char*, double> busy[] = {
        {"copy_in", d.copy_in_ms}, {"kernel", d.kernel_ms}, {"reduce", d.reduce_ms}, {"copy_out", d.copy_out_ms}};
    for (const auto& [name, ms] : busy) impl_->busy->Add({{"device", dev}, {"phase", name}}).Increment(ms / 1000.0);
    const std::pair<const char*, double> waits[] = {{"copy_in", d.copy_in_wait_ms},
                                                    {"kernel", d.kernel_wait_ms},
                                                    {"reduce", d.reduce_wait_ms},
                                                    {"copy_out", d.copy_out_wait_ms},
                                                    {"order", d.order_wait_ms}};
    for (const auto& [name, ms] : waits) impl_->wait->Add({{"device", dev}, {"phase", name}}).Increment(ms / 1000.0);
  }
}

}  // namespace sgemm
