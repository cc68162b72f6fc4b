# --generate's sampling step (driver/next_token.c) with fixed logits against
# an independent softmax in Python: frequencies (chi-square), top-k,
# temperature -> 0. Scripts and helpers live in tests/gpt/ (sampler*).
add_executable(sampler_draws gpt/sampler_draws.c)
target_link_libraries(sampler_draws PRIVATE kiln)
add_test(NAME sampler.draws COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/gpt/sampler.sh $<TARGET_FILE:sampler_draws>
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})

# --generate's logits row against a full forward of the prompt alone
# through the f64 reference evaluator (examples/gpt.kl, tiny).
# The reference evaluator's sources: reference_check's, less its main.
get_target_property(sampler_ref_sources reference_check SOURCES)
list(REMOVE_ITEM sampler_ref_sources reference/reference_check.c)
add_executable(sampler_prefix_forward gpt/sampler_prefix_forward.c ${sampler_ref_sources})
target_include_directories(sampler_prefix_forward PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(sampler_prefix_forward PRIVATE kiln m)
add_test(NAME sampler.prefix COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/gpt/sampler_prefix.sh ${KILN_EXE}
         $<TARGET_FILE:sampler_prefix_forward> WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(sampler.prefix PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
