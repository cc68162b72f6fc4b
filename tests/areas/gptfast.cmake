# Fast CPU attention, the GPT example's speed and loss target, and the
# benchmark against PyTorch (issue 16, deliverables 2, 5 and 6 on the
# CPU). Programs and scripts live in tests/gptfast/.

# The hand-written CPU attention kernels (runtime/cpu_attn.c) against a
# naive f64 attention, over geometries reaching every path, and the same
# bytes at 1 and 3 threads.
add_executable(attn_native_check gptfast/attn_native_check.c)
target_link_libraries(attn_native_check PRIVATE kiln m)
add_test(NAME gptfast.attn_native COMMAND attn_native_check)
# The same kernels through the compiler and the CPU backend's dispatch:
# fused equals composed (tests/attn/attn_equiv.c, bound 1e-5).
add_test(NAME gptfast.attn_equiv_long COMMAND attn_equiv tests/gptfast/fused_long.kl tests/gptfast/composed_long.kl
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(gptfast.attn_equiv_long PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
