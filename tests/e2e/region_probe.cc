// e2e-region-probe: what one Unix-socket caller can do with a region named
// `region`, for tests that run it as another user (caller_attacks_test.cc):
// it lists the regions, multiplies with the region as A and B, puts a matrix
// from it, and unregisters it, and prints one line per try:
//   list <regions it sees> <whether the named one is among them>
//   multiply|put|unregister <status code number> <message>
// Or, with --register, it creates and registers regions of its own of the
// given sizes, one after the other and all held until it exits, and prints
//   register <bytes> <status code number> <message>
// Usage: e2e-region-probe unix:PATH REGION | e2e-region-probe unix:PATH
// --register BYTES... Exit 0 once every try was made.
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "client/sgemm_client.h"
#include "sgemm/v1/sgemm.grpc.pb.h"

namespace {

// A region known by name only: the probe has no mapping of it.
class NamedOnly final : public sgemm::Region {
 public:
  explicit NamedOnly(std::string name) : name_(std::move(name)) {}
  const std::string& name() const override { return name_; }
  void* data() const override { return nullptr; }
  int64_t bytes() const override { return 0; }
  sgemm::StatusOr<int> unregister() override { return 0; }

 private:
  std::string name_;
};

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const char* usage = "usage: e2e-region-probe unix:PATH REGION | e2e-region-probe unix:PATH --register BYTES...\n";
  if (argc == 2 && std::string(argv[1]) == "--help") {
    std::printf("%s", usage);
    return 0;
  }
  if (argc >= 4 && std::string(argv[2]) == "--register") {
    sgemm::ClientOptions options;
    options.retry.max_attempts = 1;
    auto client = sgemm::Client::connect(argv[1], options);
    std::vector<std::unique_ptr<sgemm::Region>> held;  // registered until the probe exits
    for (int i = 3; i < argc; ++i) {
      auto r = client->create_region(std::stoll(argv[i]));
      std::printf("register %s %d %s\n", argv[i], int(r.status().code()), one_line(r.status().message()).c_str());
      if (r.ok()) held.push_back(std::move(*r));
    }
    return 0;
  }
  if (argc != 3) {
    std::fprintf(stderr, "%s", usage);
    return 2;
  }
  const std::string address = argv[1], region = argv[2];
  namespace v1 = ::sgemm::v1;
  auto stub = v1::Sgemm::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  {
    grpc::ClientContext ctx;
    v1::ListRegionsResponse resp;
    const grpc::Status st = stub->ListRegions(&ctx, v1::ListRegionsRequest(), &resp);
    bool seen = false;
    for (const auto& r : resp.regions()) seen = seen || r.name() == region || r.shm_name() == region;
    std::printf("list %d %d %d\n", int(st.error_code()), resp.regions_size(), int(seen));
  }
  sgemm::ClientOptions options;
  options.retry.max_attempts = 1;
  auto client = sgemm::Client::connect(address, options);
  const NamedOnly r(region);
  auto product = client->multiply_regions({4, 4, 4}, sgemm::RegionMatrix{&r, 0, 0}, sgemm::RegionMatrix{&r, 64, 0},
                                          std::nullopt, std::nullopt, {});
  std::printf("multiply %d %s\n", int(product.status().code()), one_line(product.status().message()).c_str());
  auto put = client->put_region(4, 4, sgemm::RegionMatrix{&r, 0, 0});
  std::printf("put %d %s\n", int(put.status().code()), one_line(put.status().message()).c_str());
  {
    grpc::ClientContext ctx;
    v1::UnregisterRegionRequest req;
    req.set_name(region);
    v1::UnregisterRegionResponse resp;
    const grpc::Status st = stub->UnregisterRegion(&ctx, req, &resp);
    std::printf("unregister %d %s\n", int(st.error_code()), one_line(st.error_message()).c_str());
  }
  return 0;
}
