/* The temporaries kl_outfile_begin has made and not yet renamed or
 * removed, so that a run stopped by a signal (SIGINT, SIGTERM, SIGHUP)
 * during a save removes them on the way out instead of leaving a
 * full-size hidden `.NAME.XXXXXX` beside the target. The registry is
 * fixed-size and copied into, so the handler only reads and unlinks
 * (async-signal-safe). The handler is installed on the first temporary
 * and only over a signal's default action; after cleaning it re-raises
 * the signal with its default action, so the exit status is unchanged.
 * (A SIGKILL cannot be caught: its temporary stays, and is no checkpoint.) */
#define _GNU_SOURCE
#include <limits.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "outfile.h"

#define SLOTS 64

enum { FREE, BUSY, LIVE };
static struct {
    int state;
    char path[PATH_MAX];
} slots[SLOTS];
static const int signals[] = {SIGINT, SIGTERM, SIGHUP};

static void on_signal(int sig)
{
    for (int i = 0; i < SLOTS; i++)
        if (__atomic_load_n(&slots[i].state, __ATOMIC_ACQUIRE) == LIVE)
            unlink(slots[i].path);
    raise(sig); /* SA_RESETHAND: the default action, once this returns */
}

static void install(void)
{
    static int done;
    if (__atomic_exchange_n(&done, 1, __ATOMIC_ACQ_REL))
        return;
    for (size_t i = 0; i < sizeof signals / sizeof *signals; i++) {
        struct sigaction old, sa;
        if (sigaction(signals[i], NULL, &old) != 0 || old.sa_handler != SIG_DFL || (old.sa_flags & SA_SIGINFO))
            continue; /* the program handles it itself */
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sa.sa_flags = SA_RESETHAND;
        sigemptyset(&sa.sa_mask);
        sigaction(signals[i], &sa, NULL);
    }
}

void kl_outfile_track(const char *tmp)
{
    if (!tmp || strlen(tmp) >= PATH_MAX)
        return; /* nothing to remove (a device written straight), or unnamable */
    install();
    for (int i = 0; i < SLOTS; i++) {
        int expect = FREE;
        if (__atomic_compare_exchange_n(&slots[i].state, &expect, BUSY, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
            strcpy(slots[i].path, tmp);
            __atomic_store_n(&slots[i].state, LIVE, __ATOMIC_RELEASE);
            return;
        }
    }
}

void kl_outfile_untrack(const char *tmp)
{
    if (!tmp)
        return;
    for (int i = 0; i < SLOTS; i++) {
        int expect = LIVE;
        if (__atomic_load_n(&slots[i].state, __ATOMIC_ACQUIRE) == LIVE && strcmp(slots[i].path, tmp) == 0 &&
            __atomic_compare_exchange_n(&slots[i].state, &expect, FREE, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            return;
    }
}
