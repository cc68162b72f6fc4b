# Tensor parallelism in combination (tests/ranks/tp_combined.sh): padded split sizes,
# clip, bf16/fp16, accumulation, ZeRO on the data-parallel rest, the CNN's
# split head and checkpoints across worlds, against one rank
# (mpirun --oversubscribe, one thread per rank).
foreach(case pad clip fp16 resume zero cnn memory)
  add_test(NAME tp2.${case} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/ranks/tp_combined.sh ${KILN_EXE} ${case}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(tp2.${case} PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
endforeach()
