// What the cluster control-plane tests share: waiting on an event with a
// deadline, a process's log lines, options with test timeouts, and a fixture
// with a coordinator on 127.0.0.1 (a real gRPC server over a FakePlane) that
// members join.
#pragma once

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "server/cluster/coordinator.h"
#include "server/cluster/member.h"
#include "tests/server/cluster/fake_plane.h"

namespace sgemm::testing {

// Whether p() holds within `limit`, polled every 5 ms.
template <typename Pred>
bool eventually(Pred p, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (p()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return p();
}

// Whether `coordinator`'s communicator is ready over `members` members within
// 10 s; current_view() starts forming it, as a request does.
inline bool cluster_ready(ClusterCoordinator& coordinator, int members) {
  return eventually([&] {
    StatusOr<ClusterView> v = coordinator.current_view();
    return v.ok() && v->members == members;
  });
}

// Log lines of one process, for waiting on an event by what it logged.
struct LogLines {
  std::mutex mu;
  std::vector<std::string> lines;  // guarded by mu
  std::function<void(std::string_view)> sink() {
    return [this](std::string_view l) {
      std::lock_guard lock(mu);
      lines.emplace_back(l);
    };
  }
  bool has(const std::string& text) { return !last_with(text).empty(); }
  // The last line holding `words` ("" if none).
  std::string last_with(const std::string& words) {
    std::lock_guard lock(mu);
    std::string found;
    for (const auto& l : lines)
      if (l.find(words) != std::string::npos) found = l;
    return found;
  }
  std::string all() {
    std::lock_guard lock(mu);
    std::string out;
    for (const auto& l : lines) out += l + "\n";
    return out;
  }
};

// Options with timeouts a test can wait out; logged into `lines` when given.
inline ClusterOptions test_cluster_options(std::string host, LogLines* lines = nullptr) {
  ClusterOptions o;
  o.host = std::move(host);
  o.connect_timeout_ms = 5000;
  o.job_timeout_ms = 10000;
  o.rejoin_interval_ms = 100;
  if (lines) o.log = lines->sink();
  return o;
}

// `coordinator` served on 127.0.0.1 (an ephemeral port, written to *port).
inline std::unique_ptr<grpc::Server> serve_coordinator(
    ClusterCoordinator& coordinator, int* port,
    std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials()) {
  grpc::ServerBuilder b;
  b.AddListeningPort("127.0.0.1:0", std::move(creds), port);
  b.RegisterService(&coordinator);
  return b.BuildAndStart();
}

// A coordinator with one fake GPU ("coordinator"), started by start(), and the
// members add_member() joins to it. TearDown stops the members, then the
// coordinator and its server, before the test's own members (its logs) go.
class ClusterFixture : public ::testing::Test {
 protected:
  void start(ClusterOptions o, std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials()) {
    root_plane_ = std::make_unique<FakePlane>(fabric_, 1, "coordinator");
    coord_ = std::make_unique<ClusterCoordinator>(*root_plane_, std::move(o));
    server_ = serve_coordinator(*coord_, &port_, std::move(creds));
    ASSERT_TRUE(server_);
    ASSERT_GT(port_, 0);
  }
  void TearDown() override {
    members_.clear();
    if (coord_) coord_->shutdown();
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server_.reset();
    coord_.reset();
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  // A member on a FakePlane of `gpus` GPUs named after o.host, joining the coordinator.
  FakePlane& add_member(const ClusterOptions& o, int gpus = 1) {
    planes_.push_back(std::make_unique<FakePlane>(fabric_, gpus, o.host));
    members_.push_back(std::make_unique<ClusterMember>(*planes_.back(), address(), o));
    members_.back()->start();
    return *planes_.back();
  }
  StatusOr<ClusterView> prepare() {
    MutexLock lock(coord_->job_mutex());
    return coord_->prepare();
  }

  FakeFabric fabric_;
  std::unique_ptr<FakePlane> root_plane_;
  std::unique_ptr<ClusterCoordinator> coord_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::vector<std::unique_ptr<FakePlane>> planes_;  // outlive the members
  std::vector<std::unique_ptr<ClusterMember>> members_;
};

}  // namespace sgemm::testing
