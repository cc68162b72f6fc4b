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
