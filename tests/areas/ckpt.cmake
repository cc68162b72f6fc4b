# ---- checkpoints: periodic saves, cross-precision resume, kiln ckpt,
# safetensors out and in, --eval-only and --predict ----
# Every script pins --threads 1 (lib.sh) for its bit-exact comparisons.
foreach(t periodic precision format)
  add_test(NAME ckpt.${t} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/ckpt/${t}.sh ${KILN_EXE}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(ckpt.${t} PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
endforeach()
# safetensors and numpy from PyPI into the build folder, once (a skip
# when PyPI cannot be reached); the tests that read Kiln's files with
# them need it.
add_test(NAME ckpt.pydeps COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/ckpt/pydeps.sh ${CMAKE_BINARY_DIR}/pydeps)
set_tests_properties(ckpt.pydeps PROPERTIES FIXTURES_SETUP ckpt_pydeps SKIP_RETURN_CODE 77)
foreach(t safetensors eval)
  add_test(NAME ckpt.${t} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/ckpt/${t}.sh ${KILN_EXE} ${CMAKE_BINARY_DIR}/pydeps
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(ckpt.${t} PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache"
                       FIXTURES_REQUIRED ckpt_pydeps SKIP_RETURN_CODE 77)
endforeach()
# Mutated checkpoints and safetensors files: read whole or refused, no crash.
add_executable(ckpt_mutate ckpt/mutate.c)
target_link_libraries(ckpt_mutate PRIVATE kiln)
add_test(NAME ckpt.mutate COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/ckpt/mutate.sh ${KILN_EXE} $<TARGET_FILE:ckpt_mutate>
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(ckpt.mutate PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
# --eval-only on shards without a test split: refused, not a crash.
add_test(NAME ckpt.eval_nosplit COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/ckpt/eval_nosplit.sh ${KILN_EXE}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(ckpt.eval_nosplit PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
# kiln ckpt, kiln export and --resume refuse the same crafted values
# (kl_ckpt_validate: inf or nan, a negative Adam second moment, a loss
# scale that is not a normal fp32 number).
add_test(NAME ckpt.validate COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/ckpt/validate.sh ${KILN_EXE}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(ckpt.validate PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
# A preemption signal never lands inside oneDNN's fp32 GEMM, whose JIT
# kernels run with the stack pointer in a heap workspace: SIGUSR1 every
# 20 us during GEMMs, every handler's frame on the main thread's stack.
add_executable(ckpt_preempt_gemm ckpt/preempt_gemm.c)
target_link_libraries(ckpt_preempt_gemm PRIVATE kiln)
add_test(NAME ckpt.preempt_gemm COMMAND ckpt_preempt_gemm)
set_tests_properties(ckpt.preempt_gemm PROPERTIES SKIP_RETURN_CODE 77)
