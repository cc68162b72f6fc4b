# Every GEMM path (tests/precision/gemm_paths.sh): the f64 reference and the
# tensor-parallel and zero1 agreement under each fp32/bf16/f16 GEMM
# choice forced with KILN_FP32_GEMM, KILN_BF16_GEMM and KILN_F16_GEMM, so
# that a path only another CPU takes by default runs here too; one this
# CPU cannot take (AMX, AVX-512, oneDNN) is skipped (77) with the reason.
foreach(path f16_amx f16_avx512 f16_widened bf16_onednn bf16_kiln bf16_openblas fp32_onednn fp32_openblas)
  add_test(NAME gemmpath.${path}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/precision/gemm_paths.sh ${KILN_EXE} $<TARGET_FILE:reference_check> ${path}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(gemmpath.${path} PROPERTIES SKIP_RETURN_CODE 77
    ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
endforeach()
