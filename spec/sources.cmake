# The spec layer's sources, one list for the fsdp_spec library and the fuzz build (fuzz/CMakeLists.txt
# compiles them again with coverage and sanitizers to reach the plan-file checks).
set(FSDP_SPEC_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/checked_size.cc
  ${CMAKE_CURRENT_LIST_DIR}/model_spec.cc
  ${CMAKE_CURRENT_LIST_DIR}/model_presets.cc
  ${CMAKE_CURRENT_LIST_DIR}/model_spec_file.cc
  ${CMAKE_CURRENT_LIST_DIR}/mesh.cc
  ${CMAKE_CURRENT_LIST_DIR}/policy.cc
  ${CMAKE_CURRENT_LIST_DIR}/shard_layout.cc
  ${CMAKE_CURRENT_LIST_DIR}/expert_parallel.cc
  ${CMAKE_CURRENT_LIST_DIR}/job_spec.cc
  ${CMAKE_CURRENT_LIST_DIR}/fault_tolerance.cc
)
