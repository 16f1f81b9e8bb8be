#include "client/resident_commands.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>

#include "client/matrix_files.h"
#include "common/reference_gemm.h"

namespace sgemm::cli {

int put_command(const std::string& server, const ClientOptions& options, const PutArgs& args) {
  MatrixData m;
  uint64_t seed = args.seed;
  if (!args.file.empty()) {
    std::optional<std::pair<int64_t, int64_t>> raw;
    if (args.rows > 0 && args.cols > 0) raw = std::make_pair(args.rows, args.cols);
    auto got = read_matrix_file(args.file, raw);
    if (!got.ok()) {
      std::fprintf(stderr, "sgemm-client: %s\n", got.status().to_string().c_str());
      return 2;
    }
    m = std::move(*got);
  } else {
    if (args.rows < 1 || args.cols < 1) {
      std::fprintf(stderr, "sgemm-client: put needs --file, or --rows and --cols (random values)\n");
      return 2;
    }
    if (seed == 0) seed = std::random_device{}() | (uint64_t(std::random_device{}()) << 32);
    m.rows = args.rows;
    m.cols = args.cols;
    m.values.resize(std::size_t(m.rows * m.cols));
    fill_random(m.values, seed);
  }
  auto client = Client::connect(server, options);
  PutOptions po;
  po.evictable = args.evictable;
  po.label = args.label;
  auto r = client->put(m.rows, m.cols, m.values.data(), po);
  if (!r.ok()) {
    std::fprintf(stderr, "sgemm-client: %s\n", r.status().to_string().c_str());
    return 3;
  }
  if (args.json) {
    nlohmann::json j = {{"handle", r->handle},       {"rows", m.rows},       {"cols", m.cols}, {"bytes", r->bytes},
                        {"placement", r->placement}, {"wall_ms", r->wall_ms}};
    if (args.file.empty()) j["seed"] = seed;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%s\n", r->handle.c_str());
    std::fprintf(stderr, "put %lldx%lld (%lld bytes) in %.3f ms: %s%s\n", (long long)m.rows, (long long)m.cols,
                 (long long)r->bytes, r->wall_ms, r->placement.c_str(),
                 args.file.empty() ? (", random values, seed " + std::to_string(seed)).c_str() : "");
  }
  return 0;
}

int rm_command(const std::string& server, const ClientOptions& options, const std::string& handle) {
  auto r = Client::connect(server, options)->remove(handle);
  if (!r.ok()) {
    std::fprintf(stderr, "sgemm-client: %s\n", r.status().to_string().c_str());
    return 3;
  }
  if (*r > 0) std::fprintf(stderr, "deleted; %d request(s) still using it free it when they end\n", *r);
  return 0;
}

int ls_command(const std::string& server, const ClientOptions& options, bool json) {
  auto r = Client::connect(server, options)->list();
  if (!r.ok()) {
    std::fprintf(stderr, "sgemm-client: %s\n", r.status().to_string().c_str());
    return 3;
  }
  auto where = [](const MatrixInfo& m) {
    std::string out;
    for (const auto& p : m.pieces) {
      if (!out.empty()) out += ",";
      out += (p.device < 0 ? std::string("host") : "gpu" + std::to_string(p.device)) + ":" +
             std::to_string(p.row_begin) + "-" + std::to_string(p.row_end);
    }
    return out;
  };
  if (json) {
    nlohmann::json j = {{"budget_bytes", r->budget_bytes}, {"bytes_in_use", r->bytes_in_use}};
    auto& ms = j["matrices"] = nlohmann::json::array();
    for (const auto& m : r->matrices)
      ms.push_back({{"handle", m.handle},
                    {"rows", m.rows},
                    {"cols", m.cols},
                    {"bytes", m.bytes},
                    {"where", where(m)},
                    {"idle_s", m.idle_s},
                    {"evictable", m.evictable},
                    {"owner", m.owner},
                    {"label", m.label},
                    {"requests_using", m.requests_using},
                    {"uses", m.uses}});
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("%-32s %13s %12s %-9s %6s %8s %5s  %-30s %s\n", "handle", "shape", "bytes", "evictable", "using",
              "idle s", "uses", "where", "label");
  for (const auto& m : r->matrices) {
    const std::string shape = std::to_string(m.rows) + "x" + std::to_string(m.cols);
    std::printf("%-32s %13s %12lld %-9s %6d %8.1f %5lld  %-30s %s\n", m.handle.c_str(), shape.c_str(),
                (long long)m.bytes, m.evictable ? "yes" : "no", m.requests_using, m.idle_s, (long long)m.uses,
                where(m).c_str(), m.label.c_str());
  }
  std::printf("budget %lld bytes per location (--resident-bytes); %lld in use on the server\n",
              (long long)r->budget_bytes, (long long)r->bytes_in_use);
  return 0;
}

}  // namespace sgemm::cli
