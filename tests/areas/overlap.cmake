# Collectives overlapped with backward (tests/ranks/overlap.sh): mpirun
# --oversubscribe, one thread per rank.
foreach(case same trace fault)
  add_test(NAME overlap.${case} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/ranks/overlap.sh ${KILN_EXE} ${case}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(overlap.${case} PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
endforeach()
