/* Opens libarchive and libpng for kiln pack: see pack_libs.h. */
#define PACK_LIBS_IMPL
#include <dlfcn.h>
#include <stdbool.h>

#include "pack_libs.h"
#include "base/support.h"

pack_libs pack_lib;

static void *open_lib(const char *soname, const char *package)
{
    void *h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        kl_error("kiln pack needs %s: %s\n---> install the package %s (scripts/setup.sh does)", soname, dlerror(),
                 package);
    return h;
}

int pack_libs_load(void)
{
    static bool loaded;
    if (loaded)
        return 0;
    void *la = open_lib("libarchive.so.13", "libarchive13"), *png = la ? open_lib("libpng16.so.16", "libpng16-16") : NULL;
    if (!png)
        return -1;
    /* A function's library is the one its name says. */
#define PACK_LIB_LOAD(f)                                                                   \
    *(void **)&pack_lib.f = dlsym(#f[0] == 'a' ? la : png, #f);                            \
    if (!pack_lib.f) {                                                                     \
        kl_error("kiln pack: %s has no %s: %s", #f[0] == 'a' ? "libarchive" : "libpng", #f, dlerror()); \
        return -1;                                                                         \
    }
    PACK_LIB_FUNCTIONS(PACK_LIB_LOAD)
#undef PACK_LIB_LOAD
    loaded = true;
    return 0;
}
