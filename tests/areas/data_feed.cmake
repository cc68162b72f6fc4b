# The data path and the session's neighbours (docs/notes/datapath.md).

# ---- no runtime file both uses and is used by the session; the host
# values (kl_load_as, kl_store_as, kl_init_values) live apart from it ----
add_test(NAME layering.session COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/build/layering_session.py ${CMAKE_BINARY_DIR})

# ---- the loader writes each field in its input's dtype (short batches
# padded) and train_feed copies it in with no allocation on the step's
# thread (counted through --wrap of the allocators) ----
add_executable(data_feed_check data/feed_check.c)
target_link_libraries(data_feed_check PRIVATE kiln)
target_include_directories(data_feed_check PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_link_options(data_feed_check PRIVATE
  "LINKER:--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=posix_memalign,--wrap=aligned_alloc")
add_test(NAME data.feed COMMAND data_feed_check)
set_tests_properties(data.feed PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
# ---- two inputs on one field: the same dtype fed from one buffer, two
# dtypes refused at start ----
add_test(NAME data.feed_dtypes COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/data/feed_dtypes.sh ${KILN_EXE}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(data.feed_dtypes PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
