/* Host values of any dtype: one element stored or loaded as a double,
 * a run of them converted from one dtype to another (the loader's
 * fields into the dtype of the input they feed), and the initial values
 * of a persistent value from its "init" attribute. Nothing here knows a
 * session or a backend: the data side, checkpoints and the slices of
 * tensor-parallel and ZeRO-3 params use it as the session does. */
#include <math.h>
#include <string.h>

#include "values.h"
#include "base/scalar.h"

/* ---- host conversions (bf16 and f16: base/scalar.h) ---- */

void kl_store_as(ir_dtype dt, void *dst, int64_t i, double x)
{
    switch (dt) {
    case IR_F32: ((float *)dst)[i] = (float)x; break;
    case IR_F64: ((double *)dst)[i] = x; break;
    case IR_BF16: ((uint16_t *)dst)[i] = kl_f32_to_bf16((float)x); break;
    case IR_F16: ((uint16_t *)dst)[i] = kl_f32_to_f16((float)x); break;
    case IR_I32: ((int32_t *)dst)[i] = (int32_t)x; break;
    case IR_I64: ((int64_t *)dst)[i] = (int64_t)x; break;
    case IR_U8: ((uint8_t *)dst)[i] = (uint8_t)x; break;
    default: kl_panic("cannot store %s", ir_dtype_name(dt));
    }
}

double kl_load_as(ir_dtype dt, const void *src, int64_t i)
{
    switch (dt) {
    case IR_F32: return ((const float *)src)[i];
    case IR_F64: return ((const double *)src)[i];
    case IR_BF16: return kl_bf16_to_f32(((const uint16_t *)src)[i]);
    case IR_F16: return kl_f16_to_f32(((const uint16_t *)src)[i]);
    case IR_I32: return ((const int32_t *)src)[i];
    case IR_I64: return (double)((const int64_t *)src)[i];
    case IR_U8: return ((const uint8_t *)src)[i];
    default: kl_panic("cannot load %s", ir_dtype_name(dt));
    }
}

void kl_convert_values(ir_dtype to, void *dst, ir_dtype from, const void *src, int64_t n)
{
    if (to == from) {
        memcpy(dst, src, (size_t)(n * ir_dtype_size(to)));
    } else if (from == IR_U8 && to == IR_F32) {
        /* Bytes into f32 (images): exact, as through a double. */
        const uint8_t *s = src;
        float *d = dst;
        for (int64_t i = 0; i < n; i++)
            d[i] = (float)s[i];
    } else {
        for (int64_t i = 0; i < n; i++)
            kl_store_as(to, dst, i, kl_load_as(from, src, i));
    }
}

int64_t kl_first_nonfinite(ir_dtype dt, const void *src, int64_t n)
{
    if (!ir_dtype_is_float(dt))
        return -1;
    size_t size = (size_t)ir_dtype_size(dt);
    for (int64_t i = 0; i < n; i++) {
        double one[1]; /* aligned for every dtype */
        memcpy(one, (const unsigned char *)src + (size_t)i * size, size);
        if (!isfinite(kl_load_as(dt, one, 0)))
            return i;
    }
    return -1;
}

/* ---- initialisers ---- */

static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* A uniform double in [0, 1) from a splitmix64 stream. */
static double next_uniform(uint64_t *state)
{
    *state += 0x9e3779b97f4a7c15ull;
    return (double)(mix64(*state) >> 11) * (1.0 / 9007199254740992.0);
}

static double next_normal(uint64_t *state)
{
    /* Box-Muller; one of the pair is enough here. */
    double u1 = next_uniform(state), u2 = next_uniform(state);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

/* Fans of a weight: [in, out] for rank 2 (x @ w), [out, in, kh, kw] for
 * convolution kernels. */
static void fans(const ir_type *t, double *in, double *out)
{
    if (t->rank == 2) {
        *in = (double)t->dim[0];
        *out = (double)t->dim[1];
    } else if (t->rank >= 3) {
        double field = 1;
        for (int i = 2; i < t->rank; i++)
            field *= (double)t->dim[i];
        *in = (double)t->dim[1] * field;
        *out = (double)t->dim[0] * field;
    } else {
        *in = *out = t->rank ? (double)t->dim[0] : 1.0;
    }
}

void kl_init_values(const ir_value *v, uint64_t seed, void *host)
{
    const ir_type *t = &v->type;
    int64_t n = ir_type_numel(t);
    ir_attr *init = ir_attrs_find(&v->attrs, "init");
    const char *kind = init ? init->val.s : "zeros";
    const ir_attrs *args = init && init->val.kind == IR_ATTR_CALL ? init->val.args : NULL;
    uint64_t state = mix64(seed ^ kl_hash_bytes(KL_HASH_INIT, v->name, strlen(v->name)));
    double fan_in, fan_out;
    fans(t, &fan_in, &fan_out);
    for (int64_t i = 0; i < n; i++) {
        double x;
        if (!strcmp(kind, "ones")) {
            x = 1;
        } else if (!strcmp(kind, "constant")) {
            x = args ? ir_attr_float(args, "value", 0) : 0;
        } else if (!strcmp(kind, "normal")) {
            x = (args ? ir_attr_float(args, "mean", 0) : 0) + (args ? ir_attr_float(args, "std", 0.01) : 0.01) * next_normal(&state);
        } else if (!strcmp(kind, "uniform")) {
            double lo = args ? ir_attr_float(args, "low", -0.05) : -0.05, hi = args ? ir_attr_float(args, "high", 0.05) : 0.05;
            x = lo + (hi - lo) * next_uniform(&state);
        } else if (!strcmp(kind, "xavier")) {
            double a = (args ? ir_attr_float(args, "gain", 1) : 1) * sqrt(6.0 / (fan_in + fan_out));
            x = -a + 2 * a * next_uniform(&state);
        } else if (!strcmp(kind, "kaiming")) {
            double std = (args ? ir_attr_float(args, "gain", M_SQRT2) : M_SQRT2) / sqrt(fan_in);
            x = std * next_normal(&state);
        } else {
            x = 0;
        }
        kl_store_as(t->dtype, host, i, x);
    }
}
