/* What a training run shows and records besides its steps: metrics
 * records (--metrics), progress lines, TensorBoard scalars
 * (--tensorboard), the monitor's host and GPU readings (into the trace's
 * counter tracks and the records), the run's summary, and --profile's
 * bottleneck summary. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "train_loop.h"
#include "runtime/cpu/simgpu.h"
#include "runtime/exec/backend_cuda.h"
#include "runtime/observe/bottleneck.h"
#include "runtime/observe/tboard.h"

void train_json_line(trainer *t, const char *fmt, ...)
{
    if (!t->metrics.f)
        return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(t->metrics.f, fmt, ap);
    va_end(ap);
    fputc('\n', t->metrics.f);
    fflush(t->metrics.f);
    kl_outfile_note(&t->metrics);
}

/* The monitor's readings since the last drain: each into the trace's
 * counter tracks and the window's and the run's statistics. */
static void drain_samples(trainer *t, train_loop *lp)
{
    kl_monitor_reading *v;
    int n = kl_monitor_drain(t->monitor, &v);
    for (int i = 0; i < n; i++) {
        const kl_monitor_reading *x = &v[i];
        kl_monitor_stats_add(&lp->win_samples, x);
        kl_monitor_stats_add(&lp->run_samples, x);
        if (!t->trace)
            continue;
        kl_trace_counter(t->trace, "host CPU %", x->t, x->cpu_percent);
        kl_trace_counter(t->trace, "host RSS MB", x->t, (double)x->rss_bytes / 1e6);
        if (!x->gpu)
            continue;
        kl_trace_counter(t->trace, "GPU busy %", x->t, x->gpu_busy);
        kl_trace_counter(t->trace, "GPU memory busy %", x->t, x->gpu_memory_busy);
        kl_trace_counter(t->trace, "GPU memory GiB", x->t, (double)x->gpu_mem_used / 1073741824.0);
        kl_trace_counter(t->trace, "GPU power W", x->t, x->power_w);
        kl_trace_counter(t->trace, "GPU temperature C", x->t, x->temp_c);
        kl_trace_counter(t->trace, "GPU SM clock MHz", x->t, x->sm_clock_mhz);
        kl_trace_counter(t->trace, "GPU memory clock MHz", x->t, x->mem_clock_mhz);
        kl_trace_counter(t->trace, "GPU throttle reasons", x->t, (double)x->throttle);
    }
    free(v);
}

/* The progress line (and metrics record) over the steps since the last. */
void train_log_progress(trainer *t, train_loop *lp, int64_t epoch, double loss_now, double lr)
{
    const kl_train_config *c = &t->cfg;
    double ms, sps;
    kl_step_clock_window(&lp->clock, c->batch * c->accumulate * t->world, &ms, &sps);
    double m = lp->win_metric / (double)(lp->win_steps * c->accumulate);
    const char *metric_name = lp->metric_name;
    if (t->opt.progress == TRAIN_PROGRESS_LINES) {
        printf("epoch %lld/%lld  step %6lld/%lld  loss %.4f", (long long)epoch + 1, (long long)c->epochs,
               (long long)lp->step, (long long)lp->total, loss_now);
        if (metric_name)
            printf("  %s %.4f", metric_name, m);
        printf("  lr %.2e", lr);
        if (t->finite_value >= 0)
            printf("  scale %.0f  skipped %lld", t->loss_scale, (long long)t->skipped);
        printf("  %.0f samples/s  %.2f ms/step\n", sps, ms);
        fflush(stdout);
    }
    /* The window's data wait, CPU utilisation and resident memory. */
    double wait = kl_loader_wait_seconds(lp->loader), win_wait = wait - lp->win_wait;
    kl_host_sample host;
    kl_host_sample_now(&host);
    double cpu = kl_host_cpu_percent(&lp->win_host, &host);
    lp->win_wait = wait;
    lp->win_host = host;
    /* The GPU's readings over the window, where NVML gives them. */
    drain_samples(t, lp);
    const kl_monitor_stats *ws = &lp->win_samples;
    char gpu[200] = "";
    double busy = ws->ngpu ? ws->gpu_busy_sum / (double)ws->ngpu : 0, power = ws->ngpu ? ws->power_sum / (double)ws->ngpu : 0;
    if (ws->ngpu)
        snprintf(gpu, sizeof gpu, ", \"gpu_busy_percent\": %.1f, \"gpu_memory_bytes\": %lld, \"gpu_power_w\": %.1f",
                 busy, (long long)ws->gpu_mem_peak, power);
    char comm[160];
    train_overlap_window(t, lp->win_steps, comm, sizeof comm);
    train_json_line(t, "{\"type\": \"train\", \"epoch\": %lld, \"step\": %lld, \"loss\": %.6g, \"%s\": %.6g, \"lr\": %.6g, \"loss_scale\": %.9g, \"skipped\": %lld, \"samples_per_s\": %.1f, \"ms_per_step\": %.3f, \"data_wait_s\": %.4f, \"cpu_percent\": %.1f, \"rss_bytes\": %lld%s%s}",
              (long long)epoch + 1, (long long)lp->step, loss_now, metric_name ? metric_name : "metric", m, lr,
              t->loss_scale, (long long)t->skipped, sps, ms, win_wait, cpu, (long long)host.rss_bytes, gpu, comm);
    if (t->tboard) {
        kl_tboard *tb = t->tboard;
        int64_t step = lp->step;
        kl_tboard_scalar(tb, "train/loss", step, loss_now);
        if (metric_name) {
            char tag[96];
            snprintf(tag, sizeof tag, "train/%s", metric_name);
            kl_tboard_scalar(tb, tag, step, m);
        }
        kl_tboard_scalar(tb, "train/lr", step, lr);
        kl_tboard_scalar(tb, "train/loss_scale", step, t->loss_scale);
        kl_tboard_scalar(tb, "train/skipped_steps", step, (double)t->skipped);
        kl_tboard_scalar(tb, "perf/samples_per_s", step, sps);
        kl_tboard_scalar(tb, "perf/ms_per_step", step, ms);
        kl_tboard_scalar(tb, "perf/data_wait_s", step, win_wait);
        kl_tboard_scalar(tb, "memory/plan_peak_mb", step, (double)t->peak_bytes / 1e6);
        kl_tboard_scalar(tb, "memory/host_rss_mb", step, (double)host.rss_bytes / 1e6);
        kl_tboard_scalar(tb, "host/cpu_percent", step, cpu);
        if (ws->ngpu) {
            kl_tboard_scalar(tb, "gpu/busy_percent", step, busy);
            kl_tboard_scalar(tb, "gpu/memory_gib", step, (double)ws->gpu_mem_peak / 1073741824.0);
            kl_tboard_scalar(tb, "gpu/power_w", step, power);
        }
    }
    memset(&lp->win_samples, 0, sizeof lp->win_samples);
    lp->win_loss = lp->win_metric = 0;
    lp->win_steps = 0;
}

/* An evaluation's scalars, at the step it followed. */
void train_tboard_eval(trainer *t, const train_loop *lp)
{
    if (!t->tboard)
        return;
    kl_tboard_scalar(t->tboard, "eval/loss", lp->step, lp->er.loss);
    const ir_graph *g = t->eval ? t->eval->g : NULL;
    for (int i = 0; g && i < g->reports.n && i < IR_MAX_REPORTS; i++) {
        if (g->reports.v[i].name[0] == '_')
            continue;
        char tag[96];
        snprintf(tag, sizeof tag, "eval/%s", g->reports.v[i].name);
        kl_tboard_scalar(t->tboard, tag, lp->step, lp->er.metric[i]);
    }
}

/* The run's last line and summary record. */
void train_print_summary(trainer *t, train_loop *lp)
{
    const kl_train_config *c = &t->cfg;
    const char *metric_name = lp->metric_name;
    double secs = kl_now() - lp->t_start;
    /* The rates count the steps this process ran (a resumed run starts
     * past 0; one resumed at its end runs none) over their own time:
     * evaluation, start-up and checkpoints are not in it. */
    const kl_step_clock *k = &lp->clock;
    int64_t per_step = c->batch * c->accumulate * t->world;
    double ms, sps, timed_ms, timed_sps;
    kl_step_clock_run(k, per_step, &ms, &sps);
    kl_step_clock_timed(k, per_step, &timed_ms, &timed_sps);
    printf("done: %lld steps", (long long)lp->step);
    if (lp->first_step)
        printf(" (%lld in this run)", (long long)k->run_steps);
    printf(" in %.1f s: steps %.1f s (%.2f ms/step, %.0f samples/s, data wait %.2f s), evaluation %.1f s", secs,
           k->run_s, ms, sps, kl_loader_wait_seconds(lp->loader), lp->eval_s);
    if (metric_name && lp->er.samples)
        printf("; final %s %.4f, best %.4f (epoch %lld)", metric_name, lp->er.metric[0], lp->best,
               (long long)lp->best_epoch);
    printf("\n");
    /* kiln plan's prediction against the step past the warm-up steps
     * (all of them when the run is shorter). */
    if (t->opt.plan_predict_ms > 0 && (timed_ms > 0 || ms > 0)) {
        double got = timed_ms > 0 ? timed_ms : ms;
        printf("plan: measured %.2f ms/step (%s) against kiln plan's %.2f ms: measured / predicted %.2f\n", got,
               timed_ms > 0 ? "past the warm-up steps" : "every step: none past the warm-up", t->opt.plan_predict_ms,
               got / t->opt.plan_predict_ms);
    }
    train_overlap_print_summary(t, k->run_steps);
    /* The host over the whole run (CPU time over wall time, the resident
     * set's high-water mark), and the GPU's readings. */
    drain_samples(t, lp);
    kl_host_sample end;
    kl_host_sample_now(&end);
    double cpu = kl_host_cpu_percent(&lp->run_host, &end);
    int64_t rss_peak = kl_host_rss_peak();
    const kl_monitor_stats *rs = &lp->run_samples;
    printf("host: CPU %.0f%% of one core over the run, peak resident memory %.1f MB", cpu, (double)rss_peak / 1e6);
    if (rs->ngpu)
        printf("; GPU busy %.0f%%, peak memory %.1f GiB of %.1f GiB, %.0f W mean%s%s", rs->gpu_busy_sum / (double)rs->ngpu,
               (double)rs->gpu_mem_peak / 1073741824.0, (double)rs->gpu_mem_total / 1073741824.0,
               rs->power_sum / (double)rs->ngpu, rs->throttle_any & ~1ull ? ", clocks throttled" : "",
               kl_simgpu_wanted() ? " (the simulated device's readings: only the memory is counted)" : "");
    else if (kl_monitor_has_gpu(t->monitor))
        printf("; no GPU reading yet (the run was shorter than the sampling interval)");
    printf("\n");
    kl_buf j = {0};
    kl_buf_printf(&j, "{\"type\": \"summary\", \"steps\": %lld, \"run_steps\": %lld, \"seconds\": %.3f, \"step_seconds\": %.3f, \"eval_seconds\": %.3f, \"ms_per_step\": %.3f, \"samples_per_s\": %.1f, \"timed_steps\": %lld, \"timed_ms_per_step\": %.3f, \"timed_samples_per_s\": %.1f",
                  (long long)lp->step, (long long)k->run_steps, secs, k->run_s, lp->eval_s, ms, sps,
                  (long long)(k->run_steps - k->warm_steps), timed_ms, timed_sps);
    if (t->opt.plan_predict_ms > 0)
        kl_buf_printf(&j, ", \"plan_predict_ms\": %.4f", t->opt.plan_predict_ms);
    kl_buf_printf(&j, ", \"host_cpu_percent\": %.1f, \"host_rss_peak_bytes\": %lld", cpu, (long long)rss_peak);
    train_overlap_json(t, k->run_steps, &j);
    if (rs->ngpu)
        kl_buf_printf(&j, ", \"gpu_busy_percent\": %.1f, \"gpu_memory_peak_bytes\": %lld, \"gpu_memory_total_bytes\": %lld, \"gpu_power_w\": %.1f, \"gpu_throttle_reasons\": %llu",
                      rs->gpu_busy_sum / (double)rs->ngpu, (long long)rs->gpu_mem_peak, (long long)rs->gpu_mem_total,
                      rs->power_sum / (double)rs->ngpu, (unsigned long long)rs->throttle_any);
    if (rs->ngpu && kl_simgpu_wanted())
        kl_buf_puts(&j, ", \"gpu_readings_simulated\": true");
    if (lp->er.samples)
        kl_buf_printf(&j, ", \"final_%s\": %.6g, \"best_%s\": %.6g", metric_name ? metric_name : "metric",
                      lp->er.metric[0], metric_name ? metric_name : "metric", lp->best);
    kl_buf_puts(&j, "}");
    char *js = kl_buf_take(&j);
    train_json_line(t, "%s", js);
    free(js);
}

/* --profile: where the optimizer step's time went, by category, against
 * peaks measured now (after training, so they do not slow it). */
static void print_bottleneck(const trainer *t)
{
    const kl_exec *e = t->train;
    if (!e->step_seconds || t->run_steps <= 0)
        return;
    kl_backend *be = t->s->be;
    bool gpu = kl_backend_is_cuda(be);
    kl_bottleneck b = {.peak_gbs = gpu ? kl_cuda_copy_bandwidth(be) : kl_copy_bandwidth(),
                       .peak_gflops = gpu ? 0 : kl_gemm_peak_gflops(be), .data_known = true};
    for (int i = 0; i < e->plan->steps.n; i++)
        kl_bottleneck_add(&b, e->plan, i, e->step_seconds[i], e->step_hidden[i], (double)e->step_runs[i]);
    double n = (double)t->run_steps;
    kl_bottleneck_finish(&b, n, t->run_step_s / n, t->run_wait_s / n);
    printf("\n");
    kl_bottleneck_print(&b, stdout);
}

void train_print_profile(const trainer *t)
{
    printf("\nprofile of the training step:\n");
    kl_exec_print_profile(t->train, stdout, 30);
    train_pipeline_print_profile(t);
    print_bottleneck(t);
}
