/* The kiln command: one subcommand per job. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "build.h"
#include "ckpt.h"
#include "pack.h"
#include "counters.h"
#include "plan_cmd.h"
#include "doctor_cmd.h"
#include "plan/memplan.h"
#include "plan/plan.h"
#include "driver/compile.h"
#include "driver/model_summary.h"
#include "ir/train_config.h"
#include "passes/passes.h"
#include "runtime/files/outfile.h"

static const char usage[] =
    "usage: kiln COMMAND [ARGS]\n"
    "\n"
    "Kiln compiles a model file into a training executable.\n"
    "\n"
    "commands:\n"
    "  build FILE -o EXE   compile a model file into a training executable\n"
    "  run FILE [ARGS]     build to a temporary file and run it with ARGS\n"
    "  ir FILE             print the IR after any pass (text or dot)\n"
    "  bench FILE          time every kernel of the training step, fused and unfused\n"
    "  ckpt CKPT           check a checkpoint and print its contents\n"
    "  export CKPT -o F    write a checkpoint's model values as safetensors\n"
    "  pack INPUT -o DIR   convert a data set to WebDataset tar shards, or text to token files\n"
    "  doctor              what Kiln finds on this machine (CPU, GPU, compilers) and whether it fits\n"
    "  counters FILE       deterministic counters of a model's plans (kernels, FLOPs, bytes)\n"
    "  plan FILE --cluster C --global-batch B   rank the parallel layouts of a model on a cluster\n"
    "\n"
    "options:\n"
    "  -h, --help     this help; `kiln COMMAND --help` for a command's\n"
    "  -V, --version  print the version\n";

static const char ir_usage[] =
    "usage: kiln ir FILE [--after STAGE|all] [--format text|dot|timeline|steps] [-o OUT]\n"
    "               [--batch N] [--set KEY=VALUE] [--eval] [--kernels] [--no-fusion]\n"
    "               [--no-verify] [--ranks N] [--summary]\n"
    "\n"
    "Reads a model file (.kl) or an IR dump (.kir), compiles it up to STAGE\n"
    "and prints the graph. The text form reads back: `kiln ir dump.kir`\n"
    "reprints a dump unchanged.\n"
    "\n"
    "  --after STAGE    stop after this stage (default: all): lower is the\n"
    "                   frontend, then the passes, then kernel lowering\n"
    "                   (kernels), memory planning and the plan check;\n"
    "                   stages: %s\n"
    "                   a pass the mode does not run is an error\n"
    "  --eval           the evaluation graph (forward only): lower, eval_mode,\n"
    "                   precision, simplify, constants, fusion, schedule\n"
    "  --format FMT     text (default), dot (Graphviz), or timeline: the arena's\n"
    "                   buffers by offset over the steps (which share memory;\n"
    "                   needs memplan or a later stage); steps: the plan's\n"
    "                   steps in order with when each runs (startup: once)\n"
    "  -o OUT           write to OUT instead of standard output\n"
    "  --batch N        bind the batch dimension to N (overrides the train block)\n"
    "  --set KEY=VALUE  override any train setting\n"
    "  --ranks N        compile for N ranks (the shard pass's all-reduces; the\n"
    "                   memory report per rank; pipeline_parallel's layout)\n"
    "  --kernels        print the generated kernels (C) instead of the graph\n"
    "                   (needs kernels or a later stage)\n"
    "  --cuda           with --kernels: the CUDA C (NVRTC) kernels instead\n"
    "  --no-fusion      one kernel per op (the unfused plan)\n"
    "  --no-verify      skip the verifier between passes\n"
    "  --summary        a table of the model's calls instead of the graph: output,\n"
    "                   params, GEMM FLOPs per sample forward and backward, saved\n"
    "                   activations, precision; the totals and the memory plan\n"
    "                   (and with --ranks, the memory per rank after sharding)\n";

static const char build_usage[] =
    "usage: kiln build FILE -o EXE [-v] [--cuda-arch sm_XY[,sm_XY...]]\n"
    "\n"
    "Compiles a model file into a training executable: the model's plans,\n"
    "their kernels compiled by the host C compiler, and the Kiln runtime.\n"
    "With --cuda-arch, their CUDA kernels too, compiled by NVRTC for each\n"
    "architecture (CUBIN) into the executable, so a GPU of that kind starts\n"
    "without compiling; other GPUs compile at start as usual.\n"
    "Run EXE --help for its flags.\n";

static const char run_usage[] =
    "usage: kiln run FILE [ARGS]\n"
    "\n"
    "Builds FILE to a temporary executable and runs it with ARGS (for\n"
    "example --epochs 1). See kiln build.\n";

/* Flags shared by commands that load a model: overrides of train keys. */
typedef struct overrides {
    const char *kv[64];
    int n;
    char *owned[32];
    int nowned;
} overrides;

static int add_override(overrides *o, const char *key, const char *value)
{
    if (o->n + 2 >= (int)KL_ARRAY_LEN(o->kv)) {
        kl_error("too many overrides");
        return -1;
    }
    o->kv[o->n++] = key;
    o->kv[o->n++] = value;
    o->kv[o->n] = NULL;
    return 0;
}

static int add_set(overrides *o, const char *arg)
{
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg) {
        kl_error("--set needs KEY=VALUE, got '%s'", arg);
        return -1;
    }
    if (o->nowned == (int)KL_ARRAY_LEN(o->owned)) {
        kl_error("too many --set flags");
        return -1;
    }
    char *key = kl_xstrndup(arg, (size_t)(eq - arg));
    o->owned[o->nowned++] = key;
    return kl_train_check_set(key, eq + 1) ? -1 : add_override(o, key, eq + 1);
}

static void free_overrides(overrides *o)
{
    for (int i = 0; i < o->nowned; i++)
        free(o->owned[i]);
}

static int write_output(const char *path, const char *text)
{
    if (!path || !strcmp(path, "-")) {
        fputs(text, stdout);
        return fflush(stdout) ? -1 : 0;
    }
    return kl_outfile_write_whole(path, text, strlen(text));
}

static int cmd_ir(int argc, char **argv)
{
    const char *file = NULL, *after = "all", *format = "text", *out = NULL;
    bool verify = true, eval = false, kernels = false, no_fusion = false, cuda = false, summary = false;
    int ranks = 1;
    overrides ov = {0};
    int rc = 1;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            char *stages = kl_compile_stage_names();
            printf(ir_usage, stages);
            free(stages);
            free_overrides(&ov);
            return 0;
        } else if (!strcmp(a, "--after") && has_val) {
            after = argv[++i];
        } else if (!strcmp(a, "--format") && has_val) {
            format = argv[++i];
        } else if (!strcmp(a, "-o") && has_val) {
            out = argv[++i];
        } else if (!strcmp(a, "--batch") && has_val) {
            if (add_override(&ov, "batch", argv[++i]))
                goto done;
        } else if (!strcmp(a, "--set") && has_val) {
            if (add_set(&ov, argv[++i]))
                goto done;
        } else if (!strcmp(a, "--ranks") && has_val) {
            char *end;
            long r = strtol(argv[++i], &end, 10);
            if (*end || end == argv[i] || r < 1 || r > 1 << 20) {
                kl_error("kiln ir: --ranks needs a count from 1 to %d, got '%s'", 1 << 20, argv[i]);
                goto done;
            }
            ranks = (int)r;
        } else if (!strcmp(a, "--no-verify")) {
            verify = false;
        } else if (!strcmp(a, "--eval")) {
            eval = true;
        } else if (!strcmp(a, "--kernels")) {
            kernels = true;
        } else if (!strcmp(a, "--cuda")) {
            cuda = true;
        } else if (!strcmp(a, "--no-fusion")) {
            no_fusion = true;
        } else if (!strcmp(a, "--summary")) {
            summary = true;
        } else if (a[0] == '-' && a[1]) {
            kl_error("kiln ir: unknown option or missing value: %s (see kiln ir --help)", a);
            goto done;
        } else if (!file) {
            file = a;
        } else {
            kl_error("kiln ir: more than one input file");
            goto done;
        }
    }
    if (!file) {
        kl_error("kiln ir: no input file (see kiln ir --help)");
        goto done;
    }
    if (!kl_compile_has_stage(after)) {
        char *stages = kl_compile_stage_names();
        kl_error("kiln ir: unknown stage '%s' (stages: %s, or all)", after, stages);
        free(stages);
        goto done;
    }
    if (strcmp(format, "text") && strcmp(format, "dot") && strcmp(format, "timeline") && strcmp(format, "steps")) {
        kl_error("kiln ir: unknown format '%s' (text, dot, timeline or steps)", format);
        goto done;
    }
    kl_compile_opts co = {.kv = ov.n ? ov.kv : NULL, .stop_after = after, .verify = verify,
                          .mode = eval ? KL_MODE_EVAL : KL_MODE_TRAIN, .no_fusion = no_fusion, .ranks = ranks};
    kl_compiled *c = kl_compile_file(file, &co);
    if (c) {
        ir_graph *g = c->g;
        char *text;
        if (!strcmp(format, "timeline") && !c->memory_planned) {
            kl_error("kiln ir: --format timeline needs the memory plan (--after memplan or later)");
            kl_compiled_free(c);
            goto done;
        }
        if (!strcmp(format, "steps") && !c->plan) {
            kl_error("kiln ir: --format steps needs kernel lowering (--after kernels or later)");
            kl_compiled_free(c);
            goto done;
        }
        if (kernels && !c->plan) {
            kl_error("kiln ir: --kernels needs kernel lowering (--after kernels or later)");
            kl_compiled_free(c);
            goto done;
        }
        if (summary && (!c->memory_planned || eval)) {
            kl_error("kiln ir: --summary needs the training plan's memory plan (no --eval; --after memplan or later)");
            kl_compiled_free(c);
            goto done;
        }
        if (summary) {
            kl_train_config cfg;
            kl_train_read(&g->train, &cfg);
            char *buf = NULL;
            size_t len = 0;
            FILE *m = open_memstream(&buf, &len);
            /* The rows of the whole model (one rank), then this rank's
             * share with --ranks. */
            kl_compiled *whole = c;
            if (ranks > 1) {
                kl_compile_opts one = co;
                one.ranks = 1;
                whole = kl_compile_file(file, &one);
            }
            if (whole)
                kl_model_summary(whole->plan, cfg.batch, cfg.accumulate > 1 ? cfg.accumulate : 1, m);
            if (whole && ranks > 1) {
                kl_model_summary_ranks(c->plan, ranks, m);
                kl_compiled_free(whole);
            }
            fclose(m);
            kl_train_config_free(&cfg);
            text = buf;
        } else if (kernels) {
            text = cuda ? plan_cuda_source(c->plan) : plan_c_source(c->plan);
        } else if (!strcmp(format, "timeline")) {
            text = plan_timeline(c->plan);
        } else if (!strcmp(format, "steps")) {
            text = plan_steps_text(c->plan);
        } else if (!strcmp(format, "dot")) {
            text = ir_print_dot(g);
        } else {
            /* After the precision pass, the bytes by kind and dtype as a
             * comment (comments read back as nothing, so the dump still
             * round-trips). */
            char *body = ir_print(g);
            bool precision = false;
            for (int i = 0; i < g->passes.n; i++)
                precision |= !strcmp(g->passes.v[i], "precision");
            kl_buf head = {0};
            if (precision) {
                char *mem = pass_memory_summary(g);
                kl_buf_printf(&head, "# memory: %s\n", mem);
                free(mem);
            }
            /* A dump reprinted without --ranks: the world its
             * collectives were made for, so that it reprints unchanged. */
            int world = ranks > 1 ? ranks : pass_graph_ranks(g);
            char *pipe = pass_pipeline_report(g, world);
            if (pipe)
                kl_buf_puts(&head, pipe);
            free(pipe);
            /* With pipeline stages the tensor-parallel groups and data
             * parallelism are a stage's (world / P ranks); the pipeline
             * report gives each stage's memory. */
            int stages = pass_pipeline_count(g);
            char *tpm = pass_tp_memory(g, stages > 1 ? world / stages : world);
            if (tpm)
                kl_buf_printf(&head, "# %s\n", tpm);
            free(tpm);
            if (precision && world > 1 && !eval && stages < 2) {
                char *rm = pass_rank_memory(g, world);
                kl_buf_printf(&head, "# memory %s\n", rm);
                free(rm);
            }
            if (c->memory_planned) {
                /* The memory plan's report, also a comment. */
                char *rep = plan_report(c->plan, 10, "# ");
                kl_buf_puts(&head, rep);
                free(rep);
            }
            kl_buf_puts(&head, body);
            free(body);
            text = kl_buf_take(&head);
        }
        rc = write_output(out, text) ? 1 : 0;
        free(text);
    }
    kl_compiled_free(c);
done:
    free_overrides(&ov);
    return rc;
}

static int cmd_build(int argc, char **argv)
{
    const char *file = NULL, *out = NULL, *archs = NULL;
    bool verbose = false;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(build_usage, stdout);
            return 0;
        } else if (!strcmp(argv[i], "-o") && i + 1 < argc) {
            out = argv[++i];
        } else if (!strcmp(argv[i], "--cuda-arch") && i + 1 < argc) {
            archs = argv[++i];
        } else if (!strcmp(argv[i], "-v")) {
            verbose = true;
        } else if (argv[i][0] == '-') {
            kl_error("kiln build: unknown option or missing value: %s (see kiln build --help)", argv[i]);
            return 1;
        } else if (!file) {
            file = argv[i];
        } else {
            kl_error("kiln build: more than one input file");
            return 1;
        }
    }
    if (!file || !out) {
        kl_error("kiln build: needs FILE and -o EXE (see kiln build --help)");
        return 1;
    }
    return kl_build_executable_cuda(file, out, NULL, verbose, archs) ? 1 : 0;
}

static volatile pid_t run_child;

static void forward_term(int sig)
{
    if (run_child > 0)
        kill(run_child, sig);
}

static int cmd_run(int argc, char **argv)
{
    if (argc < 1 || !strcmp(argv[0], "-h") || !strcmp(argv[0], "--help")) {
        fputs(run_usage, argc < 1 ? stderr : stdout);
        return argc < 1 ? 1 : 0;
    }
    char *dir = kl_build_temp_dir("run");
    if (!dir)
        return 1;
    char *exe = kl_xasprintf("%s/model", dir);
    int rc = 1;
    if (kl_build_executable(argv[0], exe, NULL, false) == 0) {
        fflush(stdout);
        /* As system() does: the terminal's SIGINT and SIGQUIT reach the
         * child (same process group) while this process waits for it and
         * then removes the temporary executable; SIGTERM is passed on. */
        struct sigaction ign = {.sa_handler = SIG_IGN}, term = {.sa_handler = forward_term}, oint, oquit, oterm;
        sigaction(SIGINT, &ign, &oint);
        sigaction(SIGQUIT, &ign, &oquit);
        pid_t pid = fork();
        if (pid == 0) {
            sigaction(SIGINT, &oint, NULL);
            sigaction(SIGQUIT, &oquit, NULL);
            argv[0] = exe;
            execv(exe, argv);
            _exit(127);
        }
        run_child = pid;
        sigaction(SIGTERM, &term, &oterm);
        int st = 0;
        pid_t w = -1;
        while (pid > 0 && (w = waitpid(pid, &st, 0)) < 0 && errno == EINTR)
            ;
        if (pid < 0)
            kl_error("kiln run: cannot start %s: %s", exe, strerror(errno));
        else if (w == pid)
            rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        sigaction(SIGTERM, &oterm, NULL);
        sigaction(SIGINT, &oint, NULL);
        sigaction(SIGQUIT, &oquit, NULL);
    }
    kl_build_remove_dir(dir);
    free(exe);
    free(dir);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(usage, stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        fputs(usage, stdout);
        return 0;
    }
    if (!strcmp(cmd, "-V") || !strcmp(cmd, "--version")) {
        printf("kiln %s\n", KILN_VERSION);
        return 0;
    }
    if (!strcmp(cmd, "ir"))
        return cmd_ir(argc - 2, argv + 2);
    if (!strcmp(cmd, "bench"))
        return kl_bench_main(argc - 2, argv + 2);
    if (!strcmp(cmd, "pack"))
        return kl_pack_main(argc - 2, argv + 2);
    if (!strcmp(cmd, "doctor"))
        return kl_doctor_main(argc - 2, argv + 2);
    if (!strcmp(cmd, "counters"))
        return kl_counters_main(argc - 2, argv + 2);
    if (!strcmp(cmd, "plan"))
        return kl_plan_main(argc - 2, argv + 2);
    if (!strcmp(cmd, "build"))
        return cmd_build(argc - 2, argv + 2);
    if (!strcmp(cmd, "run"))
        return cmd_run(argc - 2, argv + 2);
    if (!strcmp(cmd, "ckpt") || !strcmp(cmd, "export"))
        return kl_ckpt_tool_main(cmd, argc - 2, argv + 2);
    kl_error("unknown command '%s' (see kiln --help)", cmd);
    return 2;
}
