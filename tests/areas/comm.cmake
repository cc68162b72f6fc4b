# The collective runtime (tests/ranks/comm/): the bottleneck verdict's exposed
# collective time, overlap under accumulation, NCCL for the CUDA backend.
add_test(NAME comm.profile COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/ranks/comm/profile.sh ${KILN_EXE}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(comm.profile PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")

# NCCL for the CUDA backend (runtime/exec/nccl.c) without a GPU: the real
# libnccl's entry points, and the error paths through a fake libnccl.
if(KILN_NCCL_INCLUDE AND TARGET kiln)
  add_executable(nccl_check ranks/comm/nccl_check.c)
  target_link_libraries(nccl_check PRIVATE kiln)
  add_library(fake_nccl SHARED ranks/comm/fake_nccl.c)
  add_library(fake_nccl_partial SHARED ranks/comm/fake_nccl.c)
  foreach(fake fake_nccl fake_nccl_partial)
    target_include_directories(${fake} PRIVATE ${KILN_NCCL_INCLUDE})
    target_compile_options(${fake} PRIVATE -Wno-unused-parameter)
  endforeach()
  target_compile_definitions(fake_nccl_partial PRIVATE OMIT_BROADCAST=1)
  add_test(NAME comm.nccl COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/ranks/comm/nccl.sh $<TARGET_FILE:nccl_check>
           $<TARGET_FILE:fake_nccl> $<TARGET_FILE:fake_nccl_partial> WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(comm.nccl PROPERTIES SKIP_RETURN_CODE 77)
endif()

# Overlap under accumulation: the schedule and bit-identical training.
add_test(NAME comm.accum COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/ranks/comm/accum.sh ${KILN_EXE}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(comm.accum PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
