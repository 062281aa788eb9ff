/* h16_scalar.c: the 16-bit wire's kernels (h16.h), scalar: the reference the AVX2 kernels match bit for bit. */
#include "common/h16.h"

#include <math.h>
#include <string.h>

#include "common/half_bits.h"
#include "common/h16_simd.h"

/*
 * Exactness of the reference (the AVX2 kernels do the same operations lane
 * by lane, so they give the same bits):
 *  - widening either format to binary32 is exact (ina__f16_to_f32_bits
 *    quiets a NaN as F16C does; bfloat16 is a shift);
 *  - 2^e for e in -126..126 is a normal binary32, so fl32(x * 2^e) is one
 *    IEEE multiplication, exact unless the product leaves the normal range;
 *  - the add is one binary32 addition (this file is compiled with
 *    -ffp-contract=off: no fused multiply-add joins the two);
 *  - narrowing is ina__f32_bits_to_f16 / _bf16 (RNE, IEEE overflow, gradual
 *    underflow), then any NaN becomes the canonical one.
 * The binary32 arithmetic runs in the default environment (round to nearest,
 * no flush-to-zero, no denormals-are-zero), which neither libina nor
 * ina-switch changes.
 */

/* 2^e as a binary32, e in -126..126 (after ina__h16_clamp_exp). */
static inline float pow2f(int e) { return ina__f32_of_bits((uint32_t)(e + 127) << 23); }

static inline uint16_t get_be16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static inline void put_be16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

/* The binary32 value of one element (exact). */
static inline float widen(uint16_t w, enum ina_h16_fmt f)
{
    return ina__f32_of_bits(f == INA_H16_F16 ? ina__f16_to_f32_bits(w) : (uint32_t)w << 16);
}

/* A NaN of the format as its canonical quiet NaN, anything else as it is. */
static inline uint16_t canon16(uint16_t w, enum ina_h16_fmt f)
{
    if (f == INA_H16_F16)
        return (w & 0x7FFFu) > 0x7C00u ? INA_H16_F16_QNAN : w;
    return (w & 0x7FFFu) > 0x7F80u ? INA_H16_BF16_QNAN : w;
}

/* RNE of a binary32 to the format, canonical NaN. */
static inline uint16_t narrow(float x, enum ina_h16_fmt f)
{
    uint32_t b = ina__f32_bits(x);
    return canon16(f == INA_H16_F16 ? ina__f32_bits_to_f16(b) : ina__f32_bits_to_bf16(b), f);
}

/* ---- Switch -------------------------------------------------------------------------- */

void ina__h16_load_scalar(int32_t *v, const uint8_t *p, size_t words, int16_t exp,
                          enum ina_h16_fmt f)
{
    const int e = ina__h16_clamp_exp(exp);
    const float scale = pow2f(e);
    for (size_t i = 0; i < 2 * words; i++) {
        float x = widen(get_be16(p + 2 * i), f);
        if (e != 0)
            x *= scale;
        uint32_t b = ina__f32_bits(x);
        memcpy(&v[i], &b, 4);
    }
}

void ina__h16_add_scalar(int32_t *v, const uint8_t *p, size_t words, int16_t exp,
                         enum ina_h16_fmt f)
{
    const int e = ina__h16_clamp_exp(exp);
    const float scale = pow2f(e);
    for (size_t i = 0; i < 2 * words; i++) {
        float x = widen(get_be16(p + 2 * i), f), a;
        if (e != 0)
            x *= scale;
        memcpy(&a, &v[i], 4);
        a += x;
        memcpy(&v[i], &a, 4);
    }
}

/* The smallest s with m * 2^-s < 65520, for the binary32 pattern m of a finite,
 * nonzero magnitude: 65520 = 2^15 * (2 - 2^-11), so with m = 1.f * 2^k it is
 * k - 15, or k - 14 when the fraction f reaches 1 - 2^-11 (0x7FF000 of 2^23).
 * A subnormal m (k = -127) gives a value below every clamped exp. */
int ina__h16_fit_f16(uint32_t m)
{
    int k = (int)(m >> 23) - 127;
    return k - 15 + ((m & 0x7FFFFFu) >= 0x7FF000u);
}

int16_t ina__h16_result_exp_scalar(const int32_t *v, size_t words, int16_t sexp,
                                   enum ina_h16_fmt f)
{
    int s = ina__h16_clamp_exp(sexp);
    if (f != INA_H16_F16)
        return (int16_t)s;
    uint32_t m = 0; /* the largest finite magnitude's pattern: they order like the values */
    for (size_t i = 0; i < 2 * words; i++) {
        uint32_t a = (uint32_t)v[i] & 0x7FFFFFFFu;
        if (a < 0x7F800000u && a > m)
            m = a;
    }
    if (m != 0) {
        int fit = ina__h16_fit_f16(m);
        s = fit > s ? fit : s;
    }
    return (int16_t)s; /* <= 113: the largest finite binary32 fits at s = 113 */
}

void ina__h16_store_scalar(uint8_t *p, const int32_t *v, size_t words, int16_t s,
                           enum ina_h16_fmt f)
{
    const int e = ina__h16_clamp_exp(s);
    const float scale = pow2f(-e);
    for (size_t i = 0; i < 2 * words; i++) {
        float x;
        memcpy(&x, &v[i], 4);
        if (e != 0)
            x *= scale;
        put_be16(p + 2 * i, narrow(x, f));
    }
}

/* ---- Worker -------------------------------------------------------------------------- */

void ina__h16_put_scalar(const uint16_t *x, size_t n, uint8_t *out)
{
    for (size_t i = 0; i < n; i++)
        put_be16(out + 2 * i, x[i]);
    if (n & 1)
        put_be16(out + 2 * n, 0);
}

void ina__h16_get_scalar(const uint8_t *in, size_t n, enum ina_h16_fmt f, uint16_t *out)
{
    for (size_t i = 0; i < n; i++)
        out[i] = canon16(get_be16(in + 2 * i), f);
}

int16_t ina__h16_f32_scale_scalar(const float *x, size_t n)
{
    uint32_t m = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t a = ina__f32_bits(x[i]) & 0x7FFFFFFFu;
        if (a < 0x7F800000u && a > m)
            m = a;
    }
    return ina__h16_scale_of_max(m);
}

int16_t ina__h16_scale_of_max(uint32_t m)
{
    if (m == 0)
        return 0;
    /* m = 1.f * 2^k, so E = k + 1 and the scale is E - 15 = k - 14; a
     * subnormal m (exponent field 0) is below 2^-126 and clamps to -126. */
    return (int16_t)ina__h16_clamp_exp((int)(m >> 23) - 127 - 14);
}

void ina__h16_encode_f32_scalar(const float *x, size_t n, int16_t e, enum ina_h16_fmt f,
                                uint8_t *out)
{
    const int c = ina__h16_clamp_exp(e);
    const float scale = pow2f(-c);
    for (size_t i = 0; i < n; i++) {
        float y = x[i];
        if (c != 0)
            y *= scale;
        /* Encode does not canonicalise NaN (the switch does): the conversion's bits. */
        uint32_t b = ina__f32_bits(y);
        put_be16(out + 2 * i, f == INA_H16_F16 ? ina__f32_bits_to_f16(b) : ina__f32_bits_to_bf16(b));
    }
    if (n & 1)
        put_be16(out + 2 * n, 0);
}

void ina__h16_to_f32_scalar(const uint8_t *in, size_t n, int16_t s, enum ina_h16_fmt f, float *out)
{
    for (size_t i = 0; i < n; i++) {
        float x = widen(get_be16(in + 2 * i), f);
        /* One rounding: the double product is exact (or below double's normal
         * range, where the float result is 0 either way). */
        out[i] = isnan(x) ? ina__f32_of_bits(0x7FC00000u) : (float)ldexp((double)x, s);
    }
}

void ina__h16_to_f64_scalar(const uint8_t *in, size_t n, int16_t s, int div, enum ina_h16_fmt f,
                            double *out)
{
    for (size_t i = 0; i < n; i++) {
        double x = widen(get_be16(in + 2 * i), f);
        if (div > 1)
            x /= div;
        out[i] = isnan(x) ? (double)NAN : ldexp(x, s);
    }
}

const struct ina_h16_kernels ina__h16_scalar = {
    ina__h16_load_scalar, ina__h16_add_scalar,    ina__h16_result_exp_scalar,
    ina__h16_store_scalar, ina__h16_put_scalar,   ina__h16_get_scalar,
    ina__h16_f32_scale_scalar, ina__h16_encode_f32_scalar, ina__h16_to_f32_scalar,
    ina__h16_to_f64_scalar,
};
