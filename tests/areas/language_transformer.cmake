# Transformer language features and attention: arange,
# tril/triu, '...' in def annotations, cross-entropy over any rank with
# ignore_index, models without labels, start-up constants. The op corpora
# (tests/grad, tests/reference, tests/errors, tests/golden) register their
# own cases; here: the CUDA printer's path for the reference models that
# the examples and gradient models do not reach.
if(KILN_HAVE_CUDA)
  set(KILN_XFORMER_CUDA_MODELS ${PROJECT_SOURCE_DIR}/tests/reference/tril_arange.kl
      ${PROJECT_SOURCE_DIR}/tests/reference/seq_dense.kl ${PROJECT_SOURCE_DIR}/tests/language/causal.kl)
  # sm_90 only (the H200's): the generated kernels carry no per-architecture
  # code, and cuda.nvrtc.* compile the examples' kernels (the GPT's
  # transformer kernels among them) for sm_80 too; the spill check per
  # architecture is cudaattn.nvrtc's for the hand-written tiled kernels.
  add_test(NAME language.cuda.nvrtc COMMAND nvrtc_check --arch sm_90 ${KILN_XFORMER_CUDA_MODELS}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  add_test(NAME language.cuda.emulate COMMAND kernel_check --emulate --batch 4 ${KILN_XFORMER_CUDA_MODELS}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(language.cuda.nvrtc language.cuda.emulate PROPERTIES SKIP_RETURN_CODE 77
    ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
  # Start-up steps run outside the recorded graph, before the first run:
  # training with graphs equals training without, bit for bit.
  add_test(NAME language.graph_replay COMMAND graph_replay tests/language/causal.kl 8 WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(language.graph_replay PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
endif()

# A model without a label input trains, exactly as with an unused one.
add_test(NAME language.no_label COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/language/no_label.sh ${KILN_EXE}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(language.no_label PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")

# Input-independent values run at start-up, not per step, and training
# is unchanged by it (evaluations sharing the arena included).
add_test(NAME language.startup COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/language/startup.sh ${KILN_EXE}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(language.startup PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
