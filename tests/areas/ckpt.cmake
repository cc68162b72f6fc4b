# ---- checkpoints: periodic saves, cross-precision resume, kiln ckpt,
# safetensors out and in, --eval-only and --predict ----
# Every script pins --threads 1 (lib.sh) for its bit-exact comparisons.
foreach(t periodic precision format)
  add_test(NAME ckpt.${t} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/ckpt_${t}.sh ${KILN_EXE}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(ckpt.${t} PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
endforeach()
