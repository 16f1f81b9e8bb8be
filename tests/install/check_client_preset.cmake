# CTest (label unit): the client-only configuration (preset "client",
# SGEMM_BUILD_SERVER=OFF) configures with no CUDA in reach: nvcc off PATH,
# CUDACXX and CUDA_HOME unset; the build it generates has sgemm-client and
# sgemm::client, the Python package's build and unit tests, and no CUDA
# language or server target. (`cmake --build --preset client` then compiles
# only C++: docs/operations.md.)
#   cmake -DSOURCE_DIR=... -DWORK_DIR=... -DGENERATOR=Ninja -P check_client_preset.cmake
foreach(v SOURCE_DIR WORK_DIR GENERATOR)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "check_client_preset.cmake: -D${v}= is required")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK_DIR})
# The system's directories only: wherever the CUDA Toolkit is installed, it is not on this PATH.
set(path "/usr/sbin:/usr/bin:/sbin:/bin")
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env --unset=CUDACXX --unset=CUDA_HOME --unset=CUDA_PATH --unset=CUDAToolkit_ROOT
          PATH=${path} ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR} -G ${GENERATOR} -DSGEMM_BUILD_SERVER=OFF
          -DSGEMM_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=Release
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the client-only configuration failed without CUDA (${rc}):\n${out}\n${err}")
endif()
file(READ ${WORK_DIR}/CMakeCache.txt cache)
if(cache MATCHES "CMAKE_CUDA_COMPILER:" OR cache MATCHES "CUDAToolkit_")
  message(FATAL_ERROR "the client-only configuration looked for CUDA")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR} --target help OUTPUT_VARIABLE targets)
foreach(t sgemm-client sgemm_client)
  if(NOT targets MATCHES "(^|\n)${t}[ :]")
    message(FATAL_ERROR "the client-only configuration has no target ${t}:\n${targets}")
  endif()
endforeach()
foreach(t sgemm-server sgemm_kernels)
  if(targets MATCHES "(^|\n)${t}[ :]")
    message(FATAL_ERROR "the client-only configuration has the server target ${t}")
  endif()
endforeach()
get_filename_component(cmake_bin_dir ${CMAKE_COMMAND} DIRECTORY)
find_program(CTEST ctest HINTS ${cmake_bin_dir} REQUIRED)
execute_process(COMMAND ${CTEST} --test-dir ${WORK_DIR} -N OUTPUT_VARIABLE tests)
foreach(t python_client_package python_client_wire)
  if(NOT tests MATCHES " ${t}\n")
    message(FATAL_ERROR "the client-only configuration has no test ${t}:\n${tests}")
  endif()
endforeach()
if(tests MATCHES " python_client_client\n")
  message(FATAL_ERROR "the client-only configuration has a Python test that needs sgemm-server")
endif()
file(REMOVE_RECURSE ${WORK_DIR})
message(STATUS "client-only configuration without CUDA: sgemm-client, sgemm::client, the Python package, no server")
