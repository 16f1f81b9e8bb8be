// sgemm-client's resident-matrix commands (docs/resident.md): put, rm, ls.
// `submit --a-handle/--b-handle/--c-handle/--keep` lives with submit (main.cc).
#pragma once

#include <cstdint>
#include <string>

#include "client/sgemm_client.h"

namespace sgemm::cli {

struct PutArgs {
  std::string file;  // .npy or raw fp32 (raw needs rows and cols); "" = random values
  int64_t rows = 0, cols = 0;
  uint64_t seed = 0;  // random values: 0 = a fresh seed
  bool evictable = false;
  std::string label;
  bool json = false;
};

int put_command(const std::string& server, const ClientOptions& options, const PutArgs& args);
int rm_command(const std::string& server, const ClientOptions& options, const std::string& handle);
int ls_command(const std::string& server, const ClientOptions& options, bool json);

}  // namespace sgemm::cli
