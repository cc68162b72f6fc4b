# Bad input and fault injection (the harden area): the fuzzers' reproducers
# as regression tests, new users' models against the f64 reference and
# finite differences, and the generated C built for other x86-64 CPUs.

# A key bias's gradient is zero in exact arithmetic (softmax ignores a
# shift shared by every key): at --batch 2 its f32 rounding noise was
# 1.16e-4 of its own size. reference_check now measures a sum against the
# size of its terms (ref_mass).
add_test(NAME harden.reference.gpt_batch2 COMMAND reference_check examples/gpt.kl --batch 2
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(harden.reference.gpt_batch2 PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
