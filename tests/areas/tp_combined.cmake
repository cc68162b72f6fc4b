# Tensor parallelism in combination (tests/ranks/tp_combined.sh): padded split sizes,
# clip, bf16/fp16, accumulation, ZeRO on the data-parallel rest, the CNN's
# split head and checkpoints across worlds, against one rank
# (mpirun --oversubscribe, one thread per rank).
# The resume case is tp.resume_padded (tp.resume is tests/ranks/tp.sh's).
foreach(case pad clip fp16 resume zero cnn memory)
  set(name tp.${case})
  if(case STREQUAL "resume")
    set(name tp.resume_padded)
  endif()
  add_test(NAME ${name} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/ranks/tp_combined.sh ${KILN_EXE} ${case}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(${name} PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
endforeach()
