# Performance by construction (issue 17): vector conversions, hardware bf16
# GEMMs on the CPU, --batch auto, GPU launch sizes.

# bf16/f16 conversions as the kernels run them (vectorised, with and without
# flush-to-zero), every float and every 16-bit pattern, bit for bit.
add_executable(test_halves unit/test_halves.c)
target_include_directories(test_halves PRIVATE ${CMOCKA_INCLUDE_DIR})
target_link_libraries(test_halves PRIVATE kiln ${CMOCKA_LIBRARIES})
add_test(NAME unit.halves COMMAND test_halves)
set_tests_properties(unit.halves PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
