# ---- 16-bit copies and F16C widening in the CPU kernels ----
# 16-bit copies (im2col, transposes) move bits instead of widening and
# narrowing each element (codegen/print_expr.c); fp16 max-pooling gradients
# widen with F16C where they sum overlapping windows (kir_kernel.scalar_f16).
add_test(NAME precision.kernels16 COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/precision/kernels16.sh ${KILN_EXE}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(precision.kernels16 PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")

# The kernels' F16C widening (kir_kernel.scalar_f16: max pooling's
# backward) against their kl_f16_to_f32 on every f16 pattern.
add_executable(test_f16c_widen unit/test_f16c_widen.c)
target_include_directories(test_f16c_widen PRIVATE ${CMOCKA_INCLUDE_DIR})
target_link_libraries(test_f16c_widen PRIVATE kiln ${CMOCKA_LIBRARIES})
add_test(NAME precision.unit.f16c_widen COMMAND test_f16c_widen)
set_tests_properties(precision.unit.f16c_widen PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
