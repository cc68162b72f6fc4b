# The CUDA backend's tiled attention kernels (issue 16, deliverable 2, GPU
# half: codegen/cuda_attn.cuh, instantiated by codegen/cuda_attn.c; README:
# "CUDA attention kernels"). No GPU needed: the choice of kernel, NVRTC for
# sm_80 and sm_90, the emulator against the CPU backend with the same
# models against the f64 reference, and the occupancy check with its
# stated reasons (which it fails without).
set(KILN_CUDAATTN_MODELS tests/cudaattn/causal_t70_d32.kl tests/cudaattn/full_d64_dv48.kl
    tests/cudaattn/causal_d128.kl tests/cudaattn/causal_uneven.kl)
add_test(NAME cudaattn.choice COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cudaattn/choice.sh ${KILN_EXE}
         $<$<BOOL:${KILN_HAVE_CUDA}>:cuda> WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
foreach(m ${KILN_CUDAATTN_MODELS})
  get_filename_component(name ${m} NAME_WE)
  add_test(NAME cudaattn.reference.${name} COMMAND reference_check ${m} --batch 1 WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
endforeach()
if(KILN_HAVE_CUDA)
  add_test(NAME cudaattn.nvrtc COMMAND nvrtc_check --arch sm_80,sm_90 --precisions fp32 ${KILN_CUDAATTN_MODELS}
           tests/cudaattn/gpt2_heads.kl WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  # Each kernel twice (increasing and decreasing thread order, two grids).
  add_test(NAME cudaattn.emulate COMMAND kernel_check --emulate --batch 1 --precisions fp32 --config "train fused"
           ${KILN_CUDAATTN_MODELS} WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  add_test(NAME cudaattn.occupancy COMMAND occupancy_check --reasons tests/cudaattn/occupancy_reasons.txt
           --precisions fp32 tests/cudaattn/gpt2_heads.kl tests/cudaattn/causal_d128.kl WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  # Without the reasons, the same check fails on the attention launches.
  add_test(NAME cudaattn.occupancy_fails COMMAND occupancy_check --precisions fp32 tests/cudaattn/gpt2_heads.kl
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(cudaattn.occupancy_fails PROPERTIES
    PASS_REGULAR_EXPRESSION "FAIL: kk_[0-9a-f]+_tiled \\(attention_grad_kv, from tests/cudaattn/gpt2_heads.kl")
  # bf16 operands (precision = bf16: q, k, v and dout as bf16 bits,
  # widened as the tiles are staged): NVRTC without spills, and the
  # emulator against the CPU backend's bf16 kernels.
  add_test(NAME cudaattn.nvrtc.bf16 COMMAND nvrtc_check --arch sm_80,sm_90 --precisions bf16 tests/cudaattn/gpt2_heads.kl
           tests/cudaattn/causal_t70_d32.kl WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  add_test(NAME cudaattn.emulate.bf16 COMMAND kernel_check --emulate --batch 1 --precisions bf16 --config "train fused"
           tests/cudaattn/causal_t70_d32.kl tests/cudaattn/full_d64_dv48.kl tests/cudaattn/causal_uneven.kl
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(cudaattn.nvrtc.bf16 cudaattn.emulate.bf16 PROPERTIES
    SKIP_RETURN_CODE 77 ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
  set_tests_properties(cudaattn.nvrtc cudaattn.emulate cudaattn.occupancy cudaattn.occupancy_fails PROPERTIES
    SKIP_RETURN_CODE 77 ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
endif()
