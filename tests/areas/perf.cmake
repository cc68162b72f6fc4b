# Performance by construction (issue 17): vector conversions, hardware bf16
# GEMMs on the CPU, --batch auto, GPU launch sizes.

# bf16/f16 conversions as the kernels run them (vectorised, with and without
# flush-to-zero), every float and every 16-bit pattern, bit for bit.
add_executable(test_halves unit/test_halves.c)
target_include_directories(test_halves PRIVATE ${CMOCKA_INCLUDE_DIR})
target_link_libraries(test_halves PRIVATE kiln ${CMOCKA_LIBRARIES})
add_test(NAME unit.halves COMMAND test_halves)
set_tests_properties(unit.halves PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")

# bf16 GEMMs through oneDNN and through OpenBLAS (widened) against an f64
# reference; skipped (77) where oneDNN cannot run bf16 here.
add_executable(test_dnnl unit/test_dnnl.c)
target_include_directories(test_dnnl PRIVATE ${CMOCKA_INCLUDE_DIR})
target_link_libraries(test_dnnl PRIVATE kiln ${CMOCKA_LIBRARIES})
add_test(NAME unit.dnnl COMMAND test_dnnl)
set_tests_properties(unit.dnnl PROPERTIES SKIP_RETURN_CODE 77)

# The CNN in bf16 through oneDNN and OpenBLAS: start-up line, determinism,
# agreement, refused settings.
add_test(NAME perf.bf16_gemm COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/precision/bf16_gemm.sh ${KILN_EXE}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(perf.bf16_gemm PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache"
                     SKIP_RETURN_CODE 77)

# --batch auto against the memory plan's own numbers.
add_test(NAME perf.batch_auto COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/memplan/batch_auto.sh ${KILN_EXE}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(perf.batch_auto PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")

# The kernels' transcendentals (glibc's libmvec through the prelude's SIMD
# declarations): each function's ulp error against the f64 reference over
# the float line, edges and switch points; the AVX2 and SSE variants that
# other CPUs call through KILN_MARCH (the checker compiled for them).
add_executable(test_vmath unit/test_vmath.c)
target_include_directories(test_vmath PRIVATE ${CMOCKA_INCLUDE_DIR})
target_link_libraries(test_vmath PRIVATE kiln ${CMOCKA_LIBRARIES})
add_test(NAME unit.vmath COMMAND test_vmath)
add_test(NAME unit.vmath.avx2 COMMAND test_vmath)
add_test(NAME unit.vmath.sse COMMAND test_vmath)
set_tests_properties(unit.vmath PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
set_tests_properties(unit.vmath.avx2 PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache;KILN_MARCH=x86-64-v3")
set_tests_properties(unit.vmath.sse PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache;KILN_MARCH=x86-64")
