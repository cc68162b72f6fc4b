# GPU kernels that fill the device (issue 17, deliverable 3): a static
# occupancy and launch check of every kernel of both examples (fp32 and
# bf16, train and eval, fused and unfused) for an H200 (sm_90, 132 SMs)
# and an A100 (sm_80, 108 SMs), from ptxas's registers and shared memory
# and the backend's own launch rules; no GPU needed (see README: "GPU
# occupancy check").
if(KILN_HAVE_CUDA)
  add_executable(occupancy_check cuda/occupancy_check.c)
  target_include_directories(occupancy_check PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/cuda)
  target_link_libraries(occupancy_check PRIVATE kiln)
  add_test(NAME cuda.occupancy COMMAND occupancy_check --reasons tests/cuda/occupancy_reasons.txt
           examples/mlp.kl examples/fashion_cnn.kl WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  # The check can fail: without the reasons file, the launches that run one
  # block per output of a reduction over few outputs (the batch norms'
  # per-channel statistics) fail it, named.
  add_test(NAME cuda.occupancy_fails COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cuda/occupancy_fails.sh
           $<TARGET_FILE:occupancy_check> WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(cuda.occupancy cuda.occupancy_fails PROPERTIES SKIP_RETURN_CODE 77
    ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
endif()
