# Sums over leading axes (issue 16: the GPT step's bias gradients, widths
# 48/24/12/6, fused producers, mean, keepdim): the kernels against the f64
# reference (fused and unfused plans), and their gradients in f64 by
# finite differences.
add_test(NAME sumto.reference COMMAND reference_check tests/language/leading_sums.kl WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
add_test(NAME sumto.grad COMMAND gradcheck tests/language/leading_sums_f64.kl WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(sumto.reference sumto.grad PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")

# Gradient clipping's squared norms, one multi-tensor kernel per 16
# gradients (passes/fusion.c grad_norms, codegen/k_reduce.c
# build_full_sums): the groups, and the clipped step against the reference.
add_test(NAME sumto.grad_norms COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/language/grad_norms.sh ${KILN_EXE}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
add_test(NAME sumto.reference.clip COMMAND reference_check tests/language/leading_sums.kl --set clip=0.05
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(sumto.reference.clip PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")

# The one-pass CPU form of a GEMM epilogue with bias gradients against
# the two-pass form, bit for bit (codegen/k_colsum.c one_pass_host_body).
add_test(NAME sumto.one_pass COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/language/one_pass.sh ${KILN_EXE}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(sumto.one_pass PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
