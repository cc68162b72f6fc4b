# Data: WebDataset tar shards, the loader, bad data (issue 13's reading
# side). Scripts and helpers live in tests/data/.
add_executable(data_loader_check data/loader_check.c)
target_link_libraries(data_loader_check PRIVATE kiln)

# The loader on shards whose labels number the samples: each exactly once
# per epoch, the same order for any worker count, streamed or cached, and
# a mid-epoch start that continues the epoch.
add_test(NAME data.loader COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/data/loader.sh $<TARGET_FILE:data_loader_check>
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})

# Fashion-MNIST as PNG shards trains the CNN as the IDX files do (bit for
# bit unshuffled); workers, cache and a mid-epoch resume change nothing.
add_test(NAME data.shards_train COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/data/shards_train.sh ${KILN_EXE}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(data.shards_train PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")

# Bad shards and settings: the shard, member and reason; on_error = skip.
add_test(NAME data.bad_shards COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/data/bad_shards.sh ${KILN_EXE}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(data.bad_shards PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")

# Shards written by the webdataset library (from PyPI) read in Kiln.
add_test(NAME data.webdataset COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/data/webdataset.sh ${KILN_EXE}
         $<TARGET_FILE:data_loader_check> ${CMAKE_BINARY_DIR}/pydeps WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(data.webdataset PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache"
                     SKIP_RETURN_CODE 77)

# Augmentation (random crop, flip, normalisation) against an independent
# Python computation, streamed and cached.
add_test(NAME data.augment COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/data/augment.sh $<TARGET_FILE:data_loader_check>
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})

# The data cache: a gzip IDX file inflated once, its entry checked against
# the file and its data before use (flipped, short, planted, linked,
# foreign, stale entries), removed when its file is gone.
add_test(NAME data.idx_cache COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/data/idx_cache.sh ${KILN_EXE}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(data.idx_cache PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache"
                     SKIP_RETURN_CODE 77)
