// A base for the fake engines of service and cluster tests: host memory needs
// no locking, no resident matrices, no cost estimate. A fake overrides the
// abilities its test is about; production engines answer each one themselves.
#pragma once

#include <cstdint>

#include "server/engine/engine.h"

namespace sgemm::testing {

class FakeEngineBase : public Engine {
 public:
  double estimate_ms(const GemmJob& /*job*/) const override { return -1; }
  int64_t max_leading_dimension() const override { return INT32_MAX; }
  Status register_host_memory(void* /*data*/, std::size_t /*bytes*/) override { return Status::Ok(); }
  Status unregister_host_memory(void* /*data*/) override { return Status::Ok(); }
  ResidentStore* resident_store() override { return nullptr; }
  StatusOr<std::shared_ptr<ResidentData>> make_resident(std::shared_ptr<HostBuffer> /*host*/, int64_t /*rows*/,
                                                        int64_t /*cols*/, ResidentBytes /*bytes*/) override {
    return FailedPrecondition("this fake engine keeps no resident matrices");
  }
  DeviceMemoryAccess* device_memory() override { return nullptr; }
};

}  // namespace sgemm::testing
