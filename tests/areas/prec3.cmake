# ---- CPU bf16/fp16 step time, third round (issue 17: prec3) ----
# 16-bit copies (im2col, transposes) move bits instead of widening and
# narrowing each element (codegen/print_expr.c).
add_test(NAME prec3.copy16 COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/prec3/copy16.sh ${KILN_EXE}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(prec3.copy16 PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
