/* kiln build (tools/build.c). */
#ifndef KILN_BUILD_H
#define KILN_BUILD_H

#include <stdbool.h>

/* Compiles the model file into a training executable at out. kv: train
 * settings to apply while choosing which plans to precompile (NULL-ended
 * key, value pairs; may be NULL). Returns 0 or -1 after an error. */
int kl_build_executable(const char *model_path, const char *out, const char *const *kv, bool verbose);
/* The same, with the CUDA kernels compiled for each architecture of
 * cuda_archs ("sm_80,sm_90"; NULL: none) into the executable. */
int kl_build_executable_cuda(const char *model_path, const char *out, const char *const *kv, bool verbose,
                             const char *cuda_archs);
/* A new folder (0700) for a build's temporaries: $TMPDIR/kiln-WHAT-XXXXXX
 * when TMPDIR is an absolute path an assembler can quote, else in /tmp.
 * Caller frees; NULL after an error (reported). */
char *kl_build_temp_dir(const char *what);
/* Removes such a folder and the files in it (it holds only files). */
void kl_build_remove_dir(const char *dir);

#endif
