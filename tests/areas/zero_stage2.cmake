# ZeRO stages beyond zero1 in fp32 (tests/ranks/zero): zero1 under bf16/fp16,
# zero2 (gradients partitioned, reduce-scattered per bucket in backward),
# each against one rank with the same global batch (mpirun --oversubscribe,
# one thread per rank), and the memory per rank against the formulas.
add_test(NAME zero.zero1.precision COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/ranks/zero/zero1.sh ${KILN_EXE} precision
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(zero.zero1.precision PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
foreach(case mlp cnn precision resume plan)
  add_test(NAME zero.zero2.${case} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/ranks/zero/zero2.sh ${KILN_EXE} ${case}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(zero.zero2.${case} PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
endforeach()
