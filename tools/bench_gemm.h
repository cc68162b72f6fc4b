/* kiln bench --gemms (tools/bench_gemm.c): every distinct GEMM shape of
 * the models' fp32 training plans (matmuls and im2col convolutions), timed
 * through the CPU backend's GEMM as fp32 (OpenBLAS sgemm), bf16 (oneDNN,
 * where the CPU has bf16 instructions) and f16 (the backend's path), in
 * GFLOP/s and as a share of the machine's measured sgemm peak. kv: train
 * overrides (--batch), NULL-terminated pairs or NULL. Returns the exit
 * status. */
#ifndef KILN_BENCH_GEMM_H
#define KILN_BENCH_GEMM_H

int kl_bench_gemms(const char *const *models, int nmodels, const char *const *kv, int threads, int repeats);

#endif
