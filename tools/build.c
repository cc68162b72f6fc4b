/* kiln build and kiln run: model file -> training executable.
 *
 * The executable holds the model's source (it lowers it again at start, so
 * flags such as --batch can change shapes) and the kernels of the plans
 * the train block implies, compiled here by the host compiler. A plan that
 * flags change is compiled at run time and cached. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "build.h"
#include "driver/compile.h"
#include "ir/train_config.h"
#include "runtime/exec/backend.h"
#include "driver/budget.h"
#include "runtime/data/data.h"
#include "runtime/cpu/spawn.h"
#include "driver/train.h"
#include "runtime/files/outfile.h"
#include "codegen/kir.h"
#ifdef KILN_HAVE_CUDA
#include "runtime/exec/nvrtc.h"
#endif

typedef KL_VEC(char *) name_list;

/* Where libkiln.a is: next to this kiln binary (the build tree), else
 * ../lib (an install), else where CMake built it. */
static char *find_library(void)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    struct stat st;
    if (n > 0) {
        self[n] = 0;
        char *slash = strrchr(self, '/');
        if (slash) {
            *slash = 0;
            char *p = kl_xasprintf("%s/libkiln.a", self);
            if (stat(p, &st) == 0)
                return p;
            free(p);
            p = kl_xasprintf("%s/../lib/libkiln.a", self);
            if (stat(p, &st) == 0)
                return p;
            free(p);
        }
    }
#ifdef KILN_LIB_DIR
    char *p = kl_xasprintf("%s/libkiln.a", KILN_LIB_DIR);
    if (stat(p, &st) == 0)
        return p;
    free(p);
#endif
    return NULL;
}

static void escape_c(kl_buf *b, const char *s, size_t len)
{
    kl_buf_putc(b, '"');
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            kl_buf_printf(b, "\\%c", c);
        else if (c == '\n')
            kl_buf_puts(b, "\\n\"\n\"");
        else if (c < 32 || c >= 127)
            kl_buf_printf(b, "\\%03o", c);
        else
            kl_buf_putc(b, (char)c);
    }
    kl_buf_putc(b, '"');
}

static int write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        kl_error("%s: %s", path, strerror(errno));
        return -1;
    }
    bool ok = fputs(text, f) >= 0;
    ok = fclose(f) == 0 && ok;
    if (!ok)
        kl_error("%s: write failed", path);
    return ok ? 0 : -1;
}

/* Adds the kernels of one plan of the model (lowered with overrides);
 * their CUDA programs to cuda (parallel to names) when it is not NULL. */
static int collect(const kl_source *src, const char *const *kv, kl_mode mode, kl_buf *kernels, name_list *names,
                   name_list *srcs, name_list *cuda)
{
    kl_compile_opts co = {.kv = kv, .mode = mode};
    kl_compiled *c = kl_compile_source(src, &co);
    if (!c)
        return -1;
    const kl_plan *p = c->plan;
    for (int i = 0; i < p->kernels.n; i++) {
        bool seen = false;
        for (int j = 0; j < names->n && !seen; j++)
            seen = !strcmp(names->v[j], p->kernels.v[i].name);
        if (seen)
            continue;
        kl_vec_push(*names, kl_xstrdup(p->kernels.v[i].name));
        kl_vec_push(*srcs, kl_xstrdup(p->kernels.v[i].c_src));
        if (cuda)
            kl_vec_push(*cuda, kir_cuda_program(p->kernels.v[i].cuda.src, p->kernels.v[i].cuda.needs));
        kl_buf_puts(kernels, p->kernels.v[i].c_src);
        kl_buf_putc(kernels, '\n');
    }
    kl_compiled_free(c);
    return 0;
}

/* The CUDA kernels for each architecture: CUBINs written into dir and an
 * assembler file that includes them (.incbin), plus their table in C
 * (appended to main_c). */
static int embed_cuda(const char *archs, const name_list *names, const name_list *programs, const char *dir, kl_buf *main_c,
                      char **asm_path)
{
#ifdef KILN_HAVE_CUDA
    kl_buf s = {0}, table = {0};
    int rc = 0, nimg = 0;
    char *list = kl_xstrdup(archs);
    kl_buf_puts(&s, "    .section .rodata\n");
    for (char *save = NULL, *arch = strtok_r(list, ",", &save); arch && !rc; arch = strtok_r(NULL, ",", &save)) {
        kl_nvrtc_job *jobs = kl_xcalloc((size_t)names->n + 1, sizeof *jobs);
        for (int i = 0; i < names->n; i++) {
            jobs[i].name = names->v[i];
            jobs[i].src = programs->v[i];
        }
        kl_nvrtc_opts o = {.arch = arch};
        if (kl_nvrtc_compile(jobs, names->n, &o))
            rc = -1;
        for (int i = 0; i < names->n && !rc; i++, nimg++) {
            char *path = kl_xasprintf("%s/k%d.cubin", dir, nimg);
            FILE *f = fopen(path, "wb");
            bool ok = f && fwrite(jobs[i].image, 1, jobs[i].size, f) == jobs[i].size;
            if (f)
                ok = fclose(f) == 0 && ok;
            if (!ok) {
                kl_error("%s: cannot write", path);
                rc = -1;
            }
            kl_buf_printf(&s, "    .globl kl_cubin_%d\n    .balign 16\nkl_cubin_%d:\n    .incbin \"%s\"\n", nimg, nimg, path);
            kl_buf_printf(main_c, "extern const unsigned char kl_cubin_%d[];\n", nimg);
            kl_buf_printf(&table, "    {\"%s\", \"sm_%s\", kl_cubin_%d, %zu},\n", names->v[i],
                          strrchr(arch, '_') ? strrchr(arch, '_') + 1 : arch, nimg, jobs[i].size);
            free(path);
        }
        kl_nvrtc_jobs_free(jobs, names->n);
    }
    free(list);
    kl_buf_puts(&s, "    .section .note.GNU-stack,\"\",@progbits\n");
    kl_buf_puts(main_c, "typedef struct { const char *name, *arch; const unsigned char *image; size_t size; } kl_cuda_builtin;\n"
                        "void kl_cuda_set_builtins(const kl_cuda_builtin *table);\n"
                        "static const kl_cuda_builtin cuda_kernels[] = {\n");
    kl_buf_puts(main_c, table.s ? table.s : "");
    kl_buf_puts(main_c, "    {NULL, NULL, NULL, 0},\n};\n");
    *asm_path = kl_xasprintf("%s/cuda_kernels.s", dir);
    if (!rc && write_text(*asm_path, s.s))
        rc = -1;
    kl_buf_free(&s);
    kl_buf_free(&table);
    return rc;
#else
    (void)archs, (void)names, (void)programs, (void)dir, (void)main_c, (void)asm_path;
    kl_error("--cuda-arch: this build of Kiln has no CUDA support (built without the CUDA toolkit)");
    return -1;
#endif
}

char *kl_build_temp_dir(const char *what)
{
    const char *t = getenv("TMPDIR");
    bool ok = t && t[0] == '/' && strlen(t) < PATH_MAX - 32;
    for (const char *c = t; ok && *c; c++)
        ok = *c != '"' && *c != '\\' && (unsigned char)*c >= 0x20;
    char *tmpl = kl_xasprintf("%s/kiln-%s-XXXXXX", ok ? t : "/tmp", what);
    if (mkdtemp(tmpl))
        return tmpl;
    kl_error("cannot make a temporary folder in %s: %s", ok ? t : "/tmp", strerror(errno));
    free(tmpl);
    return NULL;
}

void kl_build_remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        for (struct dirent *e; (e = readdir(d));)
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
                unlinkat(dirfd(d), e->d_name, 0);
        closedir(d);
    }
    rmdir(dir);
}

int kl_build_executable(const char *model_path, const char *out, const char *const *kv, bool verbose)
{
    return kl_build_executable_cuda(model_path, out, kv, verbose, NULL);
}

int kl_build_executable_cuda(const char *model_path, const char *out, const char *const *kv, bool verbose,
                             const char *cuda_archs)
{
    kl_source src;
    if (kl_outfile_check(out, "the executable") || kl_source_read(&src, model_path))
        return -1;
    name_list cuda = {0};
    char *asm_path = NULL;
    int rc = -1;
    char *lib = NULL, *dir = NULL;
    bool keep_dir = false;
    name_list names = {0}, srcs = {0}; /* each kernel's name and C source */
    char **kobj = NULL;
    kl_buf kernels = {0}, main_c = {0};
    ir_graph *g = kl_compile_load(&src, kv);
    if (!g)
        goto done;
    kl_train_config cfg;
    kl_train_read(&g->train, &cfg);
    ir_graph_free(g);
    lib = find_library();
    if (!lib) {
        kl_error("cannot find libkiln.a next to the kiln binary; build Kiln with CMake first");
        kl_train_config_free(&cfg);
        goto done;
    }

    /* The kernels of the training plan and the evaluation plans. */
    kl_buf_puts(&kernels, kir_c_prelude());
    if (collect(&src, kv, KL_MODE_TRAIN, &kernels, &names, &srcs, cuda_archs ? &cuda : NULL)) {
        kl_train_config_free(&cfg);
        goto done;
    }
    int nkv = 0;
    while (kv && kv[nkv])
        nkv++;
    int64_t count = kl_train_test_count(model_path, &cfg, kv, nkv);
    if (count > 0) {
        /* As the executable picks it: fitting in the training arena. */
        kl_replan rp = {&src, kv, 0, 0};
        int64_t eb = kl_eval_batch_within(&rp, count, cfg.batch, kl_eval_batch(count, cfg.batch),
                                          kl_replan_arena(&rp, NULL, KL_MODE_TRAIN, NULL));
        int64_t sizes[2] = {eb, count % eb};
        for (int i = 0; i < 2 && sizes[i]; i++) {
            const char *ekv[132];
            int n = 0;
            for (int k = 0; kv && kv[k]; k++)
                ekv[n++] = kv[k];
            char num[32];
            snprintf(num, sizeof num, "%lld", (long long)sizes[i]);
            ekv[n++] = "batch";
            ekv[n++] = num;
            ekv[n] = NULL;
            if (collect(&src, ekv, KL_MODE_EVAL, &kernels, &names, &srcs, cuda_archs ? &cuda : NULL)) {
                kl_train_config_free(&cfg);
                goto done;
            }
        }
    }
    kl_train_config_free(&cfg);

    /* main.c: the model's source and the table of its kernels. */
    kl_buf_puts(&main_c, "/* Generated by kiln build. */\n#include <stddef.h>\n"
                         "typedef struct kl_kargs kl_kargs;\n"
                         "typedef void (*kl_cpu_kernel_fn)(void *const *, const kl_kargs *);\n"
                         "typedef struct { const char *name; kl_cpu_kernel_fn fn; } kl_builtin_kernel;\n"
                         "int kl_train_main(int, char **, const char *, const char *, const kl_builtin_kernel *);\n");
    for (int i = 0; i < names.n; i++)
        kl_buf_printf(&main_c, "void %s(void *const *, const kl_kargs *);\n", names.v[i]);
    kl_buf_puts(&main_c, "static const kl_builtin_kernel kernels[] = {\n");
    for (int i = 0; i < names.n; i++)
        kl_buf_printf(&main_c, "    {\"%s\", %s},\n", names.v[i], names.v[i]);
    kl_buf_puts(&main_c, "    {NULL, NULL},\n};\n");
    if (!(dir = kl_build_temp_dir("build")))
        goto done;
    if (cuda_archs && embed_cuda(cuda_archs, &names, &cuda, dir, &main_c, &asm_path))
        goto done;
    kl_buf_puts(&main_c, "static const char model_name[] = ");
    escape_c(&main_c, model_path, strlen(model_path));
    kl_buf_puts(&main_c, ";\nstatic const char model_src[] =\n");
    escape_c(&main_c, src.text, src.len);
    kl_buf_puts(&main_c, ";\nint main(int argc, char **argv)\n{\n");
    if (cuda_archs)
        kl_buf_puts(&main_c, "    kl_cuda_set_builtins(cuda_kernels);\n");
    kl_buf_puts(&main_c, "    return kl_train_main(argc, argv, model_name, model_src, kernels);\n}\n");

    char *kpath = kl_xasprintf("%s/kernels.c", dir), *mpath = kl_xasprintf("%s/main.c", dir);
    char *log = kl_xasprintf("%s/cc.log", dir);
    /* The compiler links into a unique temporary beside out, which then
     * replaces out whole (outfile.h). */
    kl_outfile o = {0};
    /* The kernels come compiled from the kernel cache (the same plans
     * built again, or by another test or rank, compile once), in chunks
     * compiled at once; without a cache they are compiled in the link
     * below. */
    kl_jit_kernel *ks = kl_xcalloc((size_t)names.n + 1, sizeof *ks);
    for (int i = 0; i < names.n; i++)
        ks[i] = (kl_jit_kernel){names.v[i], srcs.v[i], NULL};
    kobj = kl_cpu_objects(ks, names.n, kir_c_prelude(), true);
    free(ks);
    if (write_text(kpath, kernels.s) == 0 && write_text(mpath, main_c.s) == 0 && kl_outfile_begin_external(&o, out) == 0) {
        const char *tmp_out = o.tmp;
        /* KILN_LINK_FLAGS: what libkiln.a was built with needs at link
         * time too (the sanitizers). Every path is one argument: no shell. */
        kl_argv cmd = {0};
        kl_argv_add_cc(&cmd);
        kl_argv_add_words(&cmd, KILN_LINK_FLAGS);
        kl_argv_add(&cmd, "-w");
        kl_argv_add(&cmd, "-o");
        kl_argv_add(&cmd, tmp_out);
        /* main.c from standard input: the object then names it
         * "<stdin>", not the temporary folder's random name, so two
         * builds of one model give the same executable (the sanitizers'
         * global descriptors embed the source's path). */
        kl_argv_add_words(&cmd, "-x c - -x none");
        for (int i = 0; kobj && kobj[i]; i++)
            kl_argv_add(&cmd, kobj[i]);
        if (!kobj)
            kl_argv_add(&cmd, kpath);
        if (asm_path)
            kl_argv_add(&cmd, asm_path);
        kl_argv_add(&cmd, lib);
        char *ldir = kl_xasprintf("-L%s", KILN_OPENBLAS_DIR), *rpath = kl_xasprintf("-Wl,-rpath,%s", KILN_OPENBLAS_DIR);
        kl_argv_add(&cmd, ldir);
        kl_argv_add(&cmd, rpath);
        free(ldir);
        free(rpath);
        kl_argv_add_words(&cmd, "-lopenblas -lpng -ljpeg -lz -lm -lpthread -ldl");
        if (verbose) {
            char *line = kl_argv_str(&cmd);
            kl_fprintf_escaped(stderr, "+ %s < %s\n", line, mpath);
            free(line);
        }
        char why[512];
        int st = kl_spawn_input(kl_argv_end(&cmd), mpath, log, why, sizeof why);
        kl_argv_free(&cmd);
        if (st == 0) {
            rc = kl_outfile_commit(&o, 0777);
        } else {
            kl_source lg;
            kl_error("compiling %s failed: %s; the generated sources are in %s", out, why, dir);
            keep_dir = true;
            if (kl_source_read_quiet(&lg, log) == 0) {
                fputs(lg.text, stderr);
                kl_source_free(&lg);
            }
            kl_outfile_abort(&o);
        }
    }
    free(kpath);
    free(mpath);
    free(log);
done:
    /* Kept only when the compiler failed: the error points at it. */
    if (dir && !keep_dir)
        kl_build_remove_dir(dir);
    for (int i = 0; kobj && kobj[i]; i++)
        free(kobj[i]);
    free(kobj);
    for (int i = 0; i < names.n; i++) {
        free(names.v[i]);
        free(srcs.v[i]);
    }
    kl_vec_free(names);
    kl_vec_free(srcs);
    for (int i = 0; i < cuda.n; i++)
        free(cuda.v[i]);
    kl_vec_free(cuda);
    free(asm_path);
    kl_buf_free(&kernels);
    kl_buf_free(&main_c);
    free(lib);
    free(dir);
    kl_source_free(&src);
    return rc;
}
