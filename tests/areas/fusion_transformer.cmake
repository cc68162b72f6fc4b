# Transformer fusions (and the CPU GEMM epilogues):
# residual add + layer norm backward in one kernel (the layernorm_grad
# pattern), GEMM bias/GELU/ReLU epilogues and their backward, the fused
# softmax + cross-entropy + gradient. tests/grad/transformer_fusions.kl
# checks the fused kernels' gradients by finite differences (grad.*).

# The groups form, and the counters show the launches and bytes saved.
add_test(NAME fusion.groups COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/fusion/groups.sh ${KILN_EXE}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})

# Fused and unfused plans train the same, on the GPT example and the
# causal model, after three SGD steps: fp32 within 1e-5 relative (the
# fused bias gradients sum their columns in another order; measured
# 1.4e-6), bf16 within 2e-2 (a few bf16 roundings: fused kernels keep in
# f32 what the unfused plan stores in 16 bits; measured 6.8e-3).
foreach(prec fp32 bf16)
  if(prec STREQUAL "fp32")
    set(bound 1e-5)
  else()
    set(bound 2e-2)
  endif()
  add_test(NAME fusion.equiv.gpt.${prec} COMMAND fusion_equiv examples/gpt.kl 2 ${prec} WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  add_test(NAME fusion.equiv.causal.${prec} COMMAND fusion_equiv tests/language/causal.kl 8 ${prec} WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(fusion.equiv.gpt.${prec} fusion.equiv.causal.${prec} PROPERTIES
    ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache;KILN_EQUIV_BOUND=${bound};OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
endforeach()

# The CPU attention's exp of non-positive values (base/scalar.h
# kl_exp_nonpos: code gcc vectorises) against libm in double.
add_executable(xfuse_vecmath_check fusion/vecmath_check.c)
target_include_directories(xfuse_vecmath_check PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(xfuse_vecmath_check PRIVATE m)
add_test(NAME fusion.vecmath COMMAND xfuse_vecmath_check)

# The fused kernels' CUDA C: NVRTC compiles them (sm_90), and the
# CPU emulation of the CUDA kernels agrees with the CPU kernels, on a
# pre-norm block (layernorm_grad + residual add, gemm epilogues with GELU,
# GELU' and the bias gradient's column sums, softmax + cross-entropy).
if(KILN_HAVE_CUDA)
  # sm_90 only (the H200's): the generated kernels carry no per-architecture
  # code, and cuda.nvrtc.* compile the examples' kernels (the GPT's
  # transformer kernels among them) for sm_80 too; the spill check per
  # architecture is cudaattn.nvrtc's for the hand-written tiled kernels.
  add_test(NAME fusion.cuda.nvrtc COMMAND nvrtc_check --arch sm_90 tests/grad/transformer_fusions.kl tests/fusion/block.kl
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  add_test(NAME fusion.cuda.emulate COMMAND kernel_check --emulate --batch 2 tests/fusion/block.kl
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(fusion.cuda.nvrtc fusion.cuda.emulate PROPERTIES SKIP_RETURN_CODE 77
    ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
endif()
# The tanh-form GELU's gradient computes its tanh once (one pass, shared
# subexpressions).
add_test(NAME fusion.gelu_tanh_once COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/fusion/gelu_tanh_once.sh ${KILN_EXE}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
