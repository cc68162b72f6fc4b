/* Decoding a sample's members into arrays, by the field's last extension:
 *   png           u8[C, H, W] (libpng; gray 1, gray+alpha 2, RGB 3, RGBA 4
 *                 channels; 16-bit samples reduced to 8)
 *   jpg, jpeg     u8[C, H, W] (libjpeg-turbo; gray 1 or RGB 3 channels)
 *   cls           i64 scalar: a decimal integer as text, any size i64 holds
 *   npy           the array's own dtype and shape (u1, i4, i8, f2, f4, f8,
 *                 little-endian, C order)
 *   anything else u8[bytes]: the raw bytes
 * Channels first, as the model's conv2d wants them. */
#ifndef KILN_DECODE_H
#define KILN_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "ir/ir.h"

#define KL_FIELD_MAX_RANK 6

typedef struct kl_field_type {
    ir_dtype dtype;
    int rank;                         /* 0: a scalar */
    int64_t shape[KL_FIELD_MAX_RANK];
} kl_field_type;

int64_t kl_field_numel(const kl_field_type *t);
int64_t kl_field_bytes(const kl_field_type *t);
bool kl_field_type_eq(const kl_field_type *a, const kl_field_type *b);
/* "u8[1, 28, 28]", "i64" into buf. */
void kl_field_type_str(const kl_field_type *t, char *buf, size_t n);

/* Decodes data (size bytes of member field) into *out (malloc'd,
 * kl_field_bytes(t)); -1 with why (the reason alone: the caller names
 * the shard and member). */
int kl_decode(const char *field, const uint8_t *data, size_t size, kl_field_type *t, uint8_t **out, char *why, size_t n);

#endif
