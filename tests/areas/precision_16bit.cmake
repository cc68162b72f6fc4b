# ---- fp16 pooling, staged f16 rows and f16 GEMMs on the CPU ----
# fp16 max pooling, its gradients and relu's gradient compare, maximise
# and store 16-bit patterns (base/scalar.h keys16, codegen/print_expr.c
# print_bits16) instead of widening and narrowing each element.
add_executable(test_keys16 unit/test_keys16.c)
target_include_directories(test_keys16 PRIVATE ${CMOCKA_INCLUDE_DIR})
target_link_libraries(test_keys16 PRIVATE kiln ${CMOCKA_LIBRARIES})
add_test(NAME precision.unit.keys16 COMMAND test_keys16)
set_tests_properties(precision.unit.keys16 PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")

# Max pooling in each form (tiled and gathering backward, padding, rows
# under and over 8) trained one step at fp16 and bf16 against the f64
# reference evaluator.
foreach(p bf16 fp16)
  add_test(NAME precision.reference.pools16.${p}
           COMMAND reference_check tests/precision/pools16.kl --batch 4 --set precision=${p}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(precision.reference.pools16.${p} PROPERTIES
    ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
endforeach()

# The staged f16 rows of leaf loops (codegen/emit_c.c: F16C a row at a
# time) against the element conversions, every f16 pattern and every
# 31st float, rows of 1 to 40.
add_executable(test_rows16 unit/test_rows16.c)
target_include_directories(test_rows16 PRIVATE ${CMOCKA_INCLUDE_DIR})
target_link_libraries(test_rows16 PRIVATE kiln ${CMOCKA_LIBRARIES})
add_test(NAME precision.unit.rows16 COMMAND test_rows16)
set_tests_properties(precision.unit.rows16 PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")

# f16 GEMMs through Kiln's kernels (runtime/cpu/gemm16.c: operands widened
# while packed, fp32 sums; on CPUs with AMX, split into exact bf16 parts
# for the tile unit) against the f64 reference at every size, the same
# bits on 1, 2 and 3 threads, inf and NaN as the FMA kernel gives them,
# which shapes auto routes where, and KILN_F16_GEMM: gemm16 on the kernel
# auto picks, gemm16_avx512 on the FMA kernel, gemm16_amx on the tile
# unit (skipped, 77, on a CPU without AMX). Skipped on a CPU without
# AVX-512.
add_executable(test_gemm16 unit/test_gemm16.c)
target_include_directories(test_gemm16 PRIVATE ${CMOCKA_INCLUDE_DIR})
target_link_libraries(test_gemm16 PRIVATE kiln ${CMOCKA_LIBRARIES})
add_test(NAME precision.unit.gemm16 COMMAND test_gemm16)
set_tests_properties(precision.unit.gemm16 PROPERTIES SKIP_RETURN_CODE 77
  ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
add_test(NAME precision.unit.gemm16_avx512 COMMAND test_gemm16)
set_tests_properties(precision.unit.gemm16_avx512 PROPERTIES SKIP_RETURN_CODE 77
  ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache;KILN_F16_GEMM=avx512")
add_test(NAME precision.unit.gemm16_amx COMMAND test_gemm16)
set_tests_properties(precision.unit.gemm16_amx PROPERTIES SKIP_RETURN_CODE 77
  ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache;KILN_F16_GEMM=amx")
