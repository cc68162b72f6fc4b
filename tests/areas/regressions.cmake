# ---- small known bugs, each with the test that failed before its fix ----
function(kiln_regression_test name script)
  add_test(NAME ${name} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/${script} ${KILN_EXE} ${ARGN}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(${name} PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
endfunction()
# kiln build precompiles shards data's evaluation kernels.
kiln_regression_test(build.shards_eval build/build_shards_eval.sh)
# --set KEY=VALUE errors name --set KEY.
kiln_regression_test(cli.set_labels build/set_labels.sh)
# A run resumed at its last step reports the epoch of its evaluation.
kiln_regression_test(ckpt.resume_at_end ckpt/resume_at_end.sh)
# An fp16 run whose last step was skipped saves, and resumes exactly.
kiln_regression_test(ckpt.fp16_skipped_save ckpt/fp16_skipped_save.sh)
# --eval-only opens the test split alone.
kiln_regression_test(data.eval_only data/eval_only_data.sh)
# bench/pack_pystd.sh packs the stdlib's own .py files, not its site-packages.
kiln_regression_test(pack.pystd build/pack_pystd.sh)
