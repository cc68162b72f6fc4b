/* The image the simulated device's NVRTC (sim_nvrtc.c) hands out in place
 * of a CUBIN or PTX, and the simulated driver's cuModuleLoadData reads:
 * the real NVRTC's image, the program's source (which the driver compiles
 * for the host with tests/cuda/emu.h) and NVRTC's log (ptxas's register
 * and shared-memory counts, which the occupancy answers use). A real
 * driver refuses it (no ELF header), and Kiln keys the simulator's images
 * apart from real ones in its kernel cache (runtime/exec/nvrtc.c). */
#ifndef KILN_SIMGPU_SIM_IMAGE_H
#define KILN_SIMGPU_SIM_IMAGE_H

#include <stdint.h>

#define SIM_IMAGE_MAGIC "KILNSIM1"

typedef struct sim_image_hdr {
    char magic[8];
    uint64_t image_bytes, src_bytes, log_bytes; /* followed by each, in this order */
} sim_image_hdr;

#endif
