/* wire16.c: one block of a float dtype to and from the 16-bit wire (wire16.h), and its error bounds. */
#include "lib/wire16.h"

#include <math.h>

#include "lib/dtype.h"

#define CHUNK 256 /* doubles per stack chunk of the rounding paths (2 KiB) */

/* 1 when dt travels in its own format: its values are the wire's, both ways. */
static int own_format(ina_dtype dt, enum ina_h16_fmt f)
{
    return (dt == INA_FLOAT16 && f == INA_H16_F16) || (dt == INA_BFLOAT16 && f == INA_H16_BF16);
}

int ina__w16_fmt(ina_dtype dt, enum ina_h16_fmt f32_fmt)
{
    switch (dt) {
    case INA_FLOAT16: return INA_H16_F16;
    case INA_BFLOAT16: return INA_H16_BF16;
    case INA_FLOAT32: return f32_fmt == INA_H16_F16 ? INA_H16_F16 : INA_H16_BF16;
    case INA_INT32:
    case INA_FLOAT64: break;
    }
    return -1;
}

int16_t ina__w16_scale(ina_dtype dt, enum ina_h16_fmt f, const void *x, size_t n)
{
    /* FLOAT16, BFLOAT16 go as they are; bfloat16 has binary32's range:
     * nothing to scale. binary16 has not: FLOAT32's block's largest finite
     * value goes to [2^14, 2^15], the rest keeps 11 bits down to 2^-29 of it. */
    return dt == INA_FLOAT32 && f == INA_H16_F16 ? ina__h16_f32_scale(x, n) : 0;
}

void ina__w16_encode_at(ina_dtype dt, enum ina_h16_fmt f, const void *x, size_t n, int16_t e,
                        uint8_t *out)
{
    if (dt != INA_FLOAT32) /* FLOAT16, BFLOAT16 in their own format: the bits as they are */
        ina__h16_put(x, n, out);
    else
        ina__h16_encode_f32(x, n, e, f, out);
}

int16_t ina__w16_encode(ina_dtype dt, enum ina_h16_fmt f, const void *x, size_t n, uint8_t *out)
{
    int16_t e = ina__w16_scale(dt, f, x, n);
    ina__w16_encode_at(dt, f, x, n, e, out);
    return e;
}

void ina__w16_decode(ina_dtype dt, enum ina_h16_fmt f, ina_op op, const uint8_t *in, size_t n,
                     int16_t s, int nworkers, void *out)
{
    const int avg = op == INA_AVG;
    if (!avg && s == 0 && own_format(dt, f)) { /* the switch's rounding is the one rounding */
        ina__h16_get(in, n, f, out);
        return;
    }
    if (!avg && dt == INA_FLOAT32) { /* val(w) * 2^s, rounded once (exact for s in range) */
        ina__h16_to_f32(in, n, s, f, out);
        return;
    }
    /* AVG, or a 16-bit sum with s != 0: the exact double (AVG: divided by N,
     * one rounding, as §8.4), then one rounding to the dtype. For FLOAT16
     * with s > 0 that rounding is exact, or the IEEE overflow to Inf. */
    double buf[CHUNK];
    for (size_t i = 0; i < n; i += CHUNK) {
        size_t m = n - i < CHUNK ? n - i : CHUNK;
        ina__h16_to_f64(in + 2 * i, m, s, avg && nworkers > 1 ? nworkers : 1, f, buf);
        ina__round_to_dtype(dt, buf, m, out, i);
    }
}

/*
 * The bound (PROTOCOL.md §8.10.6), step by step, with u = 2^-24, (rho, sigma)
 * the wire format's rounding (binary16 2^-11, 2^-25; bfloat16 2^-8, 2^-134),
 * X = abs_sum, S* = exact_sum, tau = 2^s sigma + 2^-150:
 *  1. encode: a rank's value v_r as the switch adds it, |v_r - x_r| <=
 *     rho_in |x_r| + tau_in: 0 for the 16-bit dtypes in their own format,
 *     (rho, tau) for FLOAT32 (its exp e_r <= s; 2^-150: a binary32 product
 *     below the normal range);
 *  2. the switch's binary32 sums: n - 1 additions in any order err by at
 *     most (n - 1) u sum |inputs| (Rump, BIT 2012; additions that underflow
 *     are exact), V = (1 + rho_in) X + N tau_in bounding sum |v_r|; in a
 *     tree every partial sum is at most g V + C tau, g = (1 + rho)(1 + (N-1)u),
 *     since the root adds rounded partial sums;
 *  3. a child's partial sum to 16 bits: rho |its sum| + tau each;
 *  4. the RESULT: rho |S~| + tau, |S~| <= |S*| + D;
 *  5. the worker: nothing for a 16-bit dtype in its own format with s >= 0
 *     (its values are the dtype's, or beyond its range: +-Inf); FLOAT32
 *     2^-150 (a value below binary32's normal range); otherwise one rounding
 *     to the dtype; AVG first divides in double (2^-53 relative).
 */
double ina__w16_tree_error_bound(ina_dtype dt, enum ina_h16_fmt f, ina_op op, int world,
                                 int children, double abs_sum, double partial_abs,
                                 double exact_sum, int16_t s)
{
    double rel_d, sub_d;
    if (ina__w16_fmt(dt, f) < 0 || ina__dtype_rounding(dt, &rel_d, &sub_d) != 1)
        return NAN;
    abs_sum = fabs(abs_sum);
    partial_abs = fabs(partial_abs);
    if (!isfinite(abs_sum) || !isfinite(partial_abs) || !isfinite(exact_sum))
        return INFINITY;
    const double u = 0x1p-24;
    const double rho = f == INA_H16_F16 ? 0x1p-11 : 0x1p-8;
    const double sigma = f == INA_H16_F16 ? 0x1p-25 : 0x1p-134;
    const double n = world < 1 ? 1.0 : (double)world;
    const double c = children < 0 ? 0.0 : (double)children;
    const double tau = ldexp(sigma, s) + 0x1p-150;
    const int own = own_format(dt, f);
    const double rho_in = own ? 0.0 : rho, tau_in = own ? 0.0 : tau;
    const double v = (1.0 + rho_in) * abs_sum + n * tau_in;
    const double g = c > 0 ? (1.0 + rho) * (1.0 + (n - 1.0) * u) : 1.0;
    double d = rho_in * abs_sum + n * tau_in + (n - 1.0) * u * (g * v + c * tau);
    if (c > 0)
        d += rho * (partial_abs + rho_in * abs_sum + n * tau_in + (n - 1.0) * u * v) + c * tau;
    const double at = fabs(exact_sum);
    const double by = d + rho * (at + d) + tau; /* |y - S*|, y the RESULT's value */
    const double y = at + by;
    if (op != INA_AVG) {
        if (own && s >= 0)
            return by;
        if (dt == INA_FLOAT32)
            return by + 0x1p-150;
        return by + rel_d * y + sub_d;
    }
    const double q = 0x1p-53;
    return by / n + q * y / n + rel_d * (1.0 + q) * y / n + sub_d;
}

double ina__w16_error_bound(ina_dtype dt, enum ina_h16_fmt f, ina_op op, int world,
                            double abs_sum, double exact_sum, int16_t s)
{
    return ina__w16_tree_error_bound(dt, f, op, world, 0, abs_sum, 0.0, exact_sum, s);
}

/*
 * The public form: the RESULT's s is not the caller's to know, so it is
 * bounded from amax (2^(E-1) <= amax < 2^E, L = ceil(log2 N)). bfloat16: s
 * is the largest packet exp, 0. binary16: a rank's exp is at most E - 15
 * (FLOAT32's scale; 0 for FLOAT16) and a lane, |L| < N 2^E (1 + 2^-10), fits
 * binary16 at s_fit <= E + L - 14; s is the larger, and the bound grows with s.
 */
int16_t ina__w16_scale_bound(ina_dtype dt, enum ina_h16_fmt f, int world, double amax)
{
    (void)dt;
    if (f != INA_H16_F16 || !(amax > 0) || !isfinite(amax))
        return 0;
    int e, l = 0;
    (void)frexp(amax, &e);
    while (l < 9 && (1 << l) < world)
        l++;
    int s = e + l - 14;
    return (int16_t)(s < 0 ? 0 : ina__h16_clamp_exp(s));
}

INA_EXTERN double ina_wire16_error_bound(ina_dtype dtype, int wire_half, ina_op op,
                                         int world_size, double abs_sum, double exact_sum,
                                         double amax)
{
    int f = ina__w16_fmt(dtype, wire_half == INA_WIRE_HALF_FP16 ? INA_H16_F16 : INA_H16_BF16);
    if (f < 0 || (op != INA_SUM && op != INA_AVG))
        return NAN;
    if (!isfinite(amax) || !isfinite(abs_sum) || !isfinite(exact_sum))
        return INFINITY;
    return ina__w16_error_bound(dtype, (enum ina_h16_fmt)f, op, world_size, abs_sum, exact_sum,
                                ina__w16_scale_bound(dtype, (enum ina_h16_fmt)f, world_size,
                                                     fabs(amax)));
}
