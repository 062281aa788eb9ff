/* dtypes.h: test helpers for the element types: values from the formats' own definitions, exact sums, the AVG bound. */
#ifndef INA_TEST_DTYPES_H
#define INA_TEST_DTYPES_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common/half_bits.h"
#include "ina.h"

/* f16_value() and bf16_value(): the value of a 16-bit pattern from the
 * format's definition (not with libina's conversion, which the tests check),
 * shared with ina-bench's verifier. */
#include "../tools/bench_data.h"

/* A float's bit pattern and back (common/half_bits.h's, under the tests' names). */
static inline float bits_float(uint32_t b) { return ina__f32_of_bits(b); }
static inline uint32_t float_bits(float f) { return ina__f32_bits(f); }

/* Element i of a buffer of dtype dt, as a double (exact). */
static inline double value_at(ina_dtype dt, const void *x, size_t i)
{
    switch (dt) {
    case INA_INT32: return ((const int32_t *)x)[i];
    case INA_FLOAT32: return ((const float *)x)[i];
    case INA_FLOAT16: return f16_value(((const uint16_t *)x)[i]);
    case INA_BFLOAT16: return bf16_value(((const uint16_t *)x)[i]);
    case INA_FLOAT64: return ((const double *)x)[i];
    }
    return NAN;
}

/*
 * Reference rounding of a double to a format with p significant bits,
 * smallest subnormal 2^emin_sub and largest finite value maxf: scale to the
 * ulp's binade and rint (RNE) in double, which is exact. Returns the rounded
 * value (+-Inf on overflow), not its bits.
 */
static inline double ref_round(double d, int p, int emin_sub, double maxf)
{
    if (isnan(d) || isinf(d) || d == 0)
        return d;
    int ex;
    (void)frexp(fabs(d), &ex); /* 2^(ex-1) <= |d| < 2^ex */
    int ulp_e = ex - p < emin_sub ? emin_sub : ex - p;
    double r = ldexp(nearbyint(ldexp(fabs(d), -ulp_e)), ulp_e);
    if (r > maxf)
        r = INFINITY;
    return copysign(r, d);
}

/* s += v exactly as hi + lo (Knuth's TwoSum): reference sums of doubles of
 * very different magnitudes need more than one double. */
static inline void two_sum(double *hi, double *lo, double v)
{
    double s = *hi + v, bb = s - *hi;
    *lo += (*hi - (s - bb)) + (v - bb);
    *hi = s;
}

/* ina.h's bound for INA_AVG: |result - exact_sum / N| <= this. */
static inline double avg_error_bound(ina_dtype dt, int n, double amax, double exact_sum)
{
    double sub = dt == INA_FLOAT32    ? 0x1p-149
                 : dt == INA_FLOAT16  ? 0x1p-25
                 : dt == INA_BFLOAT16 ? 0x1p-134
                                      : 0.0;
    return ina_error_bound(dt, n, amax, exact_sum) / n + 0x1p-52 * fabs(exact_sum / n) + sub;
}

#endif
