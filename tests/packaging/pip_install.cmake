# packaging.PipInstall (cmake -P): pip installs python/ into a fresh virtual environment that sees the
# system's torch (--system-site-packages), as docs/pytorch.md ("Install") tells users to, then runs a
# 2-rank all_reduce from a folder outside the repository with no PYTHONPATH, launched by the fsdp-run
# the wheel installed. With BUILD_DIR, FSDP_BUILD_DIR points pip's build at that build folder, which
# then only checks the two targets are up to date (ctest); without it, pip configures and builds them
# in build-python/ beside make's build (make pip-install-check). Inputs (-D): PYTHON, SOURCE_DIR, WORK_DIR,
# BUILD_DIR (optional).
cmake_minimum_required(VERSION 3.25)

# Output goes to the console as it comes (a build from nothing takes minutes).
function(run what)
  string(JOIN " " command ${ARGN})
  message(STATUS "${what}: ${command}")
  execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=PYTHONPATH ${ARGN} WORKING_DIRECTORY ${WORK_DIR}
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc})")
  endif()
endfunction()

set(venv ${WORK_DIR}/venv)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
# Without pip of its own: the system's pip, seen through the system site, installs into the venv.
run("venv" ${PYTHON} -m venv --system-site-packages --without-pip ${venv})
set(reuse "")
set(verbosity --verbose)  # pip shows the build backend's output (CMake's) only when verbose
if(BUILD_DIR)
  set(reuse FSDP_BUILD_DIR=${BUILD_DIR})
  set(verbosity --quiet)
endif()
run("pip install" ${reuse} ${venv}/bin/python -m pip install --no-build-isolation --no-index
    --disable-pip-version-check ${verbosity} ${SOURCE_DIR}/python)
if(NOT EXISTS ${venv}/bin/fsdp-run)
  message(FATAL_ERROR "not installed: ${venv}/bin/fsdp-run")
endif()
run("installed job" ${venv}/bin/fsdp-run --nproc 2 -- ${venv}/bin/python ${SOURCE_DIR}/tests/packaging/pip_installed_job.py)
