# sgemm-bench: verifies then times the kernels/ backends (ping-pong, cuBLAS)
# on a fixed list of shapes; see bench/sgemm_bench.cc.
add_executable(sgemm-bench ${CMAKE_CURRENT_LIST_DIR}/sgemm_bench.cc)
target_link_libraries(sgemm-bench PRIVATE sgemm_kernels sgemm_common CUDA::cudart)
