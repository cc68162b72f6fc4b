# ---- bf16 GEMMs on the CPU: the fallback path, KILN_BF16_GEMM, --fp32-gemm ----
# The CNN's bf16 step against the f64 reference evaluator with the bf16
# GEMMs forced onto the fallback path (operands widened to fp32 for
# OpenBLAS's sgemm, as on a CPU without bf16 instructions):
# precision.reference.fashion_cnn.bf16 covers the oneDNN path the same way.
add_test(NAME precision.reference.fashion_cnn.bf16_fallback
         COMMAND reference_check examples/fashion_cnn.kl --batch 4 --set precision=bf16
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(precision.reference.fashion_cnn.bf16_fallback PROPERTIES
  ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache;KILN_BF16_GEMM=openblas")

# KILN_BF16_GEMM end to end: the start-up line names it, the losses are
# those of --bf16-gemm openblas bit for bit, a flag wins over it, and a bad
# value is refused naming the variable.
add_test(NAME precision.bf16_gemm_env COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/precision/bf16_gemm_env.sh ${KILN_EXE}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(precision.bf16_gemm_env PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")

# --fp32-gemm / KILN_FP32_GEMM: who runs fp32 GEMMs (OpenBLAS or oneDNN's
# sgemm), in the training executable and in kiln bench.
add_test(NAME precision.fp32_gemm COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/precision/fp32_gemm.sh ${KILN_EXE}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(precision.fp32_gemm PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")

# Widened GEMM operands kept within a step (plan/gemm_reuse.c,
# KILN_GEMM_REUSE): every reuse compared with a new widening, and the
# checkpoints of fp16 (with skipped steps, resumed), widened bf16, the
# fp16 CNN and fp16 ZeRO-3 on 2 ranks the same byte for byte as without
# keeping.
add_test(NAME precision.gemm_reuse COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/precision/gemm_reuse.sh ${KILN_EXE}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(precision.gemm_reuse PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
