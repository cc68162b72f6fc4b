# Data on many ranks (tests/data/ranks_shards.sh): each rank decodes its
# own rows of every global batch; the ranks together see each sample once
# per epoch and train as one rank with the same global batch.
add_test(NAME data.ranks COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/data/ranks_shards.sh ${KILN_EXE}
         $<TARGET_FILE:data_loader_check> WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(data.ranks PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
