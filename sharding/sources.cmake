# The planner's sources, one list for the fsdp_sharding library and the fuzz build (fuzz/CMakeLists.txt
# compiles them again with coverage and sanitizers to reach the plan-file checks).
set(FSDP_SHARDING_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/model_spec.cc
  ${CMAKE_CURRENT_LIST_DIR}/model_presets.cc
  ${CMAKE_CURRENT_LIST_DIR}/model_spec_file.cc
  ${CMAKE_CURRENT_LIST_DIR}/mesh.cc
  ${CMAKE_CURRENT_LIST_DIR}/chip_profile.cc
  ${CMAKE_CURRENT_LIST_DIR}/policy.cc
  ${CMAKE_CURRENT_LIST_DIR}/shard_layout.cc
  ${CMAKE_CURRENT_LIST_DIR}/cost_model.cc
  ${CMAKE_CURRENT_LIST_DIR}/step_program.cc
  ${CMAKE_CURRENT_LIST_DIR}/schedule_sim.cc
  ${CMAKE_CURRENT_LIST_DIR}/planner.cc
  ${CMAKE_CURRENT_LIST_DIR}/auto_planner.cc
  ${CMAKE_CURRENT_LIST_DIR}/plan_io.cc
  ${CMAKE_CURRENT_LIST_DIR}/expert_parallel.cc
)
