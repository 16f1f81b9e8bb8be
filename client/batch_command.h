// sgemm-client submit --batch N / --group FILE (docs/clients.md): many products
// in one request (Client::multiply_batch), each verified against the fp64
// reference with --verify. The operands are random and sent on the stream, or
// written into one shared-memory region of this client's (the server's Unix
// socket: Client::multiply_batch_regions, C computed in place); a strided
// batch's A or B may instead be a resident matrix every product reads
// (--a-handle / --b-handle). Also the helpers sgemm-load and the tests share:
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
  uint64_t seed = 0;    // 0: fresh; A from seed, B from seed + 1, C from seed + 2 (fill_random)
  int repeat = 1;
  bool verify = false, json = false;
  // --a-handle / --b-handle: a resident matrix (sgemm-client put), stored as
  // one product's A (B) under the ops, that every product of a strided batch
  // reads; not generated, not sent. "" = random operands.
  std::string a_handle, b_handle;
  // The operands through one shared-memory region of this client's (the
  // server's Unix socket; the transport resolved to shm): A, B and C written
  // into it once, C computed in place, no matrix byte on the stream.
  bool regions = false;
  // --out: the concatenated C of the last run (batch_layout's order), .npy
  // when the name ends in .npy, else raw fp32: a strided batch as a
  // (count * m) x n matrix (product i is rows i*m to (i+1)*m - 1), a group as
  // 1 x (every product's m * n). A product that failed is zeros. "" = none.
  std::string out_file;
};

// INVALID_ARGUMENT naming the flags for combinations that cannot work: a
// handle with --group (a group's shapes differ), with regions (the server
// takes regions or handles in one request, not both) or with --verify (the
// resident values are not here).
Status check_batch_args(const BatchArgs& args);

// Runs the batch `repeat` times with `options` (alpha, beta, ops, precision,
// kernel, split, timeout). Exit codes as submit's: 0 done; 1 --verify found a
// wrong product; 2 bad arguments; 3 the request or a product failed, or --out
// could not be written.
int batch_command(Client& client, const BatchArgs& args, MultiplyOptions options);

}  // namespace sgemm::cli
