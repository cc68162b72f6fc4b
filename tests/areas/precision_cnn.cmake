# ---- bf16/fp16 CNN kernels on the CPU ----
# The CNN's step in bf16 against the f64 reference evaluator: covers the
# stride-1 col2im that sums each input gradient's taps in f32 and rounds
# once (codegen/k_conv.c, col2im_gather) with bf16 operands. f32 and fp16
# runs of the same kernel are covered by reference.examples.fashion_cnn*,
# grad.conv2d* and reference.grad.conv2d*.
add_test(NAME precision.reference.fashion_cnn.bf16
         COMMAND reference_check examples/fashion_cnn.kl --batch 4 --set precision=bf16
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(precision.reference.fashion_cnn.bf16 PROPERTIES
  ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
