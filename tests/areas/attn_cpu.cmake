# Fast CPU attention, and the GPT example against PyTorch's first loss.
# Programs and models live in tests/attention/ and tests/gpt/.

# The hand-written CPU attention kernels (runtime/cpu/cpu_attn.c) against a
# naive f64 attention, over geometries reaching every path, and the same
# bytes at 1 and 3 threads.
add_executable(attn_native_check attention/attn_native_check.c)
target_link_libraries(attn_native_check PRIVATE kiln m)
add_test(NAME attn.cpu.native COMMAND attn_native_check)
# The same kernels through the compiler and the CPU backend's dispatch:
# fused equals composed (tests/attention/attn_equiv.c, bound 1e-5).
add_test(NAME attn.cpu.equiv_long COMMAND attn_equiv tests/attention/fused_long.kl tests/attention/composed_long.kl
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(attn.cpu.equiv_long PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
# examples/gpt.kl in PyTorch (bench/gpt_torch.py, the benchmark's model)
# with Kiln's exported weights gives Kiln's first loss (rtol 1e-4).
# torch comes from $KILN_TORCH_PYTHON, python3, or build/torchvenv
# (bench/gpt_torch.sh installs it: about 2 GB, too much for the suite);
# skipped when none of them has torch.
add_test(NAME gpt.torch_first_loss COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/gpt/torch_first_loss.sh ${KILN_EXE}
         ${CMAKE_BINARY_DIR} WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(gpt.torch_first_loss PROPERTIES SKIP_RETURN_CODE 77
  ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
