# ZeRO's collectives (tests/ranks/zero): reduce_scatter, all_gather and
# rank_broadcast against known values on 1-4 ranks (mpirun --oversubscribe).
add_executable(zero_collectives ranks/zero/collectives.c)
target_link_libraries(zero_collectives PRIVATE kiln m)
add_test(NAME zero.collectives COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/ranks/zero/collectives.sh $<TARGET_FILE:zero_collectives>
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(zero.collectives PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
# shard = zero1 (tests/ranks/zero/zero1.sh) against one rank with the same global batch.
foreach(case mlp cnn resume refused)
  add_test(NAME zero.zero1.${case} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/ranks/zero/zero1.sh ${KILN_EXE} ${case}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(zero.zero1.${case} PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
endforeach()
