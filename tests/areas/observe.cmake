# Observability (issue 14): performance counters and their CI guard,
# kiln doctor, TensorBoard event files.

# ---- performance guard: plan counters against tests/perf/baseline.json ----
add_test(NAME perf.guard COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/perf/guard.sh ${KILN_EXE}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
add_test(NAME perf.guard.catches COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/perf/guard_catches.sh ${KILN_EXE}
         WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
# The one command that accepts new counters: cmake --build build --target perf_baseline
add_custom_target(perf_baseline
                  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/perf/guard.sh $<TARGET_FILE:kiln_cli> --accept
                  DEPENDS kiln_cli
                  WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
                  COMMENT "tests/perf/baseline.json from the current plans")
add_test(NAME perf.counters.known COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/perf/counters_known.sh ${KILN_EXE}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})

# ---- kiln doctor: verdicts on made-up machines (no GPU needed), and on this one ----
add_executable(test_doctor unit/test_doctor.c)
target_include_directories(test_doctor PRIVATE ${CMOCKA_INCLUDE_DIR})
target_link_libraries(test_doctor PRIVATE kiln ${CMOCKA_LIBRARIES})
add_test(NAME unit.doctor COMMAND test_doctor)
add_test(NAME doctor.here COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/observe/doctor.sh ${KILN_EXE}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
if(KILN_HAVE_CUDA)
  target_compile_definitions(test_doctor PRIVATE KILN_HAVE_CUDA=1)
endif()

# ---- TensorBoard event files, read back by the tensorboard package ----
add_test(NAME observe.tensorboard COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/observe/tensorboard.sh ${KILN_EXE} ${CMAKE_BINARY_DIR}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(observe.tensorboard PROPERTIES SKIP_RETURN_CODE 77
                     ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
# CRC32C against known values; host metrics against touched pages and getrusage.
add_executable(test_observe unit/test_observe.c)
target_include_directories(test_observe PRIVATE ${CMOCKA_INCLUDE_DIR})
target_link_libraries(test_observe PRIVATE kiln ${CMOCKA_LIBRARIES})
target_compile_definitions(test_observe PRIVATE KILN_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
add_test(NAME unit.observe COMMAND test_observe)

# ---- host readings: trace counter tracks, summary, metrics ----
add_test(NAME observe.host_metrics COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/observe/host_metrics.sh ${KILN_EXE}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(observe.host_metrics PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")

# ---- NVTX ranges under a stand-in profiler (needs the toolkit's nvtx3 headers) ----
if(KILN_HAVE_CUDA)
  add_test(NAME observe.nvtx COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/observe/nvtx.sh ${KILN_EXE} ${KILN_CUDA_INCLUDE}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(observe.nvtx PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
endif()

# ---- the bottleneck summary: --profile and kiln bench ----
add_test(NAME observe.bottleneck COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/observe/bottleneck.sh ${KILN_EXE}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(observe.bottleneck PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
