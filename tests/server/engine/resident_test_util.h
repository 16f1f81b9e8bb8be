// Resident matrices for the CUDA engine suites: put a host matrix into the
// engine's store (as PutMatrix does) and pin it (as a request does).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>

#include "server/engine/engine.h"

namespace sgemm::testing {

// Puts rows x cols floats from `data` and returns a lease on the new matrix.
inline ResidentStore::Lease put_resident(Engine& e, const float* data, int64_t rows, int64_t cols,
                                         bool evictable = false) {
  const int64_t bytes = rows * cols * int64_t(sizeof(float));
  auto reserved = e.reserve_resident(bytes, "test put");
  EXPECT_TRUE(reserved.ok()) << reserved.status().to_string();
  if (!reserved.ok()) return {};
  auto host = e.host_allocator().allocate(std::size_t(bytes));
  EXPECT_TRUE(host.ok());
  if (!host.ok()) return {};
  std::memcpy(host->data(), data, std::size_t(bytes));
  auto made =
      e.make_resident(std::make_shared<HostBuffer>(std::move(host).value()), rows, cols, std::move(reserved).value());
  EXPECT_TRUE(made.ok()) << made.status().to_string();
  if (!made.ok()) return {};
  auto m = e.resident_store()->add("", "test", rows, cols, evictable, std::move(made).value());
  auto lease = e.resident_store()->acquire(m->handle, "");
  EXPECT_TRUE(lease.ok());
  return lease.ok() ? std::move(lease).value() : ResidentStore::Lease{};
}

inline Layout layout_of(const ResidentStore::Lease& l) {
  const auto d = l->data();
  return d ? d->layout() : Layout{};
}

}  // namespace sgemm::testing
