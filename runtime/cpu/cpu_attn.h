/* The CPU backend's hand-written attention kernels (runtime/cpu/cpu_attn.c). */
#ifndef KILN_CPU_ATTN_H
#define KILN_CPU_ATTN_H

#include <stdbool.h>

#include "codegen/attn_native.h"

/* True when kl_cpu_attention can run a: an attention kernel with head
 * sizes up to 128 (larger ones run the generated kernel). */
bool kl_cpu_attention_supported(const cg_attn_native *a);
/* Runs a's kernel on the kernel's parameters bufs (the generated kernel's
 * order), with the OpenMP threads the backend set. */
void kl_cpu_attention(const cg_attn_native *a, void *const *bufs);

#endif
