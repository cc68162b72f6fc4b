/* The training executable's flags: its usage text, and the flags parsed
 * into train settings (--batch 64 -> "batch" = "64") and the run's own
 * options. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "trainer.h"
#include "train_progress.h"

static const char usage[] =
    "usage: %s [options]\n"
    "\n"
    "Trains the model this executable was built from (%s). Flags override\n"
    "the model file's train block.\n"
    "\n"
    "  --epochs N         passes over the training set\n"
    "  --steps N          stop after N optimizer steps\n"
    "  --batch N|auto     samples per micro-batch; auto: the largest multiple of 8\n"
    "                     whose memory plan fits --memory-limit (else the GPU's free\n"
    "                     memory), with accumulation keeping the effective batch\n"
    "  --probe            with --batch auto: also time 3 steps at the plan's choice and\n"
    "                     at two smaller multiples of 8 (dividing the effective batch\n"
    "                     when they can), and keep the fastest per sample\n"
    "  --accumulate N     micro-batches per optimizer step\n"
    "  --lr X             learning rate\n"
    "  --schedule-steps N the steps the lr schedule spans (default: the run's;\n"
    "                     a resumed run whose span differs from its checkpoint's\n"
    "                     says so: --schedule-steps N keeps the saved one)\n"
    "  --seed N           seed of initialisation, shuffling and dropout\n"
    "  --threads N        CPU threads (default: the train block's threads, else\n"
    "                     OMP_NUM_THREADS when set, else the physical cores this\n"
    "                     process may run on; printed at start)\n"
    "  --data PATH        folder of the IDX files, or synthetic:N\n"
    "  --eval-every N     evaluate every N steps and at each epoch's end; 0: no\n"
    "                     evaluation at all (default: at each epoch's end)\n"
    "  --log-every N      progress line every N steps\n"
    "  --precision P      fp32, bf16 or fp16\n"
    "  --shard S          none or dp (the same: gradients all-reduced across the\n"
    "                     ranks of mpirun/srun), zero1 (optimizer state split),\n"
    "                     zero2 (gradients split too), zero3 (params split too,\n"
    "                     all-gathered per bucket where forward and backward read them)\n"
    "  --bucket B         bytes per all-reduce of gradients across ranks (default\n"
    "                     25MiB; 0: one per gradient)\n"
    "  --overlap on|off   run the collectives on a communication thread while\n"
    "                     backward goes on (default on; off: in program order)\n"
    "  --tensor-parallel T\n"
    "                     ranks per tensor-parallel group: split = column|row\n"
    "                     calls cut across T ranks, data parallel across groups\n"
    "  --sync-batchnorm B\n"
    "                     true: batch norm's statistics over every data-parallel\n"
    "                     rank's rows (default false: each rank's own)\n"
    "  --comm-timeout S   seconds a collective across ranks waits for the others\n"
    "                     before the job is aborted naming the missing ranks\n"
    "                     (default 300; 0: wait forever)\n"
    "  --memory-limit B   refuse to start when the planned memory (params, state and\n"
    "                     the arena) exceeds B bytes (or \"2GiB\", \"500MB\")\n"
    "  --device D         auto, cpu or cuda (default auto: the GPU when one is usable)\n"
    "  --no-cuda-graph    launch each step's kernels instead of replaying a CUDA graph\n"
    "  --tf32             fp32 GEMMs on TF32 tensor cores (GPU)\n"
    "  --bf16-gemm L      auto, onednn, kiln or openblas: who runs bf16 GEMMs on the\n"
    "                     CPU (default auto: oneDNN where the CPU has bf16\n"
    "                     instructions, Kiln's AVX-512 kernel for all but small\n"
    "                     GEMMs on Intel CPUs without AMX; kiln: that kernel for\n"
    "                     every size; openblas: operands widened to fp32 for the\n"
    "                     fp32 GEMMs)\n"
    "  --fp32-gemm L      auto, onednn or openblas: who runs fp32 GEMMs on the CPU\n"
    "                     (default auto: oneDNN's sgemm where the CPU has AVX-512)\n"
    "  --metrics FILE     write metrics as JSON lines (appended to with --resume)\n"
    "  --save FILE        write a checkpoint at the end (and each epoch)\n"
    "  --save-every N     also write a checkpoint every N steps, to FILE.step-N\n"
    "                     (needs --save FILE)\n"
    "  --keep K           keep only the newest K of this run's (older ones are\n"
    "                     removed once the new one is in place; an earlier run's\n"
    "                     higher-numbered files stay; default: all)\n"
    "  --save-init FILE   write a checkpoint of the initial values, then train\n"
    "  --resume FILE      continue from a checkpoint (of any precision)\n"
    "  --resume latest    with --save FILE: continue from the newest whole checkpoint\n"
    "                     of FILE and FILE.step-N of the same model and settings, or\n"
    "                     start from scratch when there is none (a job resubmitted\n"
    "                     unchanged; ./latest names a file called latest)\n"
    "  --save-best FILE   write the checkpoint of each new best epoch-end evaluation\n"
    "                     (early_stop's metric, else the first report, else the loss)\n"
    "  --init FILE        start from the params (and running statistics) of a\n"
    "                     safetensors file: every name and shape must match\n"
    "  --init-partial     with --init: load the tensors that match, keep the\n"
    "                     initial values of the rest (listed on stderr)\n"
    "  --export FILE      at the end, write the params (and running statistics)\n"
    "                     as safetensors (fp32; kiln export converts)\n"
    "  --eval-only        with --resume or --init: evaluate the test set, print\n"
    "                     the evaluation line, train nothing\n"
    "  --predict FILE     with --eval-only: write each test sample's predicted\n"
    "                     class, label and logits as a .npy file (see README);\n"
    "                     without a cross_entropy, the outputs it declares (output\n"
    "                     NAME = ..., named and shaped in the header), else its output\n"
    "  --generate TEXT    with --resume (or --init): print TEXT and the bytes a\n"
    "                     byte-level language model draws after it, train nothing\n"
    "  --tokens N         with --generate: bytes to draw (default 200, at most " TRAIN_GEN_MAX_TOKENS_STR ")\n"
    "  --temperature X    with --generate: 0 takes the likeliest byte (default 0.8)\n"
    "  --top-k K          with --generate: draw among the K likeliest (default 0: all)\n"
    "  --set KEY=VALUE    any other train setting\n"
    "  --profile          time every kernel and GEMM; print a table at the end\n"
    "  --plan-predict MS  kiln plan's predicted step for this layout: the summary\n"
    "                     compares the measured step with it\n"
    "  --trace FILE       write a timeline of every step, kernel, GEMM, data wait\n"
    "                     and evaluation (Chrome trace format; open in Perfetto)\n"
    "  --tensorboard DIR  write TensorBoard event files (scalars) into DIR\n"
    "                     (the train key tensorboard = \"DIR\")\n"
    "  --progress P       auto, bar, lines or none (default auto: on a terminal one\n"
    "                     live line per epoch redrawn in place, else the periodic\n"
    "                     lines of --log-every)\n"
    "  --config FILE      flags from FILE, one \"key = value\" a line (a train setting,\n"
    "                     or a flag's name: save_every = 100, quiet = true); the\n"
    "                     command line's flags win; recorded in checkpoints and\n"
    "                     --metrics\n"
    "  --quiet            no progress lines, only the summary\n"
    "  -h, --help         this help\n"
    "\n"
    "With --save, SIGTERM and SIGUSR1 stop the run at the next step's end: it\n"
    "saves FILE and exits with status 75; --resume latest continues it.\n"
    "\n"
    "The executable holds the kernels of its train block's settings. Flags that\n"
    "change the plan (--batch, --accumulate, --precision, --memory-limit, --data\n"
    "with another test-set size, --set optimizer=... and other --set keys) need\n"
    "other kernels, which it compiles at start with a C compiler: $CC (else cc),\n"
    "cached in $XDG_CACHE_HOME/kiln/cpu (else ~/.cache/kiln/cpu). Without a\n"
    "compiler, put the settings in the train block and kiln build again.\n"
    "\n"
    "KILN_MEMPLAN=0 in the environment turns memory planning off (every buffer\n"
    "its own memory), for comparisons.\n";

static int add_kv(train_options *o, const char *k, const char *v)
{
    if (o->nkv + 3 > (int)KL_ARRAY_LEN(o->kv)) {
        kl_error("too many flags");
        return -1;
    }
    o->kv[o->nkv++] = k;
    o->kv[o->nkv++] = v;
    o->kv[o->nkv] = NULL;
    return 0;
}

static char *own(train_options *o, char *s)
{
    if (o->nowned < (int)KL_ARRAY_LEN(o->owned))
        o->owned[o->nowned++] = s;
    return s;
}

/* The flags that set a train key. */
static const struct { const char *flag, *key; } mapped[] = {
    {"--epochs", "epochs"}, {"--steps", "steps"}, {"--batch", "batch"}, {"--accumulate", "accumulate"},
    {"--lr", "lr"}, {"--seed", "seed"}, {"--eval-every", "eval_every"}, {"--log-every", "log_every"},
    {"--precision", "precision"}, {"--memory-limit", "memory_limit"}, {"--tensorboard", "tensorboard"},
    {"--shard", "shard"}, {"--bucket", "bucket"}, {"--overlap", "overlap"},
    {"--tensor-parallel", "tensor_parallel"}, {"--sync-batchnorm", "sync_batchnorm"},
    {"--comm-timeout", "comm_timeout"},
    {"--schedule-steps", "schedule_steps"},
};

/* For the CPU backend's notice and error when it must compile kernels.
 * Train keys that only the run's loop or the kernels' arguments read
 * never change them. */
char *train_kernel_flags(const train_options *o)
{
    static const char *const neutral[] = {"epochs", "steps", "seed", "eval_every", "log_every", "threads", "lr", "schedule_steps",
                                         "tensorboard", "shard", "bucket", "overlap", "comm_timeout", "early_stop"};
    kl_buf b = {0};
    if (o->batch_auto)
        kl_buf_puts(&b, "--batch auto");
    for (int i = 0; i + 1 < o->nkv; i += 2) {
        const char *k = o->kv[i], *v = o->kv[i + 1], *flag = NULL;
        bool skip = false;
        for (size_t n = 0; n < KL_ARRAY_LEN(neutral) && !skip; n++)
            skip = !strcmp(k, neutral[n]);
        if (skip)
            continue;
        for (size_t m = 0; m < KL_ARRAY_LEN(mapped) && !flag; m++)
            if (!strcmp(k, mapped[m].key))
                flag = mapped[m].flag;
        if (!strcmp(k, "data"))
            flag = "--data";
        if (b.len)
            kl_buf_puts(&b, ", ");
        if (flag)
            kl_buf_printf(&b, "%s %s", flag, v);
        else
            kl_buf_printf(&b, "--set %s=%s", k, v);
    }
    return b.len ? kl_buf_take(&b) : NULL;
}

int train_add_setting(train_options *o, const char *key, const char *value)
{
    return add_kv(o, key, own(o, kl_xstrdup(value)));
}

/* --generate's settings need it, and it needs a checkpoint and a prompt. */
static int check_generate_flags(const train_options *o)
{
    if (!o->generate) {
        if (o->gen_settings)
            kl_error("--tokens, --temperature and --top-k go with --generate TEXT");
        return o->gen_settings ? -1 : 0;
    }
    if (!*o->generate) {
        kl_error("--generate needs a prompt of at least one byte, e.g. --generate \"def \"");
        return -1;
    }
    if (!o->resume && !o->init) {
        kl_error("--generate needs the trained values: --resume CKPT (or --init FILE.safetensors)");
        return -1;
    }
    if (o->eval_only || o->save || o->save_init || o->export_path || o->predict) {
        kl_error("--generate trains nothing and writes no file: leave out --eval-only, --save, --save-init, "
                 "--export and --predict");
        return -1;
    }
    return 0;
}

int train_parse_flags(int argc, char **argv, train_options *o, const char *model)
{
    o->gen_tokens = 200;
    o->temperature = 0.8;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc;
        bool done = false;
        if (!strcmp(a, "--batch") && has && !strcmp(argv[i + 1], "auto")) {
            o->batch_auto = true;
            i++;
            continue;
        }
        for (size_t m = 0; m < KL_ARRAY_LEN(mapped) && !done; m++) {
            if (strcmp(a, mapped[m].flag))
                continue;
            if (!has) {
                kl_error("%s needs a value", a);
                return -1;
            }
            if (add_kv(o, mapped[m].key, argv[++i]))
                return -1;
            done = true;
        }
        if (done)
            continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf(usage, argv[0], model);
            exit(0);
        } else if (!strcmp(a, "--threads") && has) {
            char *end;
            long t = strtol(argv[++i], &end, 10);
            if (*end || t < 0 || t > 4096) {
                kl_error("--threads needs a count, got '%s'", argv[i]);
                return -1;
            }
            o->threads = (int)t;
            if (add_kv(o, "threads", argv[i]))
                return -1;
        } else if (!strcmp(a, "--data") && has) {
            if (add_kv(o, "data", argv[++i]))
                return -1;
        } else if (!strcmp(a, "--device") && has) {
            o->device = argv[++i];
        } else if (!strcmp(a, "--bf16-gemm") && has) {
            o->bf16_gemm = argv[++i];
        } else if (!strcmp(a, "--fp32-gemm") && has) {
            o->fp32_gemm = argv[++i];
        } else if (!strcmp(a, "--metrics") && has) {
            o->metrics = argv[++i];
        } else if (!strcmp(a, "--save") && has) {
            o->save = argv[++i];
        } else if ((!strcmp(a, "--save-every") || !strcmp(a, "--keep")) && has) {
            char *end;
            long long n = strtoll(argv[++i], &end, 10);
            if (*end || !*argv[i] || n < 1) {
                kl_error("%s needs a positive count, got '%s'", a, argv[i]);
                return -1;
            }
            *(!strcmp(a, "--keep") ? &o->keep : &o->save_every) = n;
        } else if (!strcmp(a, "--force-overflow") && has) {
            /* N: step N's loss scale is inf; N:S (pipelines): stage S
             * alone makes one of its gradients inf. */
            char *end;
            o->force_overflow = strtoll(argv[++i], &end, 10);
            o->force_overflow_stage = *end == ':' ? (int)strtol(end + 1, NULL, 10) : -1;
        } else if (!strcmp(a, "--save-init") && has) {
            o->save_init = argv[++i];
        } else if (!strcmp(a, "--init") && has) {
            o->init = argv[++i];
        } else if (!strcmp(a, "--export") && has) {
            o->export_path = argv[++i];
        } else if (!strcmp(a, "--predict") && has) {
            o->predict = argv[++i];
        } else if (!strcmp(a, "--generate") && has) {
            o->generate = argv[++i];
        } else if ((!strcmp(a, "--tokens") || !strcmp(a, "--top-k")) && has) {
            char *end;
            long long n = strtoll(argv[++i], &end, 10);
            bool tokens = !strcmp(a, "--tokens");
            if (*end || !*argv[i] || n < (tokens ? 1 : 0) || n > (tokens ? TRAIN_GEN_MAX_TOKENS : 1000000000)) {
                kl_error("%s needs a count %s, got '%s'", a,
                         tokens ? "from 1 to " TRAIN_GEN_MAX_TOKENS_STR " (--generate's limit: one forward pass "
                                  "of the model per byte)"
                                : "from 0 (0: all)",
                         argv[i]);
                return -1;
            }
            *(tokens ? &o->gen_tokens : &o->top_k) = n;
            o->gen_settings = true;
        } else if (!strcmp(a, "--temperature") && has) {
            char *end;
            double x = strtod(argv[++i], &end);
            if (*end || !*argv[i] || !(x >= 0) || !isfinite(x)) {
                kl_error("--temperature needs a finite number from 0 (0: the likeliest byte), got '%s'", argv[i]);
                return -1;
            }
            o->temperature = x;
            o->gen_settings = true;
        } else if (!strcmp(a, "--init-partial")) {
            o->init_partial = true;
        } else if (!strcmp(a, "--eval-only")) {
            o->eval_only = true;
        } else if (!strcmp(a, "--resume") && has) {
            /* latest: the newest of --save's series (a file named
             * latest is ./latest). */
            o->resume = argv[++i];
            o->resume_latest = !strcmp(o->resume, "latest");
            if (o->resume_latest)
                o->resume = NULL;
        } else if (!strcmp(a, "--save-best") && has) {
            o->save_best = argv[++i];
        } else if (!strcmp(a, "--set") && has) {
            const char *kv = argv[++i], *eq = strchr(kv, '=');
            if (!eq || eq == kv) {
                kl_error("--set needs KEY=VALUE, got '%s'", kv);
                return -1;
            }
            const char *key = own(o, kl_xstrndup(kv, (size_t)(eq - kv)));
            if (kl_train_check_set(key, eq + 1) || add_kv(o, key, eq + 1))
                return -1;
        } else if (!strcmp(a, "--probe")) {
            o->batch_probe = true;
        } else if (!strcmp(a, "--no-cuda-graph")) {
            o->no_cuda_graph = true;
        } else if (!strcmp(a, "--tf32")) {
            o->tf32 = true;
        } else if (!strcmp(a, "--progress") && has) {
            if ((o->progress = train_progress_parse(argv[++i])) < 0)
                return -1;
        } else if (!strcmp(a, "--quiet")) {
            o->quiet = true;
        } else if (!strcmp(a, "--profile")) {
            o->profile = true;
        } else if (!strcmp(a, "--plan-predict") && has) {
            char *end;
            double v = strtod(argv[++i], &end);
            if (end == argv[i] || (*end && strcmp(end, "ms")) || !(v > 0) || v > 1e9) {
                kl_error("--plan-predict needs kiln plan's predicted step in milliseconds (e.g. 12.5 or 12.5ms), "
                         "got '%s'",
                         argv[i]);
                return -1;
            }
            o->plan_predict_ms = v;
        } else if (!strcmp(a, "--trace") && has) {
            o->trace_path = argv[++i];
        } else {
            kl_error("unknown option or missing value: %s (see --help)", a);
            return -1;
        }
    }
    if (o->partial)
        return 0;
    if (o->batch_probe && !o->batch_auto) {
        kl_error("--probe times candidate batch sizes of --batch auto\n---> add --batch auto, or drop --probe");
        return -1;
    }
    return check_generate_flags(o);
}
