# --generate's sampling step (driver/sample.c) with fixed logits against
# an independent softmax in Python: frequencies (chi-square), top-k,
# temperature -> 0. Scripts and helpers live in tests/sampler/.
add_executable(sampler_draws sampler/draws.c)
target_link_libraries(sampler_draws PRIVATE kiln)
add_test(NAME sampler.draws COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/sampler/sampler.sh $<TARGET_FILE:sampler_draws>
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
