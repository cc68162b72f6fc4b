# ZeRO's collectives (tests/zero): reduce_scatter, all_gather and
# rank_broadcast against known values on 1-4 ranks (mpirun --oversubscribe).
add_executable(zero_collectives zero/collectives.c)
target_link_libraries(zero_collectives PRIVATE kiln m)
add_test(NAME zero.collectives COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/zero/collectives.sh $<TARGET_FILE:zero_collectives>
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(zero.collectives PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
