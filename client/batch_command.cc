#include "client/batch_command.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>

#include "client/matrix_files.h"

namespace sgemm::cli {
namespace {

// The cols x rows transpose of a rows x cols row-major matrix.
std::vector<float> transposed(const float* x, int64_t rows, int64_t cols) {
  std::vector<float> t(std::size_t(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) t[std::size_t(j * rows + i)] = x[i * cols + j];
  return t;
}

// Where the operands live on this side: vectors, or one shared-memory region
// holding A, B and C (each at a 64-byte boundary). A shared operand (a
// handle) has no storage here: its pointer is null.
struct BatchOperands {
  std::vector<float> a_vec, b_vec, c_vec;
  std::unique_ptr<Region> region;
  int64_t a_off = 0, b_off = 0, c_off = 0;  // bytes into the region
  float* a = nullptr;
  float* b = nullptr;
  float* c = nullptr;  // the result (and, in a region, the input C before each run)
};

StatusOr<BatchOperands> make_operands(Client& client, const BatchLayout& l, const BatchArgs& args) {
  BatchOperands x;
  const int64_t a_n = args.a_handle.empty() ? l.a_elements : 0, b_n = args.b_handle.empty() ? l.b_elements : 0;
  if (args.regions) {
    auto align = [](int64_t bytes) { return (bytes + 63) / 64 * 64; };
    x.b_off = align(4 * a_n);
    x.c_off = x.b_off + align(4 * b_n);
    SGEMM_ASSIGN_OR_RETURN(x.region, client.create_region(x.c_off + 4 * l.c_elements));
    char* base = static_cast<char*>(x.region->data());
    x.a = reinterpret_cast<float*>(base + x.a_off);
    x.b = reinterpret_cast<float*>(base + x.b_off);
    x.c = reinterpret_cast<float*>(base + x.c_off);
  } else {
    x.a_vec.resize(std::size_t(a_n));
    x.b_vec.resize(std::size_t(b_n));
    x.c_vec.resize(std::size_t(l.c_elements));
    x.a = x.a_vec.data();
    x.b = x.b_vec.data();
    x.c = x.c_vec.data();
  }
  if (a_n == 0) x.a = nullptr;
  if (b_n == 0) x.b = nullptr;
  return x;
}

// C of a strided batch as (count * m) x n, of a group as one row (BatchArgs::out_file).
Status write_batch_c(const std::string& path, const BatchProducts& batch, const BatchLayout& l, const float* c) {
  const int64_t rows = batch.group.empty() ? batch.count * batch.shape.m : 1;
  const int64_t cols = batch.group.empty() ? batch.shape.n : l.c_elements;
  return write_matrix_file(path, c, rows, cols, matrix_format_for_path(path));
}

}  // namespace

Status check_batch_args(const BatchArgs& args) {
  const bool handle = !args.a_handle.empty() || !args.b_handle.empty();
  const char* which = !args.a_handle.empty() && !args.b_handle.empty() ? "--a-handle and --b-handle"
                      : !args.a_handle.empty()                         ? "--a-handle"
                                                                       : "--b-handle";
  if (handle && !args.group_file.empty())
    return InvalidArgument(std::string(which) +
                           " with --group: a resident A or B is one matrix every product reads, so it needs one "
                           "shape for every product: --batch N");
  if (handle && args.regions)
    return InvalidArgument(std::string(which) +
                           " with --transport shm: the server takes a batch's operands from shared-memory regions or "
                           "a resident matrix with the others sent on the stream, not both; use --transport grpc "
                           "(auto does) with a handle");
  if (handle && args.verify)
    return InvalidArgument(std::string("--verify needs every operand's values here: not with ") + which +
                           " (write C with --out and check it against the matrix you put)");
  return Status::Ok();
}

StatusOr<std::vector<GemmShape>> read_group_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound("--group " + path + ": cannot open the file");
  std::vector<GemmShape> shapes;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const auto first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    std::istringstream fields(line);
    long long m = 0, n = 0, k = 0;
    std::string extra;
    if (!(fields >> m >> n >> k) || (fields >> extra) || m < 1 || n < 1 || k < 1)
      return InvalidArgument("--group " + path + " line " + std::to_string(number) +
                             ": want three integers 'm n k', each >= 1; got '" + line + "'");
    shapes.push_back({m, n, k});
  }
  if (shapes.empty()) return InvalidArgument("--group " + path + ": no shape in the file");
  return shapes;
}

VerifyResult verify_batch_product(const BatchProducts& batch, const BatchLayout& layout, std::size_t i, float alpha,
                                  float beta, Op op_a, Op op_b, const float* a, const float* b, const float* c0,
                                  const float* c, uint64_t seed) {
  const GemmShape s = batch.group.empty() ? batch.shape : batch.group[i];
  const float* ai = a + layout.a_offset[i];
  const float* bi = b + layout.b_offset[i];
  // The reference multiplies op(A) and op(B): transposed copies of what was sent under op = t.
  const std::vector<float> ta = op_a == Op::kT ? transposed(ai, s.k, s.m) : std::vector<float>{};
  const std::vector<float> tb = op_b == Op::kT ? transposed(bi, s.n, s.k) : std::vector<float>{};
  return verify_gemm(s.m, s.n, s.k, alpha, ta.empty() ? ai : ta.data(), tb.empty() ? bi : tb.data(), beta,
                     c0 ? c0 + layout.c_offset[i] : nullptr, c + layout.c_offset[i],
                     rows_to_verify(s.m, s.n, s.k, seed + i));
}

int batch_command(Client& client, const BatchArgs& args, MultiplyOptions options) {
  if (Status st = check_batch_args(args); !st.ok()) {
    std::fprintf(stderr, "sgemm-client: %s\n", st.message().c_str());
    return 2;
  }
  BatchProducts batch;
  batch.fail_fast = args.fail_fast;
  batch.check_finite = args.check_finite;
  if (!args.group_file.empty()) {
    auto shapes = read_group_file(args.group_file);
    if (!shapes.ok()) {
      std::fprintf(stderr, "sgemm-client: %s\n", shapes.status().to_string().c_str());
      return 2;
    }
    batch.group = std::move(shapes).value();
  } else {
    if (args.shape.m < 1 || args.shape.n < 1 || args.shape.k < 1) {
      std::fprintf(stderr, "sgemm-client: --batch needs the products' shape: --size N or all of --m, --n, --k\n");
      return 2;
    }
    batch.shape = args.shape;
    batch.count = args.count;
  }
  const BatchLayout layout = batch_layout(batch);
  const uint64_t seed = args.seed ? args.seed : std::random_device{}() | (uint64_t(std::random_device{}()) << 32);
  options.a_handle = args.a_handle;
  options.b_handle = args.b_handle;
  // A and B generated where they are sent from (a region, or the vectors the stream reads);
  // C comes back into one buffer every run reuses (in a region: computed in place).
  auto made = make_operands(client, layout, args);
  if (!made.ok()) {
    std::fprintf(stderr, "sgemm-client: %s\n", made.status().to_string().c_str());
    return 3;
  }
  BatchOperands& x = *made;
  if (x.a) fill_random(x.a, layout.a_elements, seed);
  if (x.b) fill_random(x.b, layout.b_elements, seed + 1);
  std::vector<float> c0;
  if (args.with_c) {
    c0.resize(std::size_t(layout.c_elements));
    fill_random(c0, seed + 2);
  }
  const float* a = x.a;
  const float* b = x.b;
  float* c = x.c;
  if (!args.regions) options.c_out = c;
  const char* transport = args.regions ? "shm" : "grpc";
  const std::size_t count = layout.c_offset.size();
  const double flops = [&] {
    double f = 0;
    for (const GemmShape& s : batch.shapes()) f += s.flops();
    return f;
  }();
  std::vector<double> walls;
  int exit_code = 0;
  for (int rep = 0; rep < args.repeat; ++rep) {
    StatusOr<BatchResult> r = Internal("not run");
    if (args.regions) {
      // C in place: each run starts from the input C again.
      if (args.with_c) std::memcpy(c, c0.data(), c0.size() * sizeof(float));
      const RegionMatrix cm{x.region.get(), x.c_off, 0};
      r = client.multiply_batch_regions(batch, {x.region.get(), x.a_off, 0}, {x.region.get(), x.b_off, 0},
                                        args.with_c ? std::optional<RegionMatrix>(cm) : std::nullopt, cm, options);
    } else {
      r = client.multiply_batch(batch, a, b, args.with_c ? c0.data() : nullptr, options);
    }
    if (!r.ok()) {
      if (args.json)
        std::printf("%s\n",
                    nlohmann::json(
                        {{"products", count},
                         {"error", {{"code", status_code_name(r.status().code())}, {"message", r.status().message()}}}})
                        .dump()
                        .c_str());
      else
        std::fprintf(stderr, "sgemm-client: %s\n", r.status().to_string().c_str());
      return 3;
    }
    walls.push_back(r->wall_ms);
    nlohmann::json j = {{"kind", batch.group.empty() ? "batch" : "group"},
                        {"transport", transport},
                        {"products", count},
                        {"products_failed", r->products_failed},
                        {"backend", r->summary.backend},
                        {"kernel", r->summary.kernel},
                        {"precision", r->summary.precision},
                        {"plan", r->summary.plan_reason},
                        {"server_compute_ms", r->summary.compute_ms},
                        {"server_total_ms", r->summary.total_ms},
                        {"client_total_ms", r->wall_ms},
                        {"products_per_s", double(count) / (r->wall_ms / 1e3)},
                        {"gflops", flops / (r->wall_ms * 1e6)},
                        {"seed", seed}};
    if (!args.json) {
      std::printf("%s of %zu products: backend %s, kernel %s, precision %s, transport %s\n",
                  batch.group.empty() ? "strided batch" : "group", count, r->summary.backend.c_str(),
                  r->summary.kernel.c_str(), r->summary.precision.c_str(), transport);
      std::printf("plan: %s\n", r->summary.plan_reason.c_str());
      std::printf("server: compute %.3f ms, total %.3f ms; client %.3f ms: %.0f products/s, %.1f GFLOP/s\n",
                  r->summary.compute_ms, r->summary.total_ms, r->wall_ms, double(count) / (r->wall_ms / 1e3),
                  flops / (r->wall_ms * 1e6));
    }
    nlohmann::json failed = nlohmann::json::array();
    for (const ProductResult& p : r->products) {
      if (p.status.ok()) continue;
      failed.push_back(
          {{"index", p.index}, {"code", status_code_name(p.status.code())}, {"message", p.status.message()}});
      if (!args.json) std::printf("product %d: %s\n", p.index, p.status.to_string().c_str());
      exit_code = 3;
    }
    j["failed"] = failed;
    if (args.verify) {
      // tf32 is documented as less accurate (about 1e-4): it is held to 1e-2, the rest to fp32's tolerance.
      const double tolerance = options.precision == Precision::kTf32 ? 1e-2 : kSgemmTolerance;
      double worst = 0;
      int64_t wrong = 0, checked = 0;
      for (const ProductResult& p : r->products) {
        if (!p.status.ok()) continue;
        const VerifyResult v =
            verify_batch_product(batch, layout, std::size_t(p.index), options.alpha, options.beta, options.op_a,
                                 options.op_b, a, b, args.with_c ? c0.data() : nullptr, c, seed);
        worst = std::max(worst, v.max_rel_error);
        checked += v.checked;
        if (!v.passed(tolerance)) {
          ++wrong;
          if (!args.json)
            std::printf("verify: product %d FAILS: max relative error %.3e (row %lld, col %lld)\n", p.index,
                        v.max_rel_error, (long long)v.worst_row, (long long)v.worst_col);
        }
      }
      j["verify"] = {{"max_rel_error", worst},
                     {"elements_checked", checked},
                     {"products_wrong", wrong},
                     {"tolerance", tolerance},
                     {"passed", wrong == 0}};
      if (!args.json)
        std::printf(
            "verify: every computed product against the fp64 reference: max relative error %.3e over %lld "
            "elements (tolerance %.0e): %s\n",
            worst, (long long)checked, tolerance, wrong == 0 ? "PASS" : "FAIL");
      if (wrong > 0 && exit_code == 0) exit_code = 1;
    }
    if (!args.out_file.empty() && rep + 1 == args.repeat) {
      for (const ProductResult& p : r->products)  // a failed product's place holds no result
        if (!p.status.ok()) std::fill(c + p.c_offset, c + p.c_offset + p.c_elements, 0.0f);
      if (Status w = write_batch_c(args.out_file, batch, layout, c); !w.ok()) {
        std::fprintf(stderr, "sgemm-client: %s\n", w.to_string().c_str());
        return 3;
      }
      j["out"] = args.out_file;
      if (!args.json) std::printf("out: %s\n", args.out_file.c_str());
    }
    if (args.json) std::printf("%s\n", j.dump().c_str());
  }
  if (args.repeat > 1 && !args.json) {
    std::sort(walls.begin(), walls.end());
    std::printf("%d runs: client total min %.3f ms, median %.3f ms, max %.3f ms\n", args.repeat, walls.front(),
                walls[walls.size() / 2], walls.back());
  }
  return exit_code;
}

}  // namespace sgemm::cli
