/* Chrome trace writer. See trace.h. */
#include <stdlib.h>
#include <string.h>

#include "trace.h"
#include "runtime/files/outfile.h"
#include "base/support.h"

struct kl_trace {
    kl_outfile o;
    FILE *f; /* o.f */
    double t0;
    bool first;
};

kl_trace *kl_trace_open(const char *path)
{
    kl_trace *t = kl_xcalloc(1, sizeof *t);
    if (kl_outfile_begin(&t->o, path)) {
        free(t);
        return NULL;
    }
    FILE *f = t->f = t->o.f;
    t->t0 = kl_now();
    t->first = true;
    fputs("[\n", f);
    static const char *tracks[] = {NULL, "optimizer steps", "kernels and GEMMs", "data loading", "communication"};
    for (int i = 1; i < (int)KL_ARRAY_LEN(tracks); i++)
        fprintf(f, "%s{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": %d, \"args\": {\"name\": \"%s\"}}",
                i > 1 ? ",\n" : "", i, tracks[i]);
    t->first = false;
    return t;
}

static void put_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fputc('\\', f);
        if ((unsigned char)*s >= 32)
            fputc(*s, f);
    }
    fputc('"', f);
}

/* An event's separator and its "name" field: each event's start. */
static void open_event(kl_trace *t, const char *name)
{
    fputs(t->first ? "" : ",\n", t->f);
    t->first = false;
    fputs("{\"name\": ", t->f);
    put_string(t->f, name);
}

void kl_trace_event(kl_trace *t, const char *name, const char *cat, int track, double start, double end)
{
    if (!t)
        return;
    open_event(t, name);
    fputs(", \"cat\": ", t->f);
    put_string(t->f, cat);
    fprintf(t->f, ", \"ph\": \"X\", \"pid\": 1, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f}", track,
            1e6 * (start - t->t0), 1e6 * (end - start));
    kl_outfile_note(&t->o);
}

void kl_trace_track(kl_trace *t, int track, const char *name)
{
    if (!t)
        return;
    open_event(t, "thread_name");
    fprintf(t->f, ", \"ph\": \"M\", \"pid\": 1, \"tid\": %d, \"args\": {\"name\": ", track);
    put_string(t->f, name);
    fputs("}}", t->f);
    kl_outfile_note(&t->o);
}

void kl_trace_counter(kl_trace *t, const char *name, double ts, double value)
{
    if (!t)
        return;
    open_event(t, name);
    fprintf(t->f, ", \"ph\": \"C\", \"pid\": 1, \"ts\": %.3f, \"args\": {\"value\": %.6g}}", 1e6 * (ts - t->t0), value);
    kl_outfile_note(&t->o);
}

int kl_trace_close(kl_trace *t)
{
    if (!t)
        return 0;
    fputs("\n]\n", t->f);
    int rc = kl_outfile_commit(&t->o, 0666);
    free(t);
    return rc;
}
