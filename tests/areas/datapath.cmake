# The data path and the session's neighbours (docs/notes/datapath.md).

# ---- no runtime file both uses and is used by the session; the host
# values (kl_load_as, kl_store_as, kl_init_values) live apart from it ----
add_test(NAME layering.session COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/layering_session.py ${CMAKE_BINARY_DIR})
