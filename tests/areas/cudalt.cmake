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

# The CUDA plan with the Lt epilogues applied by a host stand-in of each
# CUBLASLT_EPILOGUE_* (tests/cuda/lt_emu.h, on runtime/exec/cuda_lt.h's
# description of the call) against the CPU backend's GEMM + epilogue
# kernel, every configuration (train/eval, fused/unfused, fp32/bf16/fp16;
# cuda.emulate.mlp does the same for the MLP example's relu_bias and bias);
# and the tanh GELU kernels through NVRTC.
if(KILN_HAVE_CUDA)
  add_test(NAME cudalt.cuda.emulate COMMAND kernel_check --emulate --batch 16 tests/cudalt/epilogues.kl
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  add_test(NAME cudalt.cuda.nvrtc COMMAND nvrtc_check --arch sm_90 --precisions fp32,bf16 tests/cudalt/epilogues.kl
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(cudalt.cuda.emulate cudalt.cuda.nvrtc PROPERTIES SKIP_RETURN_CODE 77
    ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
endif()

# Training through the session with the epilogues done in the GEMM step (a
# CPU backend with the host stand-in as its gemm_epilogue) against the plain
# CPU backend: the covered kernel steps are skipped, and the memory plan
# keeps what the epilogue writes early apart from what is live (losses and
# parameters within 1e-5 over 5 SGD steps).
add_executable(lt_session ${CMAKE_CURRENT_SOURCE_DIR}/cudalt/lt_session.c)
target_include_directories(lt_session PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(lt_session PRIVATE kiln m)
add_test(NAME cudalt.session COMMAND lt_session tests/cudalt/epilogues.kl 5 WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(cudalt.session PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache;OMP_NUM_THREADS=1")
