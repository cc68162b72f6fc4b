/* kiln bench (tools/bench.c). */
#ifndef KILN_BENCH_H
#define KILN_BENCH_H

int kl_bench_main(int argc, char **argv);
/* The machine's memcpy bandwidth in GB/s (bytes read plus written). */
double kl_copy_bandwidth(void);

#endif
