#include "tests/kernels/kernel_decisions.h"

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "common/kernel_registry.h"
#include "kernels/gemm_args.h"
#include "server/planner/kernel_choice.h"

namespace sgemm {
namespace {

// Fake, never dereferenced device addresses: 16-byte aligned, and 4 bytes off.
const float* const kA = reinterpret_cast<const float*>(uintptr_t{0x10000});
const float* const kB = reinterpret_cast<const float*>(uintptr_t{0x20000});
float* const kC = reinterpret_cast<float*>(uintptr_t{0x30000});

int64_t round_up4(int64_t v) { return (v + 3) / 4 * 4; }

GemmArgs layout_args(const GemmShape& s, float beta, const float* a, int64_t lda) {
  GemmArgs g = dense_gemm_args(s, 1.0f, a, kB, beta, kC);
  g.lda = lda;
  return g;
}

// The concrete row a kernel family runs for `args` on a GPU of `sm_count` SMs: the
// registry's choice, as the launchers and the backends' kernel_name() ask it.
std::string row_name(KernelKind kind, const GemmArgs& args, int sm_count) {
  return select_kernel_row_of(kind, args.shape, kernel_layout(args), sm_count).name();
}

// The planner's one choice (select_kernel_row) for `args`' shape and layout.
std::string selected_row(const GemmArgs& args, Precision p, int sm_count, const std::vector<KernelKind>& available) {
  KernelQuery q;
  q.shape = args.shape;
  q.product = args.shape;
  q.precision = p;
  q.available = available;
  q.sm_count = sm_count;
  q.beta = args.beta;
  q.layout = kernel_layout(args);
  StatusOr<KernelRowSelection> sel = select_kernel_row(q);
  if (!sel.ok()) return "error:" + std::string(status_code_name(sel.status().code()));
  return sel->pick.name();
}

}  // namespace

std::vector<int64_t> decision_grid_mn() {
  return {1,    2,    3,    7,    16,   31,   32,   33,   63,   64,   65,   96,    97,    127,   128,
          129,  192,  255,  256,  257,  384,  511,  512,  513,  768,  777,  1023,  1024,  1025,  1536,
          2047, 2048, 2049, 2560, 3000, 4095, 4096, 5120, 6000, 8191, 8192, 12288, 16384, 32768, 65536};
}

std::vector<int64_t> decision_grid_k() {
  return {1,    3,    16,   31,   64,   127,  255,  256,  257,   333,   512,   999,   1000,  1024,
          2047, 2048, 2049, 3000, 4096, 8191, 8192, 8193, 16384, 24576, 32768, 65536, 65537, 131072};
}

std::vector<int> decision_grid_sm_counts() { return {132, 114, 78}; }

std::string kernel_decisions_header() {
  return "#m\tn\tk\tsm\tbeta\tfp32\tfp32-ffma\ttf32\tfp32x3\tfp32@no-fp32x3\tfp32x3@lda=k\tfp32x3@a+4\tpingpong";
}

std::string kernel_decision_line(const GemmShape& s, int sm_count, float beta) {
  const std::vector<KernelKind> all = {KernelKind::kPingpong, KernelKind::kCublas, KernelKind::kTf32,
                                       KernelKind::kFp32x3};
  const std::vector<KernelKind> no_x3 = {KernelKind::kPingpong, KernelKind::kCublas, KernelKind::kTf32};
  const GemmArgs engine = layout_args(s, beta, kA, round_up4(s.k));
  std::string line = std::to_string(s.m) + '\t' + std::to_string(s.n) + '\t' + std::to_string(s.k) + '\t' +
                     std::to_string(sm_count) + '\t' + (beta == 0.0f ? "0" : "1");
  for (Precision p : {Precision::kFp32, Precision::kFp32Ffma, Precision::kTf32, Precision::kFp32x3})
    line += '\t' + selected_row(engine, p, sm_count, all);
  line += '\t' + selected_row(engine, Precision::kFp32, sm_count, no_x3);
  line += '\t' + row_name(KernelKind::kFp32x3, layout_args(s, beta, kA, s.k), sm_count);
  line += '\t' + row_name(KernelKind::kFp32x3, layout_args(s, beta, kA + 1, round_up4(s.k)), sm_count);
  line += '\t' + row_name(KernelKind::kPingpong, engine, sm_count);
  return line;
}

void for_each_kernel_decision(const std::function<void(const std::string& line)>& emit) {
  emit(kernel_decisions_header());
  const std::vector<int64_t> mn = decision_grid_mn(), ks = decision_grid_k();
  const std::vector<int> sms = decision_grid_sm_counts();
  // Neighbouring lines differ in one field, so the record compresses well.
  for (int64_t m : mn)
    for (int64_t n : mn)
      for (int64_t k : ks)
        for (int sm : sms)
          for (float beta : {0.0f, 1.0f}) emit(kernel_decision_line({m, n, k}, sm, beta));
}

namespace {

// The first field of a line that names a row (m, n, k, sm, beta come first).
constexpr int kFirstRowField = 5;

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (;;) {
    const std::size_t tab = line.find('\t', start);
    out.push_back(line.substr(start, tab - start));
    if (tab == std::string::npos) return out;
    start = tab + 1;
  }
}

}  // namespace

std::string encode_kernel_decisions(const std::vector<std::string>& lines) {
  std::unordered_map<std::string, int> ids;
  std::string names, body;
  for (const std::string& line : lines) {
    if (line.empty() || line[0] == '#') {
      body += line + '\n';
      continue;
    }
    const std::vector<std::string> fields = split_tabs(line);
    for (std::size_t i = 0; i < fields.size(); ++i) {
      if (i > 0) body += '\t';
      if (int(i) < kFirstRowField) {
        body += fields[i];
        continue;
      }
      auto [it, added] = ids.try_emplace(fields[i], int(ids.size()));
      if (added) names += '@' + std::to_string(it->second) + '\t' + fields[i] + '\n';
      body += std::to_string(it->second);
    }
    body += '\n';
  }
  return names + body;
}

bool decode_kernel_decisions(const std::string& record, std::vector<std::string>* lines, std::string* error) {
  std::vector<std::string> names;
  std::istringstream in(record);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line[0] == '@') {
      const std::vector<std::string> f = split_tabs(line);
      if (f.size() != 2 || f[0] != '@' + std::to_string(names.size())) {
        *error = "bad row-name line: " + line;
        return false;
      }
      names.push_back(f[1]);
      continue;
    }
    if (line.empty() || line[0] == '#') {
      lines->push_back(line);
      continue;
    }
    std::vector<std::string> f = split_tabs(line);
    std::string out;
    for (std::size_t i = 0; i < f.size(); ++i) {
      if (i > 0) out += '\t';
      if (int(i) < kFirstRowField) {
        out += f[i];
        continue;
      }
      std::size_t used = 0;
      int id = -1;
      try {
        id = std::stoi(f[i], &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != f[i].size() || id < 0 || id >= int(names.size())) {
        *error = "bad row id '" + f[i] + "' in: " + line;
        return false;
      }
      out += names[std::size_t(id)];
    }
    lines->push_back(std::move(out));
  }
  return true;
}

}  // namespace sgemm
