// sgemm-client submit --batch N / --group FILE (docs/clients.md): many products
// in one request (Client::multiply_batch), each verified against the fp64
// reference with --verify. Also the helpers sgemm-load and the tests share:
// reading a group file and checking one product of a batch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "client/sgemm_client.h"
#include "common/reference_gemm.h"

namespace sgemm::cli {

// Shapes "m n k", one product per line; blank lines and lines starting with
// '#' are skipped. INVALID_ARGUMENT naming the file and line for anything
// else (fewer or more than three integers, one < 1); NOT_FOUND for no file.
StatusOr<std::vector<GemmShape>> read_group_file(const std::string& path);

// Checks product `i` of a batch against the fp64 reference alpha * op(A_i) *
// op(B_i) + beta * C0_i, on rows_to_verify()'s rows of its C (every row when
// small). `a`, `b`, `c0` (null: no input C) and `c` are the concatenated
// operands and result, laid out as `layout` says; op_a / op_b as sent.
VerifyResult verify_batch_product(const BatchProducts& batch, const BatchLayout& layout, std::size_t i, float alpha,
                                  float beta, Op op_a, Op op_b, const float* a, const float* b, const float* c0,
                                  const float* c, uint64_t seed);

struct BatchArgs {
  int64_t count = 0;       // --batch: products of `shape`
  std::string group_file;  // --group: shapes, one per line
  GemmShape shape{};       // --size / --m --n --k
  bool fail_fast = false, check_finite = false;
  bool with_c = false;  // send random C's (beta applies)
  uint64_t seed = 0;    // 0: fresh
  int repeat = 1;
  bool verify = false, json = false;
};

// Runs the batch `repeat` times with `options` (alpha, beta, ops, precision,
// kernel, split, timeout). Exit codes as submit's: 0 done; 1 --verify found a
// wrong product; 2 bad arguments; 3 the request or a product failed.
int batch_command(Client& client, const BatchArgs& args, MultiplyOptions options);

}  // namespace sgemm::cli
