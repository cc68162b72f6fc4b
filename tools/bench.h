/* kiln bench (tools/bench.c). */
#ifndef KILN_BENCH_H
#define KILN_BENCH_H

int kl_bench_main(int argc, char **argv);

#endif
