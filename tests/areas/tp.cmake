# Tensor parallelism (tests/ranks/tp.sh): split = column|row pairs across
# T ranks against one rank (mpirun --oversubscribe, one thread per rank);
# kiln ir's view and the refusals need no MPI; sync_batchnorm's CNN on 2
# ranks against one.
foreach(case mlp resume ir refused syncbn)
  add_test(NAME tp.${case} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/ranks/tp.sh ${KILN_EXE} ${case}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(tp.${case} PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
endforeach()
