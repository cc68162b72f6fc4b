# The collective runtime (tests/comm/): the bottleneck verdict's exposed
# collective time, overlap under accumulation, NCCL for the CUDA backend.
add_test(NAME comm.profile COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/comm/profile.sh ${KILN_EXE}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(comm.profile PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
