/* Launch configuration of generated CUDA kernels, shared by the CUDA
 * backend (with the device's SM count and the occupancy API's answers)
 * and the emulation harness (with a made-up small device).
 *
 * Every generated loop strides by gridDim and blockDim, so any grid is
 * correct: the grid only decides how work spreads. Flat launches use the
 * occupancy API's block size and enough blocks to fill the device once;
 * block launches get a block of threads matched to their widest
 * block-level loop (a multiple of 32: warp shuffles need full warps). */
#ifndef KILN_CUDA_LAUNCH_H
#define KILN_CUDA_LAUNCH_H

#include "codegen/emit_cuda.h"

/* The smallest block a flat launch is shrunk to for more blocks: 4
 * warps, one per SM sub-partition. */
#define KL_CUDA_FLAT_MIN_BLOCK 128

/* Threads per block. flat_block: the occupancy API's suggestion for the
 * function; max_threads: the most it can launch with (registers). */
static inline unsigned kl_cuda_block_size(const kir_cuda_launch *l, int sms, int flat_block, int max_threads)
{
    if (l->threads > 0)
        return (unsigned)l->threads; /* hand-written: its __launch_bounds__ */
    int limit = max_threads / 32 * 32;
    if (limit < 32)
        limit = 32;
    if (l->map == KIR_CUDA_FLAT) {
        int b = flat_block > 0 ? flat_block : 256;
        /* The occupancy API suggests the largest block of the best
         * occupancy (often 1024): a launch of under 2 such blocks per SM
         * gets halved ones, down to KL_CUDA_FLAT_MIN_BLOCK, so that it
         * spreads over every SM. Halving keeps the occupancy (twice the
         * blocks of half the warps fit), where another size could round
         * it down (tests/cuda/occupancy_check.c). */
        while (b / 2 >= KL_CUDA_FLAT_MIN_BLOCK && b / 2 % 32 == 0 && l->units < 2 * (int64_t)(sms > 0 ? sms : 1) * b)
            b /= 2;
        /* Tiny launches: one warp-aligned block that covers them. */
        if (l->units < b)
            b = (int)((l->units + 31) / 32 * 32);
        if (b < 32)
            b = 32;
        return (unsigned)(b > limit ? limit : b);
    }
    int64_t want = l->inner < 1024 ? l->inner : 1024;
    want = (want + 31) / 32 * 32;
    /* Many outer iterations fill the device with blocks; few need wide
     * blocks to keep enough threads busy. */
    if (l->units >= 4 * (int64_t)sms && want > 256)
        want = 256;
    if (want < 32)
        want = 32;
    return (unsigned)(want > limit ? limit : want);
}

/* Blocks: enough to cover the work, at most what the device runs at once
 * (blocks_per_sm active blocks of this size on each SM). */
static inline unsigned kl_cuda_grid_size(const kir_cuda_launch *l, unsigned block, int sms, int blocks_per_sm)
{
    int64_t need = l->map == KIR_CUDA_FLAT ? (l->units + block - 1) / block : l->units;
    int64_t cap = (int64_t)(sms > 0 ? sms : 1) * (blocks_per_sm > 0 ? blocks_per_sm : 1);
    if (need > cap)
        need = cap;
    return (unsigned)(need < 1 ? 1 : need);
}

#endif
