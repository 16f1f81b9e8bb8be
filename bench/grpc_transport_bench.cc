// grpc-transport-bench: how fast matrices move through sgemm-server over gRPC,
// next to raw loopback TCP moving the same bytes in the same run (the
// ceiling for gRPC on this host), and end to end for square products.
//
//   grpc-transport-bench --server HOST:PORT [--sizes 4096,8192] [--e2e-sizes 4096,8192]
//                   [--repeat N] [--chunk-bytes B] [--streams 1,2,4] [--connections 1,2,4,8]
//                   [--arg NAME=INT ...]
//
// --connections: each transfer and e2e product is one request spread over
// that many connections (ClientOptions::connections, GemmHeader.stripes),
// reported next to raw TCP on one connection and raw TCP on as many
// connections as the request used (the fair ceiling), with both ratios.
// --streams: independent requests on connections of their own (the split rows).
//
// Directions, each with the payload bytes counted over the client's wall time:
//   up    multiply {rows, 1, k}: A (rows x k) travels up, a column of C down
//   down  multiply {m, n, 1}: a column of A and a row of B up, C (m x n) down
//   e2e   multiply {N, N, N}: A and B up, C down, the server's product between
// "64MiB" moves one 4096 x 4096 matrix; size N moves 2 N^2 floats up (A and B
// of an N^3 product) and N^2 down (its C). Raw TCP: one loopback connection
// inside this process, send() from and recv() into ordinary memory, default
// socket buffers. Medians of --repeat runs after one warm-up; the first run
// of each request checks C against the fp64 reference (rows sampled).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "client/sgemm_client.h"
#include "common/reference_gemm.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::string server = "127.0.0.1:50051";
  std::vector<int64_t> sizes = {4096, 8192};
  std::vector<int64_t> e2e_sizes = {4096, 8192};
  std::vector<int> streams = {1};
  std::vector<int> connections = {1};
  int repeat = 5;
  sgemm::ClientOptions client;
};

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(std::stoll(item));
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// One loopback TCP transfer of `bytes` over `conns` connections (each moving
// its share, a sender and a receiver thread each): seconds from the first
// send() to the last recv().
double tcp_once(const std::vector<char>& src, std::vector<char>& dst, int conns = 1) {
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (lfd < 0 || bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(lfd, 1) != 0 ||
      getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::perror("grpc-transport-bench: tcp listen");
    std::exit(1);
  }
  listen(lfd, conns);
  std::vector<int> cfd(static_cast<std::size_t>(conns)), sfd(static_cast<std::size_t>(conns));
  for (int i = 0; i < conns; ++i) {
    cfd[std::size_t(i)] = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(cfd[std::size_t(i)], reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      std::perror("grpc-transport-bench: tcp connect");
      std::exit(1);
    }
    sfd[std::size_t(i)] = accept(lfd, nullptr, nullptr);
  }
  const std::size_t part = (src.size() + std::size_t(conns) - 1) / std::size_t(conns);
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int i = 0; i < conns; ++i) {
    const std::size_t begin = std::min(src.size(), part * std::size_t(i));
    const std::size_t end = std::min(src.size(), begin + part);
    threads.emplace_back([&, i, begin, end] {
      std::size_t off = begin;
      while (off < end) {
        const ssize_t n = send(cfd[std::size_t(i)], src.data() + off, end - off, 0);
        if (n <= 0) break;
        off += std::size_t(n);
      }
    });
    threads.emplace_back([&, i, begin, end] {
      std::size_t got = begin;
      while (got < end) {
        const ssize_t n = recv(sfd[std::size_t(i)], dst.data() + got, end - got, 0);
        if (n <= 0) break;
        got += std::size_t(n);
      }
    });
  }
  for (auto& t : threads) t.join();
  const double s = seconds_since(t0);
  for (int i = 0; i < conns; ++i) {
    close(sfd[std::size_t(i)]);
    close(cfd[std::size_t(i)]);
  }
  close(lfd);
  return s;
}

double tcp_gbps(int64_t bytes, int repeat, int conns = 1) {
  std::vector<char> src(std::size_t(bytes), 1), dst(std::size_t(bytes), 0);
  tcp_once(src, dst, conns);
  std::vector<double> t;
  for (int i = 0; i < repeat; ++i) t.push_back(tcp_once(src, dst, conns));
  return double(bytes) / median(t) / 1e9;
}

struct Timed {
  double wall_s = 0;         // median client wall time
  double compute_ms = 0;     // median server compute_ms
  int64_t up = 0, down = 0;  // payload bytes of one request
  bool duplex = false;       // C began to arrive before the upload ended (any run)
  int stripes = 1;           // connections the request used
  std::string error;
};

Timed time_requests(const std::string& server, const sgemm::ClientOptions& copt, const sgemm::GemmShape& s,
                    int repeat) {
  Timed out;
  auto client = sgemm::Client::connect(server, copt);
  std::vector<float> a(std::size_t(s.m * s.k)), b(std::size_t(s.k * s.n)), c(std::size_t(s.m * s.n));
  sgemm::fill_random(a, 1);
  sgemm::fill_random(b, 2);
  sgemm::MultiplyOptions mo;
  mo.c_out = c.data();
  std::vector<double> wall, compute;
  for (int i = 0; i <= repeat; ++i) {
    const auto t0 = Clock::now();
    auto r = client->multiply(s, a.data(), b.data(), nullptr, mo);
    const double w = seconds_since(t0);
    if (!r.ok()) {
      out.error = r.status().to_string();
      return out;
    }
    if (i == 0) {
      auto v = sgemm::verify_gemm(s.m, s.n, s.k, 1.0f, a.data(), b.data(), 0.0f, nullptr, c.data(),
                                  sgemm::rows_to_verify(s.m, s.n, s.k, 7));
      if (!v.passed(sgemm::kSgemmTolerance)) {
        out.error = "WRONG RESULT";
        return out;
      }
      continue;  // the warm-up
    }
    wall.push_back(w);
    compute.push_back(r->summary.compute_ms);
    out.up = r->bytes_sent;
    out.down = r->bytes_received;
    out.duplex = out.duplex || r->first_c_before_upload_end;
    out.stripes = r->summary.stripes;
  }
  out.wall_s = median(wall);
  out.compute_ms = median(compute);
  return out;
}

// `streams` concurrent requests, each on a connection of its own, splitting
// the rows of an up (or down) transfer; GB/s of all payload over the wall time.
double split_gbps(const Args& args, bool up, int64_t rows, int64_t cols, int streams, std::string* error) {
  std::vector<double> t;
  for (int rep = 0; rep <= args.repeat; ++rep) {
    std::vector<std::thread> th;
    std::vector<int64_t> bytes(std::size_t(streams), 0);
    std::vector<std::string> errs(static_cast<std::size_t>(streams));
    const int64_t part = (rows + streams - 1) / streams;
    const auto t0 = Clock::now();
    for (int i = 0; i < streams; ++i) {
      th.emplace_back([&, i] {
        sgemm::ClientOptions o = args.client;
        o.channel_args.emplace_back("sgemm.bench.connection", i);
        auto client = sgemm::Client::connect(args.server, o);
        const int64_t r = std::min(part, rows - part * i);
        const sgemm::GemmShape s = up ? sgemm::GemmShape{r, 1, cols} : sgemm::GemmShape{r, cols, 1};
        std::vector<float> a(std::size_t(s.m * s.k), 0.5f), b(std::size_t(s.k * s.n), 0.5f);
        auto res = client->multiply(s, a.data(), b.data(), nullptr, {});
        if (!res.ok())
          errs[std::size_t(i)] = res.status().to_string();
        else
          bytes[std::size_t(i)] = up ? res->bytes_sent : res->bytes_received;
      });
    }
    for (auto& x : th) x.join();
    for (auto& e : errs)
      if (!e.empty()) *error = e;
    if (rep > 0) t.push_back(seconds_since(t0));
  }
  const double total = double(rows * cols) * 4;
  return total / median(t) / 1e9;
}

// tcp_n: raw TCP over as many connections as the request used (0: not measured).
void row(const char* what, const std::string& size, const char* dir, int conns, int64_t bytes, double grpc, double tcp,
         double tcp_n) {
  std::printf(
      "%-6s %-8s %-5s conns %d %8.1f MiB   gRPC %6.2f GB/s   raw TCP %6.2f GB/s (%3.0f %%)   raw TCP x%d %6.2f GB/s "
      "(%3.0f %%)\n",
      what, size.c_str(), dir, conns, double(bytes) / 1048576.0, grpc, tcp, tcp > 0 ? 100.0 * grpc / tcp : 0.0, conns,
      tcp_n, tcp_n > 0 ? 100.0 * grpc / tcp_n : 0.0);
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each line as it is measured, even under `timeout`
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "grpc-transport-bench: %s needs a value\n", s.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (s == "--server") {
      args.server = next();
    } else if (s == "--sizes") {
      args.sizes = parse_list(next());
    } else if (s == "--e2e-sizes") {
      args.e2e_sizes = parse_list(next());
    } else if (s == "--streams") {
      args.streams.clear();
      for (int64_t v : parse_list(next())) args.streams.push_back(int(v));
    } else if (s == "--connections") {
      args.connections.clear();
      for (int64_t v : parse_list(next())) args.connections.push_back(int(v));
    } else if (s == "--repeat") {
      args.repeat = std::max(1, std::stoi(next()));
    } else if (s == "--chunk-bytes") {
      args.client.chunk_bytes = std::stoll(next());
    } else if (s == "--arg") {
      const std::string kv = next();
      const auto eq = kv.find('=');
      if (eq == std::string::npos) {
        std::fprintf(stderr, "grpc-transport-bench: --arg takes NAME=INT\n");
        return 2;
      }
      args.client.channel_args.emplace_back(kv.substr(0, eq), std::stoi(kv.substr(eq + 1)));
    } else {
      const bool help = s == "--help" || s == "-h";
      std::fprintf(help ? stdout : stderr,
                   "usage: grpc-transport-bench --server HOST:PORT [--sizes 4096,8192] [--e2e-sizes 4096,8192] "
                   "[--repeat N] [--chunk-bytes B] [--streams 1,2,4] [--connections 1,2,4,8] "
                   "[--arg NAME=INT ...]\n");
      return help ? 0 : 2;
    }
  }
  std::printf("# grpc-transport-bench: server %s, client chunk %lld bytes, median of %d after a warm-up\n",
              args.server.c_str(), (long long)args.client.chunk_bytes, args.repeat);
  int failures = 0;
  std::map<std::pair<int64_t, int>, double> tcp_cache;  // (bytes, connections) -> GB/s, measured once
  auto tcp = [&](int64_t bytes, int conns) {
    auto& v = tcp_cache[{bytes, conns}];
    if (v == 0) v = tcp_gbps(bytes, args.repeat, conns);
    return v;
  };
  auto transfer = [&](const std::string& label, const sgemm::GemmShape& s, bool up, int64_t tcp_bytes) {
    for (int conns : args.connections) {
      sgemm::ClientOptions o = args.client;
      o.connections = conns;
      Timed t = time_requests(args.server, o, s, args.repeat);
      if (!t.error.empty()) {
        std::printf("%-6s %-8s %-5s conns %d FAILED: %s\n", "xfer", label.c_str(), up ? "up" : "down", conns,
                    t.error.c_str());
        ++failures;
        continue;
      }
      const int64_t bytes = up ? t.up : t.down;
      row("xfer", label, up ? "up" : "down", t.stripes, bytes, double(bytes) / t.wall_s / 1e9, tcp(tcp_bytes, 1),
          t.stripes > 1 ? tcp(tcp_bytes, t.stripes) : tcp(tcp_bytes, 1));
    }
  };
  transfer("64MiB", {4096, 1, 4096}, true, int64_t(4096) * 4096 * 4);
  transfer("64MiB", {4096, 4096, 1}, false, int64_t(4096) * 4096 * 4);
  for (int64_t n : args.sizes) {
    transfer(std::to_string(n), {2 * n, 1, n}, true, 2 * n * n * 4);
    transfer(std::to_string(n), {n, n, 1}, false, n * n * 4);
  }
  for (int st : args.streams) {
    if (st <= 1) continue;
    std::string err;
    const double up = split_gbps(args, true, 4096, 4096, st, &err);
    const double down = split_gbps(args, false, 4096, 4096, st, &err);
    if (!err.empty()) {
      std::printf("streams %d FAILED: %s\n", st, err.c_str());
      ++failures;
      continue;
    }
    std::printf("split  64MiB    %d connections: up %6.2f GB/s   down %6.2f GB/s\n", st, up, down);
  }
  for (int64_t n : args.e2e_sizes) {
    for (int conns : args.connections) {
      sgemm::ClientOptions o = args.client;
      o.connections = conns;
      Timed t = time_requests(args.server, o, {n, n, n}, args.repeat);
      if (!t.error.empty()) {
        std::printf("e2e    %-8lld conns %d FAILED: %s\n", (long long)n, conns, t.error.c_str());
        ++failures;
        continue;
      }
      std::printf(
          "e2e    %-8lld conns %d wall %8.1f ms   server compute %8.1f ms (early start: engine waits for A inside)   "
          "up %.1f MiB, down %.1f MiB, C before upload end: %s\n",
          (long long)n, t.stripes, t.wall_s * 1e3, t.compute_ms, double(t.up) / 1048576, double(t.down) / 1048576,
          t.duplex ? "yes" : "no");
    }
  }
  return failures == 0 ? 0 : 1;
}
