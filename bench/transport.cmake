# transport-bench: gRPC loopback throughput by chunk size (needs the gRPC build).
if(SGEMM_BUILD_GRPC)
  find_package(benchmark REQUIRED)
  add_executable(transport-bench ${CMAKE_CURRENT_LIST_DIR}/transport_bench.cc)
  target_link_libraries(transport-bench PRIVATE sgemm_client benchmark::benchmark)
endif()
