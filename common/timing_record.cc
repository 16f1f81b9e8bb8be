#include "common/timing_record.h"

#include <nlohmann/json.hpp>

namespace sgemm {

std::string timing_record_json(const TimingRecord& r, const std::string& extra_json) {
  nlohmann::ordered_json j;
  j["schema"] = kTimingSchema;
  j["request_id"] = r.request_id;
  if (!r.caller.empty()) j["caller"] = r.caller;
  j["time"] = r.time;
  j["shape"] = {{"m", r.shape.m}, {"n", r.shape.n}, {"k", r.shape.k}};
  j["has_c"] = r.has_c;
  j["backend"] = r.backend;
  j["kernel"] = r.kernel;
  if (!r.kernel_rows.empty()) {
    auto& kj = j["kernel_rows"] = nlohmann::ordered_json::array();
    for (const KernelRowRecord& k : r.kernel_rows) kj.push_back({{"name", k.name}, {"launches", k.launches}});
  }
  j["precision"] = r.precision;
  j["split"] = r.split;
  j["plan"] = r.plan;
  j["receive_ms"] = r.receive_ms;
  j["queue_ms"] = r.queue_ms;
  j["compute_ms"] = r.compute_ms;
  j["send_ms"] = r.send_ms;
  j["total_ms"] = r.total_ms;
  j["gflops"] = r.total_ms > 0 ? r.shape.flops() / (r.total_ms * 1e6) : 0.0;
  j["bytes_in"] = r.bytes_in;
  j["bytes_out"] = r.bytes_out;
  auto& devs = j["devices"] = nlohmann::ordered_json::array();
  for (const DeviceTimingRecord& d : r.devices) {
    nlohmann::ordered_json dj;
    dj["index"] = d.index;
    dj["name"] = d.name;
    dj["row_begin"] = d.row_begin;
    dj["row_end"] = d.row_end;
    dj["k_begin"] = d.k_begin;
    dj["k_end"] = d.k_end;
    dj["copy_in_ms"] = d.copy_in_ms;
    dj["copy_in_wait_ms"] = d.copy_in_wait_ms;
    dj["kernel_ms"] = d.kernel_ms;
    dj["kernel_wait_ms"] = d.kernel_wait_ms;
    dj["reduce_ms"] = d.reduce_ms;
    dj["reduce_wait_ms"] = d.reduce_wait_ms;
    dj["copy_out_ms"] = d.copy_out_ms;
    dj["copy_out_wait_ms"] = d.copy_out_wait_ms;
    dj["order_wait_ms"] = d.order_wait_ms;
    devs.push_back(std::move(dj));
  }
  if (!r.engine_host_ms.empty()) {
    auto& hj = j["engine_host_ms"] = nlohmann::ordered_json::object();
    for (const auto& [step, ms] : r.engine_host_ms) hj[step] = ms;
  }
  if (r.client) {
    const ClientTimingRecord& c = *r.client;
    nlohmann::ordered_json cj;
    cj["total_ms"] = c.total_ms;
    cj["gflops"] = c.total_ms > 0 ? r.shape.flops() / (c.total_ms * 1e6) : 0.0;
    cj["attempts"] = c.attempts;
    cj["bytes_sent"] = c.bytes_sent;
    cj["bytes_received"] = c.bytes_received;
    if (!c.total_ms_all.empty()) cj["total_ms_all"] = c.total_ms_all;
    j["client"] = std::move(cj);
  }
  if (!extra_json.empty()) {
    const auto extra = nlohmann::ordered_json::parse(extra_json, nullptr, /*allow_exceptions=*/false);
    if (extra.is_object())
      for (const auto& [key, value] : extra.items()) j[key] = value;
  }
  return j.dump();
}

StatusOr<TimingRecord> parse_timing_record(const std::string& json) {
  const auto j =
      nlohmann::ordered_json::parse(json, nullptr, /*allow_exceptions=*/false);  // keeps engine_host_ms in order
  if (!j.is_object() || j.value("schema", "") != kTimingSchema)
    return InvalidArgument(std::string("not a ") + kTimingSchema + " record");
  try {
    TimingRecord r;
    r.request_id = j.at("request_id").get<std::string>();
    r.caller = j.value("caller", "");
    r.time = j.at("time").get<double>();
    r.shape = {j.at("shape").at("m").get<int64_t>(), j.at("shape").at("n").get<int64_t>(),
               j.at("shape").at("k").get<int64_t>()};
    r.has_c = j.at("has_c").get<bool>();
    r.backend = j.at("backend").get<std::string>();
    r.kernel = j.at("kernel").get<std::string>();
    if (j.contains("kernel_rows"))
      for (const auto& kj : j.at("kernel_rows"))
        r.kernel_rows.push_back(KernelRowRecord{kj.at("name").get<std::string>(), kj.at("launches").get<int64_t>()});
    r.precision = j.at("precision").get<std::string>();
    r.split = j.at("split").get<std::string>();
    r.plan = j.at("plan").get<std::string>();
    r.receive_ms = j.at("receive_ms").get<double>();
    r.queue_ms = j.at("queue_ms").get<double>();
    r.compute_ms = j.at("compute_ms").get<double>();
    r.send_ms = j.at("send_ms").get<double>();
    r.total_ms = j.at("total_ms").get<double>();
    r.bytes_in = j.at("bytes_in").get<int64_t>();
    r.bytes_out = j.at("bytes_out").get<int64_t>();
    for (const auto& dj : j.at("devices")) {
      DeviceTimingRecord d;
      d.index = dj.at("index").get<int>();
      d.name = dj.at("name").get<std::string>();
      d.row_begin = dj.at("row_begin").get<int64_t>();
      d.row_end = dj.at("row_end").get<int64_t>();
      d.k_begin = dj.at("k_begin").get<int64_t>();
      d.k_end = dj.at("k_end").get<int64_t>();
      d.copy_in_ms = dj.at("copy_in_ms").get<double>();
      d.copy_in_wait_ms = dj.at("copy_in_wait_ms").get<double>();
      d.kernel_ms = dj.at("kernel_ms").get<double>();
      d.kernel_wait_ms = dj.at("kernel_wait_ms").get<double>();
      d.reduce_ms = dj.at("reduce_ms").get<double>();
      d.reduce_wait_ms = dj.at("reduce_wait_ms").get<double>();
      d.copy_out_ms = dj.at("copy_out_ms").get<double>();
      d.copy_out_wait_ms = dj.at("copy_out_wait_ms").get<double>();
      d.order_wait_ms = dj.at("order_wait_ms").get<double>();
      r.devices.push_back(std::move(d));
    }
    if (j.contains("engine_host_ms"))
      for (const auto& [step, ms] : j.at("engine_host_ms").items())
        r.engine_host_ms.emplace_back(step, ms.get<double>());
    if (j.contains("client")) {
      const auto& cj = j.at("client");
      ClientTimingRecord c;
      c.total_ms = cj.at("total_ms").get<double>();
      c.attempts = cj.at("attempts").get<int>();
      c.bytes_sent = cj.at("bytes_sent").get<int64_t>();
      c.bytes_received = cj.at("bytes_received").get<int64_t>();
      if (cj.contains("total_ms_all")) c.total_ms_all = cj.at("total_ms_all").get<std::vector<double>>();
      r.client = std::move(c);
    }
    return r;
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(std::string(kTimingSchema) + " record: " + e.what());
  }
}

}  // namespace sgemm
