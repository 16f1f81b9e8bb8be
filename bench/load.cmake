# sgemm-load: a load generator for a running sgemm-server. N clients multiply a
# mix of sizes and verify every result against the fp64 reference; optionally
# misbehaving clients (header-only streams, B-first tricklers, silent streams,
# clients that never read C) are attached meanwhile. Reports throughput,
# p50/p99 latency, statuses and wrong results (which must be 0).
if(SGEMM_BUILD_GRPC)
  add_executable(sgemm-load ${CMAKE_CURRENT_LIST_DIR}/sgemm_load.cc)
  target_link_libraries(sgemm-load PRIVATE sgemm_client sgemm_proto sgemm_common CLI11::CLI11
                        nlohmann_json::nlohmann_json gRPC::grpc++)
endif()
