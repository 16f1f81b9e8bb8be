# sgemm_library(): a library target whose include root holds its own headers
# and nothing else, so the build enforces the layering of STYLE.md.
#
#   sgemm_library(NAME sgemm_planner DIR server/planner
#                 SOURCES plan.cc ...            # none: an INTERFACE library
#                 HEADERS plan.h ...             # what other targets may include
#                 PRIVATE_HEADERS cost_model.h   # only this target's sources
#                 PUBLIC dep ... PRIVATE dep ...)
#
# Headers keep their repository paths ("server/planner/plan.h"): the target
# gets ${CMAKE_BINARY_DIR}/include/<NAME>/<DIR>/<header> as a symbolic link to
# the source, and exports ${CMAKE_BINARY_DIR}/include/<NAME>. A target sees the
# headers of exactly the targets it links, so an include that crosses a layer
# it may not reach fails to compile, and a symbol it may not use fails to link.
function(sgemm_library)
  cmake_parse_arguments(L "" "NAME;DIR" "SOURCES;HEADERS;PRIVATE_HEADERS;PUBLIC;PRIVATE" ${ARGN})
  set(public_root ${CMAKE_BINARY_DIR}/include/${L_NAME})
  set(private_root ${CMAKE_BINARY_DIR}/include-private/${L_NAME})
  foreach(kind public private)
    if(kind STREQUAL "public")
      set(headers ${L_HEADERS})
      set(root ${public_root})
    else()
      set(headers ${L_PRIVATE_HEADERS})
      set(root ${private_root})
    endif()
    foreach(h IN LISTS headers)
      set(src ${CMAKE_SOURCE_DIR}/${L_DIR}/${h})
      if(NOT EXISTS ${src})
        message(FATAL_ERROR "sgemm_library(${L_NAME}): ${L_DIR}/${h} does not exist")
      endif()
      get_filename_component(dir ${root}/${L_DIR}/${h} DIRECTORY)
      file(MAKE_DIRECTORY ${dir})
      file(CREATE_LINK ${src} ${root}/${L_DIR}/${h} SYMBOLIC)
    endforeach()
  endforeach()
  list(TRANSFORM L_SOURCES PREPEND ${CMAKE_SOURCE_DIR}/${L_DIR}/)
  if(L_SOURCES)
    add_library(${L_NAME} STATIC ${L_SOURCES})
    target_include_directories(${L_NAME} PUBLIC ${public_root})
    if(L_PRIVATE_HEADERS)
      target_include_directories(${L_NAME} PRIVATE ${private_root})
    endif()
    target_link_libraries(${L_NAME} PUBLIC ${L_PUBLIC} PRIVATE ${L_PRIVATE})
  else()
    add_library(${L_NAME} INTERFACE)
    target_include_directories(${L_NAME} INTERFACE ${public_root})
    target_link_libraries(${L_NAME} INTERFACE ${L_PUBLIC})
  endif()
  # The public headers by repository path, for checks over them (tests/headers).
  list(TRANSFORM L_HEADERS PREPEND ${L_DIR}/ OUTPUT_VARIABLE public_headers)
  set_target_properties(${L_NAME} PROPERTIES SGEMM_PUBLIC_HEADERS "${public_headers}")
endfunction()
