# Pipeline parallelism (tests/ranks/pipeline.sh): the pipeline pass's
# stages of the examples (kiln ir --after pipeline), stage = k marks and
# the refusals; no MPI.
foreach(case ir marks refused)
  add_test(NAME pipeline.${case} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/ranks/pipeline.sh ${KILN_EXE} ${case}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(pipeline.${case} PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
endforeach()
# Training across the stages (tests/ranks/pipeline_train.sh): mpirun
# --oversubscribe, one stage and one thread per rank, against one rank.
foreach(case gpipe_mlp 1f1b_mlp cnn gpt gpt3 dp resume fp16 tp interleaved kill zero_bubble zero_bubble_gpt observe zero train_refused)
  add_test(NAME pipeline.${case} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/ranks/pipeline_train.sh ${KILN_EXE} ${case}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(pipeline.${case} PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
endforeach()
