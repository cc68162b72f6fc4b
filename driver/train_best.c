/* The best evaluation of a run: which way each metric is better (report
 * NAME = ..., better = higher|lower), early stopping (the train key
 * early_stop) and --save-best FILE. Both count the evaluations at
 * epoch ends (not those of --eval-every between them): the watched
 * metric improves when it beats the best so far by more than min_delta
 * in its direction; after patience evaluations in a row that do not,
 * the run stops there (its summary, --save and --export as at its end).
 * --save-best writes the checkpoint of each new best, atomically
 * (outfile.h), so the file always holds one whole best epoch.
 *
 * A test hook: KILN_TEST_EVAL_METRICS="0.5,0.6,..." replaces the watched
 * metric's value at the first, second, ... epoch-end evaluation (for
 * early stopping's decisions alone), so a test can craft the sequence. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "trainer.h"
#include "train_loop.h"

/* x improves on best (better = lower when lower) by more than delta. */
static bool improves(bool lower, double x, double best, double delta)
{
    return lower ? x < best - delta : x > best + delta;
}

/* The names a watched metric may take, for an error: "accuracy, loss". */
static char *metric_names(const ir_graph *g)
{
    kl_buf b = {0};
    for (int i = 0; i < g->reports.n && i < IR_MAX_REPORTS; i++)
        if (g->reports.v[i].name[0] != '_')
            kl_buf_printf(&b, "%s, ", g->reports.v[i].name);
    kl_buf_puts(&b, "loss (the evaluation loss)");
    return kl_buf_take(&b);
}

int train_best_setup(trainer *t, train_loop *lp)
{
    const kl_train_config *c = &t->cfg;
    const ir_graph *g = t->train->g;
    lp->metric_lower = lp->metric_count && g->reports.v[0].lower_better;
    train_watch *w = &lp->watch;
    const char *want = c->early_stop.metric;
    bool evaluates = c->eval_every != 0 && t->eval;
    if ((want || t->opt.save_best) && !evaluates) {
        kl_error("%s needs evaluations at the epochs' ends: %s", want ? "early_stop" : "--save-best",
                 t->eval ? "eval_every is 0 (--eval-every 0)" : "the data has no test split");
        return -1;
    }
    /* The evaluation plan's reports are the training plan's, in order
     * (eval_result.metric follows them). */
    const ir_graph *eg = t->eval ? t->eval->g : g;
    w->index = -1;
    w->name = "loss";
    w->lower = true;
    if (want && strcmp(want, "loss")) {
        int k = -1;
        for (int i = 0; i < eg->reports.n && i < IR_MAX_REPORTS && k < 0; i++)
            if (!strcmp(eg->reports.v[i].name, want) && want[0] != '_')
                k = i;
        if (k < 0) {
            char *names = metric_names(eg);
            kl_error("early_stop: the model reports no metric '%s' (its metrics: %s)", want, names);
            free(names);
            return -1;
        }
        w->index = k;
    } else if (!want && lp->metric_count) {
        w->index = 0;
    }
    if (w->index >= 0) {
        w->name = eg->reports.v[w->index].name;
        w->lower = eg->reports.v[w->index].lower_better;
    }
    /* A resumed run goes on with the record it saved (format version 6;
     * an older one has none, and the counts start afresh). */
    const kl_run_state *rs = &t->resumed;
    lp->record = *rs;
    if (rs->best_epoch && lp->metric_count) {
        lp->best = rs->best;
        lp->best_epoch = rs->best_epoch;
    }
    w->evals = rs->evals;
    if (rs->watch_epoch && rs->watch_name == kl_hash_bytes(KL_HASH_INIT, w->name, strlen(w->name))) {
        w->best = rs->watch_best;
        w->best_epoch = rs->watch_epoch;
        w->best_step = rs->watch_step;
        w->bad = rs->watch_bad;
        /* Saved by a run that stopped early: nothing more to train. */
        w->stopped = c->early_stop.metric && w->bad >= c->early_stop.patience;
    }
    return 0;
}

/* The hook's value for the n-th (1-based) evaluation, or x. */
static double test_value(int64_t n, double x)
{
    const char *s = getenv("KILN_TEST_EVAL_METRICS");
    for (int64_t i = 1; s && *s; i++) {
        char *end;
        double v = strtod(s, &end);
        if (end == s)
            break;
        if (i == n)
            return v;
        s = *end == ',' ? end + 1 : end;
    }
    return x;
}

/* lp->record from the loop's state, at an epoch's end. */
static void keep_record(train_loop *lp)
{
    if (lp->step % lp->per_epoch)
        return;
    const train_watch *w = &lp->watch;
    kl_run_state *rs = &lp->record;
    rs->best = lp->best_epoch ? lp->best : 0;
    rs->best_epoch = lp->best_epoch;
    rs->evals = w->evals;
    if (w->best_epoch && w->name) {
        rs->watch_best = w->best;
        rs->watch_epoch = w->best_epoch;
        rs->watch_step = w->best_step;
        rs->watch_bad = w->bad;
        rs->watch_name = kl_hash_bytes(KL_HASH_INIT, w->name, strlen(w->name));
    }
}

int train_best_after_eval(trainer *t, train_loop *lp, int64_t epoch)
{
    const kl_train_config *c = &t->cfg;
    /* The shown metric's best, in its direction (the first of equals). */
    if (lp->metric_count && (!lp->best_epoch || improves(lp->metric_lower, lp->er.metric[0], lp->best, 0))) {
        lp->best = lp->er.metric[0];
        lp->best_epoch = epoch + 1;
    }
    train_watch *w = &lp->watch;
    w->evals++;
    double x = test_value(w->evals, w->index >= 0 ? lp->er.metric[w->index] : lp->er.loss);
    double delta = c->early_stop.metric ? c->early_stop.min_delta : 0;
    if (!w->best_epoch || improves(w->lower, x, w->best, delta)) {
        w->best = x;
        w->best_epoch = epoch + 1;
        w->best_step = lp->step;
        w->bad = 0;
        keep_record(lp);
        /* The state was settled (averaged across ranks) for this
         * evaluation; rank 0 alone has the path. */
        if (t->opt.save_best && train_save_checkpoint(t, t->opt.save_best, lp->step))
            return -1;
        return 0;
    }
    w->bad++;
    keep_record(lp);
    if (c->early_stop.metric && w->bad >= c->early_stop.patience) {
        w->stopped = true;
        if (!t->opt.quiet) {
            printf("early stop: %s has not improved on %.4f (epoch %lld) by more than %g for %lld evaluation%s; "
                   "stopping at epoch %lld (step %lld)\n",
                   w->name, w->best, (long long)w->best_epoch, delta, (long long)w->bad, w->bad == 1 ? "" : "s",
                   (long long)epoch + 1, (long long)lp->step);
            fflush(stdout);
        }
    }
    return 0;
}

void train_best_print_summary(trainer *t, const train_loop *lp)
{
    const train_watch *w = &lp->watch;
    if ((!t->cfg.early_stop.metric && !t->opt.save_best) || !w->best_epoch)
        return;
    printf("best: %s %.4f at epoch %lld (step %lld)", w->name, w->best, (long long)w->best_epoch,
           (long long)w->best_step);
    if (t->opt.save_best)
        kl_fprintf_escaped(stdout, ", saved in %s", t->opt.save_best);
    if (w->stopped)
        printf("; stopped early at epoch %lld", (long long)((lp->step - 1) / lp->per_epoch + 1));
    printf("\n");
    train_json_line(t, "{\"type\": \"best\", \"metric\": \"%s\", \"value\": %.6g, \"epoch\": %lld, \"step\": %lld, "
                       "\"stopped_early\": %s}",
                    w->name, w->best, (long long)w->best_epoch, (long long)w->best_step, w->stopped ? "true" : "false");
}
