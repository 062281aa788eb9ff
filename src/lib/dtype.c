/* dtype.c: one block of any dtype to and from the wire's int32, and the per-dtype error bound. */
#include "lib/dtype.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "common/half_bits.h"
#include "common/wire.h"
#include "lib/half.h"
#include "lib/quant.h"

/* Elements per stack chunk of the 16-bit and AVG paths: 2 KiB of doubles. */
#define CHUNK 256

size_t ina__dtype_size(ina_dtype dt)
{
    switch (dt) {
    case INA_INT32:
    case INA_FLOAT32: return 4;
    case INA_FLOAT16:
    case INA_BFLOAT16: return 2;
    case INA_FLOAT64: return 8;
    }
    return 0;
}

int ina__dtype_quantized(ina_dtype dt) { return dt != INA_INT32; }

uint8_t ina__wire_op(ina_op op)
{
    switch (op) {
    case INA_MAX: return INA_OP_MAX_I32;
    case INA_MIN: return INA_OP_MIN_I32;
    case INA_SUM:
    case INA_AVG: break;
    }
    return INA_OP_ADD_I32;
}

int16_t ina__block_exp(ina_dtype dt, const void *x, size_t n)
{
    switch (dt) {
    case INA_FLOAT32: return ina__quant_block_exp(x, n);
    case INA_FLOAT64: return ina__quant_block_exp_f64(x, n);
    case INA_FLOAT16: return ina__quant_exp_of_f32bits(ina__f16_absmax_f32bits(x, n));
    case INA_BFLOAT16: return ina__quant_exp_of_f32bits(ina__bf16_absmax_f32bits(x, n));
    case INA_INT32: break;
    }
    return 0;
}

/* 16-bit values: widen a chunk to float (exact), then the FLOAT32 encoder. */
static void encode_16(ina_dtype dt, const uint16_t *x, size_t n, int16_t e, int nworkers,
                      uint8_t *out)
{
    float buf[CHUNK];
    for (size_t i = 0; i < n; i += CHUNK) {
        size_t m = n - i < CHUNK ? n - i : CHUNK;
        if (dt == INA_FLOAT16)
            ina__f16_to_f32(x + i, m, buf);
        else
            ina__bf16_to_f32(x + i, m, buf);
        ina__quant_encode(buf, m, e, nworkers, out + 4 * i);
    }
}

void ina__block_encode(ina_dtype dt, const void *x, size_t n, int16_t e, int nworkers,
                       uint8_t *out)
{
    switch (dt) {
    case INA_INT32: ina__i32_encode(x, n, out); return;
    case INA_FLOAT32: ina__quant_encode(x, n, e, nworkers, out); return;
    case INA_FLOAT64: ina__quant_encode_f64(x, n, e, nworkers, out); return;
    case INA_FLOAT16:
    case INA_BFLOAT16: encode_16(dt, x, n, e, nworkers, out); return;
    }
}

void ina__round_to_dtype(ina_dtype dt, const double *buf, size_t m, void *out, size_t i)
{
    if (dt == INA_FLOAT16) {
        ina__f64_to_f16(buf, m, (uint16_t *)out + i);
    } else if (dt == INA_BFLOAT16) {
        ina__f64_to_bf16(buf, m, (uint16_t *)out + i);
    } else {
        float *o = (float *)out + i;
        for (size_t j = 0; j < m; j++)
            o[j] = (float)buf[j];
    }
}

/*
 * FLOAT16 and BFLOAT16 (FLOAT32 has the fused ina__quant_decode and
 * ina__quant_decode_avg): a chunk at a time, the exact double sums (or
 * for AVG the sums divided by N, one rounding in double), then rounded once
 * to the dtype.
 */
static void decode_narrow(ina_dtype dt, int avg, const uint8_t *in, size_t n, int16_t e,
                          int nworkers, void *out)
{
    double buf[CHUNK];
    for (size_t i = 0; i < n; i += CHUNK) {
        size_t m = n - i < CHUNK ? n - i : CHUNK;
        if (avg)
            ina__quant_decode_avg_f64(in + 4 * i, m, e, nworkers, buf);
        else
            ina__quant_decode_f64(in + 4 * i, m, e, nworkers, buf);
        ina__round_to_dtype(dt, buf, m, out, i);
    }
}

void ina__block_decode(ina_dtype dt, ina_op op, const uint8_t *in, size_t n, int16_t e,
                       int nworkers, void *out)
{
    const int avg = op == INA_AVG;
    switch (dt) {
    case INA_INT32:
        ina__i32_decode(in, n, out);
        if (avg) {
            /* C's division truncates toward zero; N >= 1, so INT32_MIN / N
             * cannot overflow. */
            int32_t *v = out;
            for (size_t i = 0; i < n; i++)
                v[i] /= nworkers;
        }
        return;
    case INA_FLOAT32:
        if (avg)
            ina__quant_decode_avg(in, n, e, nworkers, out);
        else
            ina__quant_decode(in, n, e, nworkers, out);
        return;
    case INA_FLOAT64:
        if (avg)
            ina__quant_decode_avg_f64(in, n, e, nworkers, out);
        else
            ina__quant_decode_f64(in, n, e, nworkers, out);
        return;
    case INA_FLOAT16:
    case INA_BFLOAT16: decode_narrow(dt, avg, in, n, e, nworkers, out); return;
    }
}

/* ---- Floats added as floats by the switch (INA_OP_ADD_F32) ------------------------ */

int ina__dtype_float_wire(ina_dtype dt)
{
    return dt == INA_FLOAT32 || dt == INA_FLOAT16 || dt == INA_BFLOAT16;
}

void ina__widen_16(ina_dtype dt, const void *x, size_t i, size_t m, float *buf)
{
    if (dt == INA_FLOAT16)
        ina__f16_to_f32((const uint16_t *)x + i, m, buf);
    else
        ina__bf16_to_f32((const uint16_t *)x + i, m, buf);
}

/* The lost elements of m floats against half a unit thr (see dtype.h): on the
 * bits, as integers (|x| is its bits without the sign, ordered as the values),
 * so that the pass is a compare and an add per element, which the compiler
 * vectorizes; it runs on the receive path of every quantized block. */
static size_t lost_f32(const float *x, size_t m, int nonfinite, double thr)
{
    uint32_t lo = 1, hi; /* count lo <= bits(|x|) <= hi */
    if (nonfinite || thr >= FLT_MAX) {
        lo = nonfinite ? 0 : 1; /* nonfinite: every finite element, zeros included */
        hi = 0x7F7FFFFFu;       /* bits of FLT_MAX */
    } else if (thr < 0x1p-149) {
        return 0; /* below the least subnormal: nothing nonzero is that small */
    } else {
        hi = ina__f32_bits((float)thr); /* a power of two in float's range: exact */
    }
    const uint32_t span = hi - lo;
    size_t lost = 0;
    for (size_t i = 0; i < m; i++)
        lost += (uint32_t)((ina__f32_bits(x[i]) & 0x7FFFFFFFu) - lo) <= span;
    return lost;
}

size_t ina__block_lost(ina_dtype dt, const void *x, size_t n, int16_t e, int nworkers)
{
    if (e == INA_EXP_ZERO || !ina__dtype_quantized(dt))
        return 0;
    const int nonfinite = e == INA_EXP_NONFINITE;
    const int headroom = ina__quant_headroom_bits(nworkers);
    if (dt == INA_FLOAT64) {
        const double *d = x;
        int ef = e < INA_QUANT_F64_EXP_MIN ? INA_QUANT_F64_EXP_MIN : e;
        double thr = nonfinite ? 0 : ldexp(1.0, ef + headroom - 32);
        size_t lost = 0;
        for (size_t i = 0; i < n; i++) {
            double a = fabs(d[i]);
            lost += nonfinite ? a <= DBL_MAX : (a != 0 && a <= thr);
        }
        return lost;
    }
    double thr = nonfinite ? 0 : ldexp(1.0, e + headroom - 32);
    if (dt == INA_FLOAT32)
        return lost_f32(x, n, nonfinite, thr);
    float buf[CHUNK];
    size_t lost = 0;
    for (size_t i = 0; i < n; i += CHUNK) {
        size_t m = n - i < CHUNK ? n - i : CHUNK;
        ina__widen_16(dt, x, i, m, buf);
        lost += lost_f32(buf, m, nonfinite, thr);
    }
    return lost;
}

/* A float's bits are a uint32: the int32 byte swap moves them unchanged. */
void ina__block_encode_f32wire(ina_dtype dt, const void *x, size_t n, uint8_t *out)
{
    if (dt == INA_FLOAT32) {
        ina__i32_encode(x, n, out);
        return;
    }
    float buf[CHUNK];
    for (size_t i = 0; i < n; i += CHUNK) {
        size_t m = n - i < CHUNK ? n - i : CHUNK;
        ina__widen_16(dt, x, i, m, buf);
        ina__i32_encode((const int32_t *)(const void *)buf, m, out + 4 * i);
    }
}

void ina__block_decode_f32wire(ina_dtype dt, ina_op op, const uint8_t *in, size_t n,
                               int nworkers, void *out)
{
    if (dt == INA_FLOAT32 && op != INA_AVG) {
        ina__i32_decode(in, n, out);
        return;
    }
    float sum[CHUNK];
    double buf[CHUNK];
    for (size_t i = 0; i < n; i += CHUNK) {
        size_t m = n - i < CHUNK ? n - i : CHUNK;
        ina__i32_decode(in + 4 * i, m, (int32_t *)(void *)sum);
        for (size_t j = 0; j < m; j++)
            buf[j] = op == INA_AVG ? (double)sum[j] / nworkers : (double)sum[j];
        ina__round_to_dtype(dt, buf, m, out, i);
    }
}

void ina__block_encode_order(ina_dtype dt, ina_op op, const void *x, size_t n, uint8_t *out)
{
    const uint32_t nan_key = ina__f32_order_key(op == INA_MIN ? 0xFFC00000u : 0x7FC00000u);
    float buf[CHUNK];
    for (size_t i = 0; i < n; i += CHUNK) {
        size_t m = n - i < CHUNK ? n - i : CHUNK;
        const float *f = buf;
        if (dt == INA_FLOAT32)
            f = (const float *)x + i;
        else
            ina__widen_16(dt, x, i, m, buf);
        for (size_t j = 0; j < m; j++) {
            uint32_t bits;
            memcpy(&bits, f + j, 4);
            uint32_t key = (bits & 0x7FFFFFFFu) > 0x7F800000u ? nan_key : ina__f32_order_key(bits);
            ina__put32(out + 4 * (i + j), key);
        }
    }
}

void ina__block_decode_order(ina_dtype dt, const uint8_t *in, size_t n, void *out)
{
    double buf[CHUNK];
    for (size_t i = 0; i < n; i += CHUNK) {
        size_t m = n - i < CHUNK ? n - i : CHUNK;
        for (size_t j = 0; j < m; j++) {
            uint32_t bits = ina__f32_order_key(ina__get32(in + 4 * (i + j)));
            if ((bits & 0x7FFFFFFFu) > 0x7F800000u)
                bits = 0x7FC00000u; /* a NaN: the quiet NaN, positive */
            float f;
            memcpy(&f, &bits, 4);
            if (dt == INA_FLOAT32)
                memcpy((uint8_t *)out + 4 * (i + j), &f, 4);
            else
                buf[j] = f;
        }
        if (dt != INA_FLOAT32)
            ina__round_to_dtype(dt, buf, m, out, i); /* exact: the value is one of the inputs */
    }
}

/* ---- Public error bounds ---------------------------------------------------------- */

int ina__dtype_rounding(ina_dtype dt, double *rel, double *sub)
{
    switch (dt) {
    case INA_FLOAT32: *rel = 0x1p-24, *sub = 0x1p-149; return 1;
    case INA_FLOAT16: *rel = 0x1p-11, *sub = 0x1p-25; return 1;
    case INA_BFLOAT16: *rel = 0x1p-8, *sub = 0x1p-134; return 1;
    case INA_FLOAT64: *rel = 0.0, *sub = 0.0; return 1;
    case INA_INT32: return 0;
    }
    return -1;
}

INA_EXTERN double ina_float_add_error_bound(ina_dtype dtype, int world_size, double abs_sum,
                                            double exact_sum)
{
    double rel, sub;
    int k = dtype == INA_FLOAT64 ? -1 : ina__dtype_rounding(dtype, &rel, &sub);
    if (k <= 0)
        return k == 0 ? 0.0 : NAN; /* INT32 exact; FLOAT64 never added as floats */
    abs_sum = fabs(abs_sum);
    if (abs_sum != abs_sum || abs_sum == INFINITY || exact_sum != exact_sum || isinf(exact_sum))
        return INFINITY;
    int n = world_size < 1 ? 1 : world_size;
    return (double)(n - 1) * 0x1p-24 * abs_sum * (1.0 + rel) + rel * fabs(exact_sum) + sub;
}

/*
 * Per float dtype: rel, the relative error of the final rounding to the type
 * (half its precision), and sub, its absolute error in the type's subnormal
 * range (half the smallest subnormal; FLOAT32 keeps ina_float_error_bound's
 * 2^-149). FLOAT64's decode is exact: both 0. The quantization term is that
 * of FLOAT32, with FLOAT64's exponent floor (quant.h).
 */
INA_EXTERN double ina_error_bound(ina_dtype dtype, int world_size, double amax,
                                  double exact_sum)
{
    double rel, sub;
    switch (dtype) {
    case INA_FLOAT32: return ina_float_error_bound(world_size, amax, exact_sum);
    case INA_FLOAT16: rel = 0x1p-11, sub = 0x1p-25; break;
    case INA_BFLOAT16: rel = 0x1p-8, sub = 0x1p-134; break;
    case INA_FLOAT64: rel = 0.0, sub = 0.0; break;
    case INA_INT32: return 0.0;
    default: return NAN;
    }
    amax = fabs(amax);
    if (amax != amax || amax == INFINITY || exact_sum != exact_sum || isinf(exact_sum))
        return INFINITY;
    const double round = rel * fabs(exact_sum) + sub;
    if (amax == 0.0)
        return round;
    int n = world_size < 1 ? 1 : world_size;
    int e;
    (void)frexp(amax, &e); /* amax = m * 2^e, 0.5 <= m < 1: the block exponent */
    if (dtype == INA_FLOAT64 && e < INA_QUANT_F64_EXP_MIN)
        e = INA_QUANT_F64_EXP_MIN;
    return (double)n * ldexp(1.0, e + ina__quant_headroom_bits(n) - 31) + round;
}
