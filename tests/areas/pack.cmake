# kiln pack (tools/pack.c) and token files (runtime/data/tokens.c).

# The token file reader: header bytes, broken files, windows.
add_executable(test_tokens unit/test_tokens.c)
target_include_directories(test_tokens PRIVATE ${CMOCKA_INCLUDE_DIR})
target_link_libraries(test_tokens PRIVATE kiln ${CMOCKA_LIBRARIES})
add_test(NAME unit.tokens COMMAND test_tokens)

# kiln pack: IDX, ImageFolder, .npy and text read back byte for byte,
# determinism, shard limits, shuffle, bad inputs and atomic output.
add_test(NAME pack.roundtrip_and_errors COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/data/pack.sh ${KILN_EXE}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})

# Kiln's shards read by the Python webdataset library (installed from PyPI
# into build/pydeps by the test; skipped only when PyPI cannot be reached).
add_test(NAME pack.webdataset COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/data/pack_webdataset.sh ${KILN_EXE}
         ${CMAKE_BINARY_DIR}/pydeps WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(pack.webdataset PROPERTIES SKIP_RETURN_CODE 77)

# kiln pack --token-ids: a tokenizer's ids (.npy) into u8/u16/u32 token
# files (GPT-2 BPE ids as u16), read back; bad arrays and flags.
add_test(NAME pack.token_ids COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/data/pack_token_ids.sh ${KILN_EXE}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
