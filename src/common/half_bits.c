/* half_bits.c: one float16 or bfloat16 value to and from binary32 bits: the scalar reference of every 16-bit conversion. */
#include "common/half_bits.h"

#include <math.h>

uint32_t ina__f16_to_f32_bits(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (e == 0x1F) /* Inf, or NaN: quieted as F16C does */
        return sign | 0x7F800000u | (m << 13) | (m ? 0x400000u : 0u);
    if (e != 0) /* normal: rebias 15 -> 127 */
        return sign | ((e + 112u) << 23) | (m << 13);
    if (m == 0)
        return sign;
    /* Subnormal m * 2^-24: shift the leading one up to bit 10 (implicit). */
    unsigned sh = (unsigned)__builtin_clz(m) - 21u;
    m <<= sh;
    return sign | ((113u - sh) << 23) | ((m & 0x3FFu) << 13);
}

uint16_t ina__f32_bits_to_f16(uint32_t f)
{
    uint16_t sign = (uint16_t)((f >> 16) & 0x8000u);
    uint32_t a = f & 0x7FFFFFFFu;
    if (a > 0x7F800000u) /* NaN: quiet, top payload bits (as F16C) */
        return (uint16_t)(sign | 0x7E00u | ((a >> 13) & 0x3FFu));
    if (a >= 0x477FF000u) /* >= 65520 = 65504 + half an ulp: RNE overflows to Inf */
        return (uint16_t)(sign | 0x7C00u);
    if (a >= 0x38800000u) { /* >= 2^-14: a normal half. Rebias, then RNE on 13 bits;
                             * a carry out of the fraction bumps the exponent, as it should. */
        uint32_t v = a - 0x38000000u;
        v += 0xFFFu + ((v >> 13) & 1u);
        return (uint16_t)(sign | (v >> 13));
    }
    uint32_t e = a >> 23;
    if (e < 102) /* below 2^-25 (float subnormals included): rounds to zero */
        return sign;
    /* A half subnormal: q = round(a / 2^-24) = round(m * 2^(e - 126)), m with
     * its implicit bit; q may round up to 0x400, the smallest normal. */
    uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
    unsigned sh = 126u - e; /* 14..24 */
    uint32_t q = m >> sh, rem = m & ((1u << sh) - 1u), halfway = 1u << (sh - 1u);
    q += rem > halfway || (rem == halfway && (q & 1u));
    return (uint16_t)(sign | q);
}

uint16_t ina__f32_bits_to_bf16(uint32_t f)
{
    if ((f & 0x7FFFFFFFu) > 0x7F800000u) /* NaN: keep it one (the RNE add could carry into Inf) */
        return (uint16_t)((f >> 16) | 0x40u);
    /* RNE on the low 16 bits; a carry runs into the exponent, up to Inf. */
    return (uint16_t)((f + 0x7FFFu + ((f >> 16) & 1u)) >> 16);
}

uint32_t ina__f64_to_f32_odd_bits(double d)
{
    /* RNE to float, then undo a rounding away from zero (step one ulp back:
     * the truncation) and mark any inexact result odd. NaN compares false
     * throughout and passes unchanged; an overflow to Inf steps back to
     * FLT_MAX, which is odd and rounds on to Inf in both 16-bit formats. */
    float f = (float)d;
    double back = (double)f;
    uint32_t b = ina__f32_bits(f);
    if (fabs(back) > fabs(d))
        b -= 1u;
    if (back < d || back > d)
        b |= 1u;
    return b;
}
