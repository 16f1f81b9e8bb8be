# CTest (label unit): `cmake --install` the client component of this build into
# a fresh prefix, then configure, build and run tests/install/consumer against
# it with find_package(sgemm_client). Only the consumer's one file compiles.
#   cmake -DBUILD_DIR=build -DCONSUMER_DIR=tests/install/consumer -DWORK_DIR=... -DGENERATOR=Ninja
#         [-DLINK_FLAGS=-fsanitize=thread] -P check_install.cmake
foreach(v BUILD_DIR CONSUMER_DIR WORK_DIR GENERATOR)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "check_install.cmake: -D${v}= is required")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "ok: ${ARGN}")
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix} --component client)
foreach(f bin/sgemm-client include/client/sgemm_client.h include/common/status.h include/common/gemm_types.h
          lib/cmake/sgemm_client/sgemm_clientConfig.cmake)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "the install lacks ${f}")
  endif()
endforeach()
if(IS_SYMLINK ${prefix}/include/client/sgemm_client.h)
  message(FATAL_ERROR "installed headers must be files, not links into the source tree")
endif()
run(${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${WORK_DIR}/build -G ${GENERATOR} -DCMAKE_BUILD_TYPE=Release
    -DCMAKE_PREFIX_PATH=${prefix} "-DCMAKE_EXE_LINKER_FLAGS=${LINK_FLAGS}")
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${WORK_DIR}/build/consumer)
message(STATUS "${last_output}")
run(${prefix}/bin/sgemm-client --help)
file(REMOVE_RECURSE ${WORK_DIR})
