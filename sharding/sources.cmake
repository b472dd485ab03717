# The planner's sources (the job's description is spec/'s), one list for the fsdp_sharding library and
# the fuzz build (fuzz/CMakeLists.txt compiles them again with coverage and sanitizers to reach the
# plan-file checks).
set(FSDP_SHARDING_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/chip_profile.cc
  ${CMAKE_CURRENT_LIST_DIR}/cost_model.cc
  ${CMAKE_CURRENT_LIST_DIR}/step_program.cc
  ${CMAKE_CURRENT_LIST_DIR}/schedule_sim.cc
  ${CMAKE_CURRENT_LIST_DIR}/planner.cc
  ${CMAKE_CURRENT_LIST_DIR}/plan_estimate.cc
  ${CMAKE_CURRENT_LIST_DIR}/auto_planner.cc
  ${CMAKE_CURRENT_LIST_DIR}/plan_io.cc
)
