#include "server/devices/device_health.h"

#include <cstdlib>
#include <sstream>

namespace sgemm {

bool is_sticky_cuda_error(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
    case cudaErrorLaunchTimeout:
    case cudaErrorContextIsDestroyed:
    case cudaErrorDevicesUnavailable:
    case cudaErrorUnknown:
      return true;
    default:
      return false;
  }
}

bool DeviceHealth::healthy(int index) const {
  MutexLock lock(mu_);
  return healthy_[std::size_t(index)];
}

std::string DeviceHealth::reason(int index) const {
  MutexLock lock(mu_);
  return reasons_[std::size_t(index)];
}

int DeviceHealth::healthy_count() const {
  MutexLock lock(mu_);
  int n = 0;
  for (bool h : healthy_) n += h ? 1 : 0;
  return n;
}

bool DeviceHealth::mark_unhealthy(int index, std::string reason) {
  MutexLock lock(mu_);
  if (!healthy_[std::size_t(index)]) return false;
  healthy_[std::size_t(index)] = false;
  reasons_[std::size_t(index)] = std::move(reason);
  return true;
}

std::string FaultInjection::describe() const {
  std::string s;
  if (trap_device >= 0) s += "trap:" + std::to_string(trap_device);
  if (fail_device >= 0) s += std::string(s.empty() ? "" : ",") + "fail:" + std::to_string(fail_device);
  if (hang_collective) s += std::string(s.empty() ? "" : ",") + "hang-collective";
  return s;
}

StatusOr<FaultInjection> FaultInjection::parse(const std::string& text) {
  FaultInjection f;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    auto device = [&](const std::string& prefix, int* out) {
      if (item.rfind(prefix, 0) != 0) return false;
      const std::string n = item.substr(prefix.size());
      if (n.empty() || n.find_first_not_of("0123456789") != std::string::npos || n.size() > 3) return false;
      *out = std::atoi(n.c_str());
      return true;
    };
    if (item == "hang-collective") {
      f.hang_collective = true;
    } else if (!device("trap:", &f.trap_device) && !device("fail:", &f.fail_device)) {
      return InvalidArgument("SGEMM_FAULT_INJECT: '" + item + "' is not trap:ORDINAL, fail:ORDINAL or hang-collective");
    }
  }
  return f;
}

StatusOr<FaultInjection> FaultInjection::from_env() {
  const char* e = std::getenv("SGEMM_FAULT_INJECT");
  if (!e || !*e) return FaultInjection{};
  return parse(e);
}

}  // namespace sgemm
