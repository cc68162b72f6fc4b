/* The live progress bar of a training run (--progress, train_progress.h):
 * on a terminal, one line per epoch redrawn in place ("\r", then the
 * line, then "erase to the end of the line"), with the bar, the epoch's
 * steps, samples/s, the loss (and the first metric), the time left in the
 * epoch and in the run, and the memory; off a terminal the periodic
 * lines of train_observe.c instead, never both. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "train_progress.h"
#include "base/support.h"
#include "runtime/observe/hostmetrics.h"

/* Redraws at most this often (seconds) between forced ones: a fast run
 * does not spend its time writing to the terminal. */
#define BAR_REDRAW_S 0.2
/* The bar's cells: what the terminal's width leaves, within these. */
#define BAR_MIN_CELLS 5
#define BAR_MAX_CELLS 30

int train_progress_parse(const char *s)
{
    static const char *const names[] = {"auto", "bar", "lines", "none"};
    for (int i = 0; i < (int)KL_ARRAY_LEN(names); i++)
        if (!strcmp(s, names[i]))
            return i;
    kl_error("--progress must be auto, bar, lines or none, got '%s'", s);
    return -1;
}

train_progress_mode train_progress_resolve(train_progress_mode m, bool quiet)
{
    if (quiet)
        return TRAIN_PROGRESS_NONE;
    if (m != TRAIN_PROGRESS_AUTO)
        return m;
    /* CI services set CI (GitHub Actions, GitLab, Buildkite, ...): their
     * logs keep every byte, so a bar's redraws would pile up there. */
    const char *ci = getenv("CI");
    bool in_ci = ci && *ci && strcmp(ci, "0") && strcmp(ci, "false");
    return isatty(STDOUT_FILENO) && !in_ci ? TRAIN_PROGRESS_BAR : TRAIN_PROGRESS_LINES;
}

/* "1:05", "12:03:09"; "?" before any step was timed. */
static void fmt_eta(char *out, size_t n, double s)
{
    if (!(s >= 0) || s > 1e8) {
        snprintf(out, n, "?");
        return;
    }
    long long t = (long long)(s + 0.5);
    if (t >= 3600)
        snprintf(out, n, "%lld:%02lld:%02lld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(out, n, "%lld:%02lld", t / 60, t % 60);
}

void train_bar_format(char *out, size_t n, int width, int64_t epoch, int64_t epochs, int64_t done, int64_t per_epoch,
                      double sps, double loss, const char *metric_name, double metric, double eta_epoch,
                      double eta_run, const char *mem_what, int64_t mem_bytes)
{
    char ee[32], er[32], head[64], tail[320], mtext[96] = "";
    fmt_eta(ee, sizeof ee, eta_epoch);
    fmt_eta(er, sizeof er, eta_run);
    snprintf(head, sizeof head, "epoch %lld/%lld ", (long long)epoch + 1, (long long)epochs);
    /* The metric goes first when the terminal is too narrow for it. */
    for (int with_metric = metric_name != NULL; with_metric >= 0; with_metric--) {
        if (with_metric)
            snprintf(mtext, sizeof mtext, "  %s %.4f", metric_name, metric);
        else
            mtext[0] = 0;
        snprintf(tail, sizeof tail, " %lld/%lld  %.0f samples/s  loss %.4f%s  ETA %s (run %s)  %s %.1f MB",
                 (long long)done, (long long)per_epoch, sps, loss, mtext, ee, er, mem_what, (double)mem_bytes / 1e6);
        if (width <= 1 || (int)(strlen(head) + strlen(tail)) + 2 + BAR_MIN_CELLS < width)
            break;
    }
    /* The bar takes what the terminal's width leaves. */
    int cells = width - (int)strlen(head) - (int)strlen(tail) - 3;
    cells = cells < BAR_MIN_CELLS ? BAR_MIN_CELLS : cells > BAR_MAX_CELLS ? BAR_MAX_CELLS : cells;
    int full = per_epoch > 0 ? (int)(done * cells / per_epoch) : cells;
    char bar[BAR_MAX_CELLS + 1];
    for (int i = 0; i < cells; i++)
        bar[i] = i < full ? '#' : '.';
    bar[cells] = 0;
    snprintf(out, n, "%s[%s]%s", head, bar, tail);
    /* Never wider than the terminal: a wrapped line cannot be redrawn. */
    if (width > 1 && (int)strlen(out) > width - 1)
        out[width - 1] = 0;
}

void train_bar_epoch(train_bar *b, int64_t epoch, int64_t epochs, int64_t first, int64_t per_epoch, int64_t run_first,
                     int64_t run_total)
{
    b->epoch = epoch;
    b->epochs = epochs;
    b->first = first;
    b->per_epoch = per_epoch;
    b->run_first = run_first;
    b->run_total = run_total;
    b->t0 = kl_now();
    b->last_draw = 0;
}

static int terminal_width(void)
{
    struct winsize w;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col >= 20)
        return w.ws_col;
    return 80;
}

void train_bar_step(train_bar *b, int64_t step, double step_s, int64_t samples_per_step, double loss,
                    const char *metric_name, double metric, int64_t gpu_bytes, bool force)
{
    if (!b->on)
        return;
    if (!b->steps_timed)
        b->first_s = step_s;
    b->step_s += step_s;
    b->steps_timed++;
    double now = kl_now();
    if (!force && now - b->last_draw < BAR_REDRAW_S)
        return;
    b->last_draw = now;
    /* The rates and the times left come from the time inside this
     * process's steps: evaluation is not in them. */
    /* The process's first step also compiles and faults pages in: left
     * out once there are others. */
    int64_t k = b->steps_timed > 1 ? b->steps_timed - 1 : 1;
    double secs = b->steps_timed > 1 ? b->step_s - b->first_s : b->step_s;
    double per_step = secs / (double)k;
    double sps = secs > 0 ? (double)(k * samples_per_step) / secs : 0;
    int64_t done = step - b->first;
    int64_t last = b->first + b->per_epoch < b->run_total ? b->first + b->per_epoch : b->run_total;
    double eta_epoch = per_step * (double)(last - step), eta_run = per_step * (double)(b->run_total - step);
    kl_host_sample host = {0};
    if (!gpu_bytes)
        kl_host_sample_now(&host);
    char line[512];
    train_bar_format(line, sizeof line, terminal_width(), b->epoch, b->epochs, done, last - b->first, sps, loss,
                     metric_name, metric, eta_epoch, eta_run, gpu_bytes ? "gpu" : "mem",
                     gpu_bytes ? gpu_bytes : host.rss_bytes);
    printf("\r%s\033[K", line);
    fflush(stdout);
    b->drawn = true;
}

void train_bar_break(train_bar *b)
{
    if (!b->drawn)
        return;
    putchar('\n');
    fflush(stdout);
    b->drawn = false;
}
