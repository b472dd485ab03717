# packaging.InstallAndConsume (cmake -P): installs the build into a fresh prefix, checks what landed
# there, then builds and runs the consumer three ways: with find_package(FsdpRuntime), with pkg-config
# (fsdp-nccl.pc), and with a plain -lnccl. Inputs (-D): BUILD_DIR, CONSUMER_DIR, WORK_DIR, LIBDIR,
# GENERATOR, C_COMPILER, CXX_COMPILER, PKG_CONFIG, NM.
cmake_minimum_required(VERSION 3.25)

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n  ${ARGN}\n${out}")
  endif()
  set(run_output "${out}" PARENT_SCOPE)
endfunction()

function(run_expect what pattern)
  run("${what}" ${ARGN})
  if(NOT run_output MATCHES "${pattern}")
    message(FATAL_ERROR "${what}: output lacks '${pattern}':\n${run_output}")
  endif()
  message(STATUS "${what}: ${run_output}")
endfunction()

set(prefix ${WORK_DIR}/prefix)
set(libdir ${prefix}/${LIBDIR})
file(REMOVE_RECURSE ${WORK_DIR})
run("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})

foreach(f include/nccl.h include/fsdp/collectives/communicator.h include/fsdp/launch/world.h
          ${LIBDIR}/libfsdp_nccl.so ${LIBDIR}/libnccl.so ${LIBDIR}/pkgconfig/fsdp-nccl.pc
          ${LIBDIR}/cmake/FsdpRuntime/FsdpRuntimeConfig.cmake ${LIBDIR}/cmake/FsdpRuntime/FsdpRuntimeTargets.cmake
          bin/fsdp-run bin/fsdp-store)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "not installed: ${prefix}/${f}")
  endif()
endforeach()

# The library exports the NCCL API and nothing else.
run("nm -D" ${NM} -D --defined-only ${libdir}/libfsdp_nccl.so)
string(REGEX MATCHALL "[^\n]+" lines "${run_output}")
set(exported 0)
foreach(line IN LISTS lines)
  string(REGEX REPLACE "^.* " "" symbol "${line}")
  if(NOT symbol MATCHES "^nccl[A-Z]")
    message(FATAL_ERROR "libfsdp_nccl.so exports '${symbol}'")
  endif()
  math(EXPR exported "${exported} + 1")
endforeach()
if(exported LESS 25)
  message(FATAL_ERROR "libfsdp_nccl.so exports only ${exported} symbols")
endif()

# 1. find_package(FsdpRuntime)
run("configure the consumer" ${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${WORK_DIR}/consumer -G ${GENERATOR}
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_C_COMPILER=${C_COMPILER}
    -DCMAKE_CXX_COMPILER=${CXX_COMPILER})
run("build the consumer" ${CMAKE_COMMAND} --build ${WORK_DIR}/consumer)
run_expect("find_package consumer (C)" "consumer OK" ${WORK_DIR}/consumer/consumer_c)
if(NOT EXISTS ${WORK_DIR}/consumer/consumer_cpp)
  message(FATAL_ERROR "FsdpRuntime::launch was not exported (see the configure output of the main build)")
endif()
run_expect("find_package consumer (C++)" "consumer_cpp OK" ${WORK_DIR}/consumer/consumer_cpp)

# 2. pkg-config, straight from the installed .pc (relocatable: it finds the prefix from its own place)
run("pkg-config" ${CMAKE_COMMAND} -E env PKG_CONFIG_PATH=${libdir}/pkgconfig ${PKG_CONFIG} --cflags --libs fsdp-nccl)
separate_arguments(flags UNIX_COMMAND "${run_output}")
run("compile with pkg-config flags" ${C_COMPILER} -std=c99 ${CONSUMER_DIR}/consumer.c ${flags}
    -Wl,-rpath,${libdir} -o ${WORK_DIR}/consumer_pkgconfig)
run_expect("pkg-config consumer" "consumer OK" ${WORK_DIR}/consumer_pkgconfig)

# 3. What existing NCCL builds do: -lnccl
run("compile with -lnccl" ${C_COMPILER} ${CONSUMER_DIR}/consumer.c -I${prefix}/include -L${libdir} -lnccl
    -Wl,-rpath,${libdir} -o ${WORK_DIR}/consumer_lnccl)
run_expect("-lnccl consumer" "consumer OK" ${WORK_DIR}/consumer_lnccl)
