# --batch auto --probe and kiln bench --gemms. (The split reductions' and
# the GPT sum_to's emulation tests are in tests/cuda/CMakeLists.txt, the
# occupancy check's in cuda_occupancy.cmake.)
add_test(NAME memplan.batch_probe COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/memplan/batch_probe.sh ${KILN_EXE}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(memplan.batch_probe PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")

# kiln bench --gemms (bench/gemm_shapes.sh's tool): its rows against
# kiln counters' GEMM calls and FLOPs.
add_test(NAME observe.gemm_bench COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/observe/gemm_bench.sh ${KILN_EXE}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
