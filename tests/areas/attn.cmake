# The fused attention op (issue 16, deliverable 2): attention(q, k, v,
# causal, scale). The op corpora register their own cases (tests/grad:
# finite differences in f64 and, through reference_check, the f64
# reference; tests/errors: bad calls); here: fused equals composed in f32,
# the memory plan's scores do not grow as T^2, bf16, and the CUDA
# printer's path through NVRTC and the emulator.
add_executable(attn_equiv attn/attn_equiv.c)
target_link_libraries(attn_equiv PRIVATE kiln m)
foreach(kind causal full)
  add_test(NAME attn.equiv.${kind} COMMAND attn_equiv tests/attn/fused_${kind}.kl tests/attn/composed_${kind}.kl
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(attn.equiv.${kind} PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
endforeach()
