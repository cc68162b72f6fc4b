# Many ranks (tests/ranks/data_parallel.sh): mpirun --oversubscribe, one thread per rank.
foreach(case launch mlp cnn precision resume kill settings_differ timeout)
  add_test(NAME ranks.${case} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/ranks/data_parallel.sh ${KILN_EXE} ${case}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(ranks.${case} PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
endforeach()
