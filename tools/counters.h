/* kiln counters (tools/counters.c). */
#ifndef KILN_COUNTERS_H
#define KILN_COUNTERS_H

int kl_counters_main(int argc, char **argv);

#endif
