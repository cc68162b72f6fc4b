# Jobs across hosts (tests/ranks/hosts.sh): two network namespaces joined
# by a veth pair, Open MPI over TCP between them; skips (77) where
# namespaces cannot be made (not root, no CAP_NET_ADMIN, no ip).
foreach(case dp pipeline files)
  add_test(NAME hosts.two_netns.${case} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/ranks/hosts.sh ${KILN_EXE} ${case}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(hosts.two_netns.${case} PROPERTIES SKIP_RETURN_CODE 77
                       ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
endforeach()
