# Installation (docs/packaging.md): `cmake --install <build> [--prefix P]` puts
#   lib/        libfsdp_nccl.so (+ libnccl.so -> it), the static C++ libraries (collectives, launch and
#               what they link), pkgconfig/fsdp-nccl.pc, cmake/FsdpRuntime/ (find_package(FsdpRuntime))
#   include/    nccl.h; fsdp/common/..., fsdp/spec/mxfp8_wire.h (the MXFP8 wire size the codec's header
#               uses), fsdp/collectives/..., fsdp/launch/... (included as "collectives/communicator.h")
#   bin/        the programs that exist in this build: fsdp-train, fsdp-run, fsdp-store, fsdp-plan,
#               fsdp-ckpt, fsdp-bench, fsdp-flight, fsdp-report
# Everything here reads targets defined elsewhere and only adds install-time properties
# ($<INSTALL_INTERFACE:...>, $<BUILD_INTERFACE:...> wrapping), so the build itself is unchanged.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(FSDP_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/FsdpRuntime)
option(FSDP_INSTALL_NCCL_ALIAS "Install libnccl.so as a link to libfsdp_nccl.so" ON)

# --- The C API ------------------------------------------------------------------------------------
install(TARGETS fsdp_nccl EXPORT FsdpRuntimeTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT nccl NAMELINK_COMPONENT nccl
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_SOURCE_DIR}/nccl/include/nccl.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT nccl)
if(FSDP_INSTALL_NCCL_ALIAS)
  install(CODE "
    set(_dir \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}\")
    message(STATUS \"Installing: \${_dir}/libnccl.so -> $<TARGET_SONAME_FILE_NAME:fsdp_nccl>\")
    file(CREATE_LINK $<TARGET_SONAME_FILE_NAME:fsdp_nccl> \"\${_dir}/libnccl.so\" SYMBOLIC)"
    COMPONENT nccl)
endif()
set_target_properties(fsdp_nccl PROPERTIES EXPORT_NAME nccl)

# --- The C++ libraries ----------------------------------------------------------------------------
# What a C++ consumer links: the collectives and the launch layer, plus every library of this project
# they link (found by walking their link libraries, so a new dependency is exported with them). The
# external packages they link are found again by the package config, with the commands below; a root
# that links a package not listed here is left out, with a message, rather than breaking the configure.
set(_fsdp_dep_Threads::Threads "find_dependency(Threads)")
set(_fsdp_dep_Boost::boost "find_package(Boost 1.74 QUIET)")
set(_fsdp_dep_tomlplusplus::tomlplusplus "find_package(tomlplusplus QUIET)")
set(_fsdp_dep_protobuf::libprotobuf "find_package(Protobuf QUIET)")
set(_fsdp_dep_MPI::MPI_C "find_package(MPI QUIET COMPONENTS C)")
set(_fsdp_dep_PkgConfig::UCX "find_package(PkgConfig QUIET)\nif(PkgConfig_FOUND)\n  pkg_check_modules(UCX QUIET IMPORTED_TARGET ucx)\nendif()")

# out_targets: target and the project libraries it links, transitively; out_deps: the external
# packages among them; out_ok: false when one of those has no entry above.
function(_fsdp_link_closure target out_targets out_deps out_ok)
  set(found ${target})
  set(deps "")
  set(ok TRUE)
  set(queue ${target})
  while(queue)
    list(POP_FRONT queue t)
    get_target_property(libs ${t} LINK_LIBRARIES)
    if(NOT libs)
      continue()
    endif()
    foreach(lib IN LISTS libs)
      string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" lib "${lib}")
      set(project_target FALSE)
      if(TARGET ${lib})
        get_target_property(imported ${lib} IMPORTED)
        if(NOT imported)
          set(project_target TRUE)
        endif()
      endif()
      if(lib MATCHES "^\\$<")
        set(ok FALSE)
        message(STATUS "install: ${target} not exported: ${t} links '${lib}'")
      elseif(project_target)
        if(NOT lib IN_LIST found)
          list(APPEND found ${lib})
          list(APPEND queue ${lib})
        endif()
      elseif(lib MATCHES "::")
        if(DEFINED _fsdp_dep_${lib})
          list(APPEND deps ${lib})
        else()
          set(ok FALSE)
          message(STATUS "install: ${target} not exported: ${t} links ${lib}, which the package config does not find")
        endif()
      endif()
    endforeach()
  endwhile()
  set(${out_targets} ${found} PARENT_SCOPE)
  set(${out_deps} ${deps} PARENT_SCOPE)
  set(${out_ok} ${ok} PARENT_SCOPE)
endfunction()

set(_fsdp_cpp_targets "")
set(_fsdp_cpp_deps Threads::Threads)
foreach(root fsdp_collectives fsdp_launch)
  _fsdp_link_closure(${root} closure deps ok)
  if(ok)
    list(APPEND _fsdp_cpp_targets ${closure})
    list(APPEND _fsdp_cpp_deps ${deps})
  endif()
endforeach()
list(REMOVE_DUPLICATES _fsdp_cpp_targets)
list(REMOVE_DUPLICATES _fsdp_cpp_deps)
set(FSDP_CONFIG_DEPENDENCIES "")
foreach(dep IN LISTS _fsdp_cpp_deps)
  string(APPEND FSDP_CONFIG_DEPENDENCIES "${_fsdp_dep_${dep}}\n")
endforeach()

foreach(t IN LISTS _fsdp_cpp_targets)
  # Include directories inside the source or build tree hold only in the build tree.
  foreach(prop INTERFACE_INCLUDE_DIRECTORIES INTERFACE_SYSTEM_INCLUDE_DIRECTORIES)
    get_target_property(dirs ${t} ${prop})
    if(dirs)
      set(wrapped "")
      foreach(d IN LISTS dirs)
        if(d MATCHES "^(${PROJECT_SOURCE_DIR}|${PROJECT_BINARY_DIR})(/|$)")
          list(APPEND wrapped "$<BUILD_INTERFACE:${d}>")
        else()
          list(APPEND wrapped "${d}")
        endif()
      endforeach()
      set_property(TARGET ${t} PROPERTY ${prop} "${wrapped}")
    endif()
  endforeach()
  string(REGEX REPLACE "^fsdp_" "" export_name ${t})
  set_target_properties(${t} PROPERTIES EXPORT_NAME ${export_name})
endforeach()
if(_fsdp_cpp_targets)
  # Headers include each other by their path from the repository root, installed under include/fsdp.
  target_include_directories(fsdp_collectives INTERFACE $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/fsdp>)
  install(TARGETS ${_fsdp_cpp_targets} EXPORT FsdpRuntimeTargets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT devel)
  foreach(dir common collectives launch)
    install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/fsdp/${dir}
      COMPONENT devel FILES_MATCHING PATTERN "*.h")
  endforeach()
  # The one spec/ header the collectives' headers include (header-only: no spec library to link).
  install(FILES ${PROJECT_SOURCE_DIR}/spec/mxfp8_wire.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/fsdp/spec
    COMPONENT devel)
endif()

# --- Programs -------------------------------------------------------------------------------------
foreach(program fsdp-train fsdp-run fsdp-store fsdp-plan fsdp-ckpt fsdp-bench fsdp-flight fsdp-report)
  if(TARGET ${program})
    install(TARGETS ${program} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT programs)
  endif()
endforeach()

# --- find_package(FsdpRuntime) --------------------------------------------------------------------
install(EXPORT FsdpRuntimeTargets NAMESPACE FsdpRuntime:: DESTINATION ${FSDP_CMAKE_INSTALL_DIR} COMPONENT devel)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/FsdpRuntimeConfig.cmake.in
  ${PROJECT_BINARY_DIR}/cmake/FsdpRuntimeConfig.cmake INSTALL_DESTINATION ${FSDP_CMAKE_INSTALL_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/cmake/FsdpRuntimeConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/cmake/FsdpRuntimeConfig.cmake ${PROJECT_BINARY_DIR}/cmake/FsdpRuntimeConfigVersion.cmake
  DESTINATION ${FSDP_CMAKE_INSTALL_DIR} COMPONENT devel)

# --- pkg-config: fsdp-nccl.pc, relocatable (prefix found from the file's own place) --------------
set(_fsdp_pc_dir ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
file(RELATIVE_PATH FSDP_PC_TO_PREFIX /${_fsdp_pc_dir} /)
string(REGEX REPLACE "/$" "" FSDP_PC_TO_PREFIX "${FSDP_PC_TO_PREFIX}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/fsdp-nccl.pc.in ${PROJECT_BINARY_DIR}/cmake/fsdp-nccl.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/cmake/fsdp-nccl.pc DESTINATION ${_fsdp_pc_dir} COMPONENT nccl)
