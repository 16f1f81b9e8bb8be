# `cmake --install` and CPack: what another project and a host need.
#
#   cmake --install build --prefix /opt/sgemm --component client   # library, headers, CLI, CMake package
#   cmake --install build --prefix /opt/sgemm --component server   # sgemm-server, sgemm-timings
#   (cd build && cpack -G DEB)                                      # sgemm-server_*.deb, sgemm-client_*.deb
#
# The client component installs the static libraries sgemm::client (with
# sgemm::common and the generated sgemm::proto it needs at link time) and
# sgemm::matrix_files, their headers under include/ with their repository
# paths ("client/sgemm_client.h", "common/status.h"), the sgemm-client CLI and
# lib/cmake/sgemm_client/, so another project writes
#   find_package(sgemm_client REQUIRED)
#   target_link_libraries(app PRIVATE sgemm::client)
# tests/install/ builds such a project against an installed tree.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(_sgemm_installed_libs sgemm_client sgemm_client_wire sgemm_client_stream sgemm_common sgemm_matrix_files sgemm_proto
                          sgemm_grpc_status)
set_target_properties(sgemm_client PROPERTIES EXPORT_NAME client)
set_target_properties(sgemm_common PROPERTIES EXPORT_NAME common)
set_target_properties(sgemm_matrix_files PROPERTIES EXPORT_NAME matrix_files)
set_target_properties(sgemm_proto PROPERTIES EXPORT_NAME proto)
set_target_properties(sgemm_client_wire PROPERTIES EXPORT_NAME client_wire)
set_target_properties(sgemm_client_stream PROPERTIES EXPORT_NAME client_stream)
set_target_properties(sgemm_grpc_status PROPERTIES EXPORT_NAME grpc_status)
# sgemm_library() points each target at its build-tree include root; installed,
# every public header lives under include/ with its repository path. The
# generated protobuf headers are a private detail of sgemm::client (linked, not
# included), so sgemm::proto has no installed include root.
foreach(_t sgemm_client sgemm_common sgemm_matrix_files)
  get_target_property(_inc ${_t} INTERFACE_INCLUDE_DIRECTORIES)
  set_target_properties(${_t} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES
                        "$<BUILD_INTERFACE:${_inc}>;$<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>")
endforeach()
foreach(_t sgemm_proto sgemm_grpc_status sgemm_client_wire sgemm_client_stream)  # linked privately by sgemm::client, never included
  get_target_property(_inc ${_t} INTERFACE_INCLUDE_DIRECTORIES)
  set_target_properties(${_t} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "$<BUILD_INTERFACE:${_inc}>")
endforeach()

install(TARGETS ${_sgemm_installed_libs} EXPORT sgemm_client_targets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT client)
install(TARGETS sgemm-client RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT client)
# The public headers are exactly those sgemm_library() linked into each
# target's include root; install the sources they point at.
foreach(_t sgemm_client sgemm_common sgemm_matrix_files)
  set(_root ${CMAKE_BINARY_DIR}/include/${_t})
  file(GLOB_RECURSE _links RELATIVE ${_root} LIST_DIRECTORIES false ${_root}/*)
  foreach(_h IN LISTS _links)
    get_filename_component(_dir ${_h} DIRECTORY)
    install(FILES ${CMAKE_SOURCE_DIR}/${_h} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/${_dir} COMPONENT client)
  endforeach()
endforeach()
install(EXPORT sgemm_client_targets NAMESPACE sgemm:: FILE sgemm_clientTargets.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/sgemm_client COMPONENT client)
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/sgemm_clientConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/cmake/sgemm_clientConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/sgemm_client)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/cmake/sgemm_clientConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/cmake/sgemm_clientConfig.cmake
              ${CMAKE_BINARY_DIR}/cmake/sgemm_clientConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/sgemm_client COMPONENT client)

if(SGEMM_BUILD_SERVER)
  # The server finds cuBLAS and NCCL where it was linked against them (the CUDA
  # Toolkit is not a Debian package, so the loader's default path may lack it).
  set_target_properties(sgemm-server PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
  install(TARGETS sgemm-server RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT server)
  # sgemm-timings: percentiles, lists and pictures of timings.jsonl and traces (docs/observability.md).
  install(PROGRAMS ${CMAKE_SOURCE_DIR}/tools/sgemm_timings.py DESTINATION ${CMAKE_INSTALL_BINDIR}
          RENAME sgemm-timings COMPONENT server)
  # The systemd unit (docs/operations.md): `systemctl enable --now sgemm-server`.
  install(FILES ${CMAKE_SOURCE_DIR}/deploy/systemd/sgemm-server.service DESTINATION lib/systemd/system
          COMPONENT server)
endif()

# --- CPack: one .deb per component --------------------------------------------
set(CPACK_PACKAGE_NAME sgemm)
set(CPACK_PACKAGE_VENDOR "sgemm-service")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "fp32 matrix multiplication over gRPC on a host's GPUs")
set(CPACK_PACKAGE_CONTACT "sgemm-service maintainers")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
if(SGEMM_BUILD_SERVER)
  set(CPACK_COMPONENTS_ALL server client)
else()
  set(CPACK_COMPONENTS_ALL client)
endif()
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_SERVER_PACKAGE_NAME sgemm-server)
set(CPACK_DEBIAN_CLIENT_PACKAGE_NAME sgemm-client)
set(CPACK_DEBIAN_SERVER_PACKAGE_SECTION net)
set(CPACK_DEBIAN_CLIENT_PACKAGE_SECTION libdevel)
set(CPACK_COMPONENT_SERVER_DESCRIPTION
    "sgemm-server: the gRPC daemon (sgemm.v1) that multiplies fp32 matrices on the host's GPUs (OpenBLAS fallback).\n"
    "Needs the CUDA Toolkit 13 runtime libraries (cudart, cuBLAS, NCCL) installed from NVIDIA.")
set(CPACK_COMPONENT_CLIENT_DESCRIPTION
    "sgemm-client CLI and the sgemm::client C++ library (static, headers, CMake package sgemm_client).")
# Depends: from dpkg-shlibdeps for what Debian ships (gRPC, protobuf, spdlog,
# OpenBLAS, ...). The CUDA libraries come from NVIDIA's installer, not a Debian
# package, so their directories are passed as "private" library dirs
# (dpkg-shlibdeps -l) and the server's description names them instead.
find_program(SGEMM_DPKG_SHLIBDEPS dpkg-shlibdeps)
if(SGEMM_DPKG_SHLIBDEPS)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
  if(SGEMM_BUILD_SERVER)
    get_filename_component(_nccl_dir "${NCCL_LIBRARY}" DIRECTORY)
    set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${CUDAToolkit_LIBRARY_DIR} ${_nccl_dir})
  endif()
endif()
# The CLI's Depends are its shared libraries (dpkg-shlibdeps); the static
# sgemm::client links gRPC and protobuf, so a project building against it
# wants their development files: recommended, not required to run the CLI.
set(CPACK_DEBIAN_CLIENT_PACKAGE_RECOMMENDS "libgrpc++-dev, libprotobuf-dev")
# sgemm-timings is Python (matplotlib only for its pictures). The CUDA
# libraries sgemm-server links come from NVIDIA's apt repository
# (developer.download.nvidia.com/compute/cuda/repos): declared here, since
# dpkg-shlibdeps cannot see them, so the package does not install where
# sgemm-server could not start.
if(SGEMM_BUILD_SERVER)
  set(_cu "${CUDAToolkit_VERSION_MAJOR}-${CUDAToolkit_VERSION_MINOR}")
  set(CPACK_DEBIAN_SERVER_PACKAGE_DEPENDS "python3, cuda-cudart-${_cu}, libcublas-${_cu}, libnccl2")
endif()
set(CPACK_DEBIAN_SERVER_PACKAGE_SUGGESTS "python3-matplotlib")
include(CPack)
