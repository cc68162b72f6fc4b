# shard = zero3 (tests/ranks/zero/zero3.sh): params partitioned and all-gathered
# per bucket, against one rank with the same global batch (mpirun
# --oversubscribe, one thread per rank); the plan's gathers and the
# memory per rank against the formula.
foreach(case mlp cnn precision resume plan runtime)
  add_test(NAME zero.zero3.${case} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/ranks/zero/zero3.sh ${KILN_EXE} ${case}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(zero.zero3.${case} PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
endforeach()
