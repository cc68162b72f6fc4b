# Token data, the GPT example and sampling (issue 16, deliverables 4 and
# 5). Scripts, models and helpers live in tests/gpt/.
add_executable(gpt_token_loader_check gpt/token_loader_check.c)
target_link_libraries(gpt_token_loader_check PRIVATE kiln)

# tokens(...) through the loader against the file's bytes: windows,
# workers, a mid-epoch start, evaluation windows.
add_test(NAME gpt.token_loader COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/gpt/token_loader.sh ${KILN_EXE}
         $<TARGET_FILE:gpt_token_loader_check> WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})

# tokens(...) in a train block: relative paths, ln(256) first loss, a
# falling loss, resume from a mid-run checkpoint, bad files and settings.
add_test(NAME gpt.tokens COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/gpt/tokens.sh ${KILN_EXE}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(gpt.tokens PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")

# examples/gpt.kl at a tiny size: the f64 reference (fp32, bf16) and 40
# training steps whose loss falls (fp32, bf16).
add_test(NAME gpt.train COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/gpt/gpt_train.sh ${KILN_EXE}
         $<TARGET_FILE:reference_check> WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(gpt.train PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")

# --generate from a checkpoint: greedy text equal to the known training
# snippet, top_k = 1, seeds, a long prompt, bad flags.
add_test(NAME gpt.generate COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/gpt/generate.sh ${KILN_EXE}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(gpt.generate PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")

# A token file truncated by another process while a run reads it: an
# error naming the file, exit 1 (was SIGBUS).
add_test(NAME tokens.truncated COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/gpt/tokens_truncated.sh ${KILN_EXE}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(tokens.truncated PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")

# --generate's length: --tokens above its documented limit (65536) is
# refused; the limit runs to its end.
add_test(NAME generate.bound COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/gpt/generate_bound.sh ${KILN_EXE}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(generate.bound PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")

# examples/gpt2_small.kl: params count, memory plans (fp32, bf16,
# recompute = auto under a memory limit) and, at a tiny size, training
# from kiln pack's token files in fp32 and bf16.
add_test(NAME gpt.gpt2_small COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/gpt/gpt2_small.sh ${KILN_EXE}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(gpt.gpt2_small PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
# Its tiny size against the f64 reference, fp32 and bf16.
add_test(NAME reference.examples.gpt2_small.tiny COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/gpt/gpt2_reference.sh ${KILN_EXE}
         $<TARGET_FILE:reference_check> WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(reference.examples.gpt2_small.tiny PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
