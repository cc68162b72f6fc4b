/* libarchive and libpng for kiln pack, opened with dlopen when a pack
 * starts rather than linked: the kiln binary then loads neither (nor
 * libarchive's own dependencies: libxml2, ICU, lzma, acl ...) for its other
 * commands, and it starts on machines without them (the GPU kit carries
 * only what `kiln` needs: tests/gpu/kit.sh). The headers give every
 * function's type; after this header a call such as archive_write_new()
 * goes through the loaded pointer. */
#ifndef KILN_PACK_LIBS_H
#define KILN_PACK_LIBS_H

#include <archive.h>
#include <archive_entry.h>
#include <png.h>

#define PACK_LIB_FUNCTIONS(X)                                                                          \
    X(archive_write_new) X(archive_write_set_format_pax_restricted) X(archive_write_set_bytes_per_block) \
    X(archive_write_open2) X(archive_write_close) X(archive_write_free) X(archive_error_string)         \
    X(archive_write_header) X(archive_write_data) X(archive_entry_new) X(archive_entry_clear)           \
    X(archive_entry_set_pathname) X(archive_entry_set_size) X(archive_entry_set_filetype)               \
    X(archive_entry_set_perm) X(archive_entry_set_mtime) X(archive_entry_set_uid)                       \
    X(archive_entry_set_gid) X(archive_entry_free)                                                      \
    X(png_create_write_struct) X(png_create_info_struct) X(png_destroy_write_struct)                    \
    X(png_set_longjmp_fn) X(png_set_write_fn) X(png_get_io_ptr) X(png_set_IHDR) X(png_write_info)      \
    X(png_write_row) X(png_write_end)

typedef struct pack_libs {
#define PACK_LIB_FIELD(f) __typeof__(&f) f;
    PACK_LIB_FUNCTIONS(PACK_LIB_FIELD)
#undef PACK_LIB_FIELD
} pack_libs;

extern pack_libs pack_lib;

/* Loads both libraries once; 0, or -1 after an error naming the library
 * and the package that has it. */
int pack_libs_load(void);

#ifndef PACK_LIBS_IMPL
#define archive_write_new (*pack_lib.archive_write_new)
#define archive_write_set_format_pax_restricted (*pack_lib.archive_write_set_format_pax_restricted)
#define archive_write_set_bytes_per_block (*pack_lib.archive_write_set_bytes_per_block)
#define archive_write_open2 (*pack_lib.archive_write_open2)
#define archive_write_close (*pack_lib.archive_write_close)
#define archive_write_free (*pack_lib.archive_write_free)
#define archive_error_string (*pack_lib.archive_error_string)
#define archive_write_header (*pack_lib.archive_write_header)
#define archive_write_data (*pack_lib.archive_write_data)
#define archive_entry_new (*pack_lib.archive_entry_new)
#define archive_entry_clear (*pack_lib.archive_entry_clear)
#define archive_entry_set_pathname (*pack_lib.archive_entry_set_pathname)
#define archive_entry_set_size (*pack_lib.archive_entry_set_size)
#define archive_entry_set_filetype (*pack_lib.archive_entry_set_filetype)
#define archive_entry_set_perm (*pack_lib.archive_entry_set_perm)
#define archive_entry_set_mtime (*pack_lib.archive_entry_set_mtime)
#define archive_entry_set_uid (*pack_lib.archive_entry_set_uid)
#define archive_entry_set_gid (*pack_lib.archive_entry_set_gid)
#define archive_entry_free (*pack_lib.archive_entry_free)
#define png_create_write_struct (*pack_lib.png_create_write_struct)
#define png_create_info_struct (*pack_lib.png_create_info_struct)
#define png_destroy_write_struct (*pack_lib.png_destroy_write_struct)
#define png_set_longjmp_fn (*pack_lib.png_set_longjmp_fn)
#define png_set_write_fn (*pack_lib.png_set_write_fn)
#define png_get_io_ptr (*pack_lib.png_get_io_ptr)
#define png_set_IHDR (*pack_lib.png_set_IHDR)
#define png_write_info (*pack_lib.png_write_info)
#define png_write_row (*pack_lib.png_write_row)
#define png_write_end (*pack_lib.png_write_end)
#endif

#endif
