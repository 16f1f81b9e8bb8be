# The multi-GPU CUDA engine: device pool, NCCL communicator, planner, kernels.
# Included from server/engine/CMakeLists.txt. No spdlog: logging goes through
# CudaEngineOptions::log, so the engine builds where spdlog is absent.
add_library(sgemm_cuda_engine STATIC ${CMAKE_CURRENT_LIST_DIR}/cuda_engine.cc)
target_link_libraries(sgemm_cuda_engine
  PUBLIC sgemm_engine_core sgemm_planner sgemm_common
  PRIVATE sgemm_kernels sgemm_devices sgemm_comm CUDA::cudart CUDA::cublas NCCL::nccl)
