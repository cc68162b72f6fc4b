# kiln plan (tools/plan_cmd.c, docs/guides/plan.md): the cost model's
# arithmetic against hand-computed values, the memory per rank against the
# training executable's check (a dropped layout refused by --memory-limit,
# a kept one trains), bad flags and cluster files, ZeRO's formula rows for
# the paper's Psi = 7.5e9 on 64 ranks, and on 2 CPU ranks of the MLP
# example every layout kept trains and every one dropped for memory is
# refused by the executable for the same bytes.
foreach(case arith stages memory errors zero trains)
  add_test(NAME plan.${case} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/plan/plan.sh ${KILN_EXE} ${case}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(plan.${case} PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
endforeach()
