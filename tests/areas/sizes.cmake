# Sizes from settings and files (issue 32 items 15, 16, 22, 23): every
# size through one checked multiply, bounded buffers, clear errors.
add_test(NAME sizes.shards COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/sizes/shards.sh ${KILN_EXE}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(sizes.shards PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
add_test(NAME sizes.safetensors COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/sizes/safetensors.sh ${KILN_EXE}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(sizes.safetensors PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
add_test(NAME sizes.braces COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/sizes/braces.sh ${KILN_EXE}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(sizes.braces PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
add_test(NAME sizes.bigfiles COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/sizes/bigfiles.sh ${KILN_EXE}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(sizes.bigfiles PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
