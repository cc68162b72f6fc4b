# The fused attention op (issue 16, deliverable 2): attention(q, k, v,
# causal, scale). The op corpora register their own cases (tests/grad:
# finite differences in f64 and, through reference_check, the f64
# reference; tests/errors: bad calls); here: fused equals composed in f32,
# the memory plan's scores do not grow as T^2, bf16, and the CUDA
# printer's path through NVRTC and the emulator.
add_executable(attn_equiv attention/attn_equiv.c)
target_link_libraries(attn_equiv PRIVATE kiln m)
foreach(kind causal full)
  add_test(NAME attn.equiv.${kind} COMMAND attn_equiv tests/attention/fused_${kind}.kl tests/attention/composed_${kind}.kl
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(attn.equiv.${kind} PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
endforeach()
# The attention kernels through NVRTC (sm_90) and run on the CPU
# by the CUDA emulator against the CPU backend, f32 and the low precisions.
if(KILN_HAVE_CUDA)
  set(KILN_ATTN_CUDA_MODELS tests/attention/fused_causal.kl tests/attention/fused_full.kl tests/grad/attention.kl
      tests/attention/causal_fused.kl)
  # sm_90 only (the H200's): the generated kernels carry no per-architecture
  # code, and cuda.nvrtc.* compile the examples' kernels (the GPT's
  # transformer kernels among them) for sm_80 too; the spill check per
  # architecture is cudaattn.nvrtc's for the hand-written tiled kernels.
  add_test(NAME attn.cuda.nvrtc COMMAND nvrtc_check --arch sm_90 ${KILN_ATTN_CUDA_MODELS}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  add_test(NAME attn.cuda.emulate COMMAND kernel_check --emulate --batch 4 ${KILN_ATTN_CUDA_MODELS}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(attn.cuda.nvrtc attn.cuda.emulate PROPERTIES SKIP_RETURN_CODE 77
    ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
endif()
# The arena of the fused op grows as T, the composed form's as T^2.
add_test(NAME attn.memory COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/attention/memory.sh ${KILN_EXE} WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(attn.memory PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
# The causal model with the fused op trains to the composed form's losses
# (f32), and trains in bf16; and both precisions against the f64 reference.
add_test(NAME attn.train COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/attention/train.sh ${KILN_EXE} WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
add_test(NAME attn.reference.causal_fused COMMAND reference_check tests/attention/causal_fused.kl --batch 4 WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
add_test(NAME attn.reference.causal_fused.bf16 COMMAND reference_check tests/attention/causal_fused.kl --batch 4 --set precision=bf16
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
# precision = bf16 feeds attention bf16 q, k, v and dout (no casts), f32 results.
add_test(NAME attn.bf16_operands COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/attention/bf16_operands.sh ${KILN_EXE}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(attn.train attn.reference.causal_fused attn.reference.causal_fused.bf16 PROPERTIES
  ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
