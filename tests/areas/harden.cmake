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

# New users' models: ops in combinations the examples and the per-op
# gradient models leave out (tests/harden/models/*.kl, f64): finite
# differences (gradcheck) and the f64 reference (reference_check).
file(GLOB KILN_HARDEN_MODELS RELATIVE ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/tests/harden/models/*.kl)
foreach(case ${KILN_HARDEN_MODELS})
  get_filename_component(name ${case} NAME_WE)
  add_test(NAME harden.grad.${name} COMMAND gradcheck ${case} WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  add_test(NAME harden.reference.${name} COMMAND reference_check ${case} WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(harden.grad.${name} harden.reference.${name} PROPERTIES
    ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
endforeach()

# What the fuzzer (tests/fuzz/cli_fuzz.py) found, as regression tests:
# flags named as typed, an empty --data, a label out of range named by
# file and sample, a KILN_MARCH that is not one word.
add_test(NAME harden.inputs COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/harden/inputs.sh ${KILN_EXE}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(harden.inputs PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")

# Generated C for other x86-64 CPUs: the kernels compiled for the x86-64
# baseline (SSE2) and for x86-64-v3 (AVX2, FMA) instead of this CPU
# (KILN_MARCH), against the f64 reference. (Results differ in the last
# bits between the two: an `omp simd` reduction sums in as many lanes as
# the target has; each is checked against the reference, not the other.)
foreach(march x86-64 x86-64-v3)
  foreach(model mlp fashion_cnn)
    add_test(NAME harden.march.${march}.${model} COMMAND reference_check examples/${model}.kl --batch 4
             WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
    set_tests_properties(harden.march.${march}.${model} PROPERTIES
      ENVIRONMENT "KILN_MARCH=${march};KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
  endforeach()
endforeach()
