/* Tensor parallelism on the runtime's side: the slices of params cut by
 * passes/shard_tp.c. A split value carries tp_axis and tp_ranks (T); its
 * type is one slice, and rank i of a tensor-parallel group holds slice i
 * of the full value along tp_axis. */
#ifndef KILN_TP_H
#define KILN_TP_H

#include "ir/ir.h"

/* The axis v was cut on, or -1 when it is whole; *ranks gets T. */
int kl_tp_axis(const ir_value *v, int *ranks);
/* The full type of a slice of type t cut on axis into ranks slices. */
ir_type kl_tp_full_type(const ir_type *t, int axis, int ranks);
/* Slice index of full (type full, cut on axis into ranks slices) into
 * slice, or, with to_full, slice into its place in full. */
void kl_tp_copy_slice(const ir_type *full, int axis, int ranks, int index, void *fullp, void *slicep, bool to_full);
/* The real (unpadded) full size of split value v along its axis: the
 * pass pads a size T does not divide with zero units up to a multiple of
 * T (attribute tp_size); -1 when v is whole. */
int64_t kl_tp_size(const ir_value *v);
/* Between padded (cut axis of size >= size, padding last) and real (the
 * same with size units on axis): real into padded (padding zeroed) with
 * to_padded, else padded's real units into real. */
void kl_tp_pad(const ir_type *padded, int axis, int64_t size, void *paddedp, void *realp, bool to_padded);
/* A split value's initial values: the real full value initialised as on
 * one rank (same seed, name and fans), padded with zeros, then slice
 * index. */
void kl_tp_init(const ir_value *v, uint64_t seed, int index, void *host);

#endif
