# ---- 16-bit direct convolutions on the CPU ----
# Direct (first-layer) convolutions with 3 channels, stride 2, padding and
# dilation, trained one step at bf16 and fp16 against the f64 reference
# evaluator: their padded input is widened to f32 once (codegen/k_conv.c).
foreach(p bf16 fp16)
  add_test(NAME precision.reference.direct_conv.${p}
           COMMAND reference_check tests/precision/direct_conv.kl --batch 4 --set precision=${p}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(precision.reference.direct_conv.${p} PROPERTIES
    ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
endforeach()

# The same model's generated kernels: the pads write f32 and the direct
# kernels read it (a regression to per-channel widening keeps the values).
add_test(NAME precision.direct_conv_pad COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/precision/direct_conv_pad.sh ${KILN_EXE}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(precision.direct_conv_pad PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
