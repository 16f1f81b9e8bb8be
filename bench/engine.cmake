# engine-bench: the CUDA engine on 1 vs 2 GPUs (single, row split, K split with
# both reductions): verifies sampled rows first, then times the kernel phase
# (CUDA events, from the engine's report) and device-side end-to-end (pinned
# host in -> pinned host out, wall clock around Engine::run).
if(TARGET sgemm_cuda_engine)
  add_executable(engine-bench ${CMAKE_CURRENT_LIST_DIR}/engine_bench.cc)
  target_link_libraries(engine-bench PRIVATE sgemm_cuda_engine sgemm_devices sgemm_common CUDA::cudart)
endif()
