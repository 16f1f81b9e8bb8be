// Links sgemm::client from an installed tree and runs it: a call to a port
// nobody listens on must come back as UNAVAILABLE (the channel, protobuf and
// the status translation all work), and a .npy round trip must hold.
#include <cstdio>

#include "client/matrix_files.h"
#include "client/sgemm_client.h"

int main() {
  auto client = sgemm::Client::connect("127.0.0.1:1");
  auto info = client->info(std::chrono::milliseconds(2000));
  if (info.ok() || info.status().code() != sgemm::StatusCode::kUnavailable) {
    std::fprintf(stderr, "consumer: expected UNAVAILABLE, got %s\n",
                 info.ok() ? "OK" : info.status().to_string().c_str());
    return 1;
  }
  const float v[2] = {1.5f, -2.0f};
  auto m = sgemm::parse_npy(sgemm::encode_npy(v, 1, 2));
  if (!m.ok() || m->values[1] != -2.0f) return 1;
  std::printf("consumer: sgemm::client linked and ran (%s)\n", info.status().to_string().c_str());
  return 0;
}
