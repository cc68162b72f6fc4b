# cuBLASLt GEMM epilogues (issue 16 item 3, issue 17 item 3): the plan
# records per GEMM step the CUBLASLT_EPILOGUE_* that does its epilogue
# kernel's work (plan/lt_epilogue.c); the CUDA backend applies it
# (runtime/backend_cuda_lt.c). gelu(x, approximate = "tanh") itself is
# checked by grad.gelu_tanh, reference.grad.gelu_tanh and
# errors.gelu_approximate.

# The epilogues chosen on the examples, gpt.kl and a model with every kind
# (golden).
add_test(NAME cudalt.golden COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cudalt/epilogues.sh ${KILN_EXE}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
