/* The training rates: time spent inside optimizer steps, apart from
 * everything between them (evaluation, checkpoints, progress lines), so
 * that ms/step and samples/s describe training alone, over exactly the
 * steps they count. */
#include "train.h"

void kl_step_clock_add(kl_step_clock *c, double t0, double t1)
{
    double dt = t1 > t0 ? t1 - t0 : 0;
    c->window_steps++;
    c->window_s += dt;
    c->run_steps++;
    c->run_s += dt;
    /* The first steps warm caches and fault pages in. */
    if (c->warm_steps < KL_WARM_STEPS) {
        c->warm_steps++;
        c->warm_s += dt;
    }
}

static void rates(int64_t steps, double secs, int64_t samples_per_step, double *ms, double *sps)
{
    *ms = steps > 0 ? 1e3 * secs / (double)steps : 0;
    *sps = steps > 0 && secs > 0 ? (double)(steps * samples_per_step) / secs : 0;
}

void kl_step_clock_window(kl_step_clock *c, int64_t samples_per_step, double *ms, double *sps)
{
    rates(c->window_steps, c->window_s, samples_per_step, ms, sps);
    c->window_steps = 0;
    c->window_s = 0;
}

void kl_step_clock_run(const kl_step_clock *c, int64_t samples_per_step, double *ms, double *sps)
{
    rates(c->run_steps, c->run_s, samples_per_step, ms, sps);
}

void kl_step_clock_timed(const kl_step_clock *c, int64_t samples_per_step, double *ms, double *sps)
{
    rates(c->run_steps - c->warm_steps, c->run_s - c->warm_s, samples_per_step, ms, sps);
}
