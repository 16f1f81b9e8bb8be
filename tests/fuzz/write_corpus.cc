// Writes the fuzzers' seed corpus (tests/fuzz/corpus/): the messages the e2e
// suites send, encoded as the client library encodes them.
//   codec/      one MultiplyRequest each (with the fuzzer's control byte first):
//               the headers of tests/e2e/multiply_test.cc's shapes and options,
//               chunks of A, B and C, and tests/e2e/bad_input_test.cc's bad
//               messages (empty, two kinds, unknown enums, odd lengths, ...)
//   assembly/   whole streams (2-byte length, message; ...): header then chunks,
//               for the e2e shapes that fit the fuzzer's limits, in the
//               client's order and interleaved, plus the bad streams.
//
//   build-fuzz/bin/sgemm-fuzz-write-corpus tests/fuzz/corpus
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "sgemm/v1/sgemm.pb.h"

namespace v1 = ::sgemm::v1;
namespace fs = std::filesystem;

namespace {

v1::MultiplyRequest header(int64_t m, int64_t n, int64_t k, bool has_c = false, float alpha = 1, float beta = 0) {
  v1::MultiplyRequest r;
  auto* h = r.mutable_header();
  h->set_m(m);
  h->set_n(n);
  h->set_k(k);
  if (alpha != 1) h->set_alpha(alpha);
  if (beta != 0) h->set_beta(beta);
  h->set_has_c(has_c);
  return r;
}

v1::MultiplyRequest chunk(v1::Matrix m, int64_t offset, int64_t count, float seed = 0.5f) {
  v1::MultiplyRequest r;
  auto* c = r.mutable_chunk();
  c->set_matrix(m);
  c->set_offset(offset);
  std::vector<float> v(static_cast<std::size_t>(count));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = seed + float(i % 7) * 0.25f;
  c->set_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4));
  return r;
}

// The stream the client library sends: header, A, B (then C), chunk_elems per chunk.
std::vector<std::string> stream(int64_t m, int64_t n, int64_t k, bool has_c, int64_t chunk_elems, bool interleave) {
  std::vector<std::string> out{header(m, n, k, has_c, 1.5f, has_c ? 0.25f : 0).SerializeAsString()};
  const int64_t sizes[3] = {m * k, k * n, m * n};
  const v1::Matrix ids[3] = {v1::MATRIX_A, v1::MATRIX_B, v1::MATRIX_C};
  const int count = has_c ? 3 : 2;
  int64_t sent[3] = {0, 0, 0};
  for (bool more = true; more;) {
    more = false;
    for (int i = 0; i < count; ++i) {
      while (sent[i] < sizes[i]) {
        const int64_t n_el = std::min(chunk_elems, sizes[i] - sent[i]);
        out.push_back(chunk(ids[i], sent[i], n_el, float(i)).SerializeAsString());
        sent[i] += n_el;
        if (interleave) break;
      }
      more = more || sent[i] < sizes[i];
    }
  }
  return out;
}

void write(const fs::path& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

std::string framed(const std::vector<std::string>& msgs) {
  std::string s;
  for (const auto& m : msgs) {
    const std::size_t n = std::min<std::size_t>(m.size(), 0xffff);
    s.push_back(char(n & 0xff));
    s.push_back(char(n >> 8));
    s.append(m, 0, n);
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  const fs::path root = argv[1];
  fs::create_directories(root / "codec");
  fs::create_directories(root / "assembly");

  // Single messages (codec).
  std::vector<std::pair<std::string, std::string>> msgs;
  const int64_t shapes[][3] = {{1, 1, 1},    {17, 33, 65},   {1000, 1, 1000},   {513, 1025, 257}, {1, 1000, 1},
                               {64, 64, 64}, {129, 77, 301}, {45, 23, 31},      {8, 8, 8},        {257, 131, 1029},
                               {31, 29, 23}, {37, 29, 41},   {2048, 2048, 2048}};
  for (const auto& s : shapes) {
    const std::string name = std::to_string(s[0]) + "x" + std::to_string(s[1]) + "x" + std::to_string(s[2]);
    msgs.emplace_back("header-" + name, header(s[0], s[1], s[2]).SerializeAsString());
    msgs.emplace_back("header-c-" + name, header(s[0], s[1], s[2], true, 1.5f, 0.25f).SerializeAsString());
  }
  {
    auto h = header(64, 64, 64);
    h.mutable_header()->set_kernel(v1::KERNEL_CUBLAS);
    h.mutable_header()->set_split(v1::SPLIT_K);
    h.mutable_header()->set_precision(v1::PRECISION_FP32X3);
    msgs.emplace_back("header-options", h.SerializeAsString());
    h.mutable_header()->set_kernel(static_cast<v1::Kernel>(99));
    msgs.emplace_back("bad-header-kernel", h.SerializeAsString());
  }
  msgs.emplace_back("chunk-a", chunk(v1::MATRIX_A, 0, 64).SerializeAsString());
  msgs.emplace_back("chunk-b-offset", chunk(v1::MATRIX_B, 4096, 256).SerializeAsString());
  msgs.emplace_back("chunk-c", chunk(v1::MATRIX_C, 8, 3).SerializeAsString());
  msgs.emplace_back("bad-empty", v1::MultiplyRequest().SerializeAsString());
  msgs.emplace_back("bad-chunk-matrix-unspecified", chunk(v1::MATRIX_UNSPECIFIED, 0, 4).SerializeAsString());
  msgs.emplace_back("bad-chunk-matrix-99", chunk(static_cast<v1::Matrix>(99), 0, 4).SerializeAsString());
  msgs.emplace_back("bad-chunk-negative-offset", chunk(v1::MATRIX_A, -4, 4).SerializeAsString());
  {
    auto c = chunk(v1::MATRIX_A, 0, 4);
    c.mutable_chunk()->mutable_data()->append("\x01\x02", 2);  // not a whole number of floats
    msgs.emplace_back("bad-chunk-odd-bytes", c.SerializeAsString());
  }
  // Both kinds at once, fields repeated, out of order: protobuf's path.
  msgs.emplace_back("both-kinds", header(2, 2, 2).SerializeAsString() + chunk(v1::MATRIX_A, 0, 4).SerializeAsString());
  msgs.emplace_back("two-chunks",
                    chunk(v1::MATRIX_A, 0, 2).SerializeAsString() + chunk(v1::MATRIX_B, 2, 2).SerializeAsString());
  msgs.emplace_back("garbage", std::string("\xff\xff\xff\xff\x0f not a message", 19));
  for (const auto& [name, bytes] : msgs) {
    write(root / "codec" / (name + ".bin"), std::string(1, '\0') + bytes);               // one slice
    write(root / "codec" / (name + "-sliced.bin"), std::string(1, char(0x1b)) + bytes);  // four slices, 3-byte cuts
  }

  // Streams (assembly): the e2e shapes within the fuzzer's limits.
  const struct {
    int64_t m, n, k;
    bool has_c;
    int64_t chunk;
    bool interleave;
  } streams[] = {{1, 1, 1, false, 1, false},      {8, 8, 8, false, 16, false},     {8, 8, 8, true, 7, true},
                 {17, 33, 65, false, 256, false}, {45, 23, 31, true, 100, true},   {31, 29, 23, false, 1024, false},
                 {37, 29, 41, true, 333, true},   {1, 1000, 1, false, 1000, false}};
  for (const auto& s : streams) {
    const std::string name = std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) +
                             (s.has_c ? "-c" : "") + "-chunk" + std::to_string(s.chunk) +
                             (s.interleave ? "-interleaved" : "");
    write(root / "assembly" / (name + ".bin"), framed(stream(s.m, s.n, s.k, s.has_c, s.chunk, s.interleave)));
  }
  write(root / "assembly" / "bad-chunk-first.bin",
        framed({chunk(v1::MATRIX_A, 0, 4).SerializeAsString(), header(2, 2, 2).SerializeAsString()}));
  write(root / "assembly" / "bad-two-headers.bin",
        framed({header(2, 2, 2).SerializeAsString(), header(2, 2, 2).SerializeAsString()}));
  write(root / "assembly" / "bad-gap.bin",
        framed({header(4, 4, 4).SerializeAsString(), chunk(v1::MATRIX_A, 0, 4).SerializeAsString(),
                chunk(v1::MATRIX_A, 8, 4).SerializeAsString()}));
  write(root / "assembly" / "bad-c-undeclared.bin",
        framed({header(2, 2, 2).SerializeAsString(), chunk(v1::MATRIX_C, 0, 4).SerializeAsString()}));
  write(root / "assembly" / "bad-overrun.bin",
        framed({header(2, 2, 2).SerializeAsString(), chunk(v1::MATRIX_A, 0, 8).SerializeAsString()}));
  write(root / "assembly" / "bad-incomplete.bin",
        framed({header(4, 4, 4).SerializeAsString(), chunk(v1::MATRIX_A, 0, 16).SerializeAsString()}));
  std::printf("corpus written to %s\n", root.c_str());
  return 0;
}
