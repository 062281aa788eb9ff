/* fixed.c: float blocks to and from 32-bit fixed point (wire op 5; fixed.h, PROTOCOL.md §13). */
#include "lib/fixed.h"

#include <math.h>
#include <string.h>

#include "common/wire.h"
#include "lib/dtype.h"

#define CHUNK 256 /* elements per stack chunk of the 16-bit paths */

/* One value: round(x 2^bits), ties to even, or the invalid code. x * 2^bits
 * is exact in double for every float, half and bfloat value (a power-of-two
 * scaling far from the double's limits), and for every double that does
 * not underflow, where the result rounds to 0 either way. */
static inline int32_t to_fixed(double x, double scale, size_t *invalid)
{
    double r = nearbyint(x * scale); /* the default rounding mode: to nearest even */
    if (!(fabs(r) <= (double)INT32_MAX)) { /* also NaN */
        (*invalid)++;
        return INA_FIX_INVALID;
    }
    return (int32_t)r;
}

size_t ina__fixed_encode(ina_dtype dt, const void *x, size_t n, int bits, uint8_t *out)
{
    const double scale = ldexp(1.0, bits);
    size_t invalid = 0;
    switch (dt) {
    case INA_FLOAT32:
        for (size_t i = 0; i < n; i++)
            ina__put32(out + 4 * i, (uint32_t)to_fixed(((const float *)x)[i], scale, &invalid));
        break;
    case INA_FLOAT64:
        for (size_t i = 0; i < n; i++)
            ina__put32(out + 4 * i, (uint32_t)to_fixed(((const double *)x)[i], scale, &invalid));
        break;
    case INA_FLOAT16:
    case INA_BFLOAT16: {
        float buf[CHUNK];
        for (size_t i = 0; i < n; i += CHUNK) {
            size_t m = n - i < CHUNK ? n - i : CHUNK;
            ina__widen_16(dt, x, i, m, buf);
            for (size_t j = 0; j < m; j++)
                ina__put32(out + 4 * (i + j), (uint32_t)to_fixed(buf[j], scale, &invalid));
        }
        break;
    }
    case INA_INT32: break; /* never: INT32 is not scaled */
    }
    return invalid;
}

size_t ina__fixed_decode(ina_dtype dt, ina_op op, const uint8_t *in, size_t n, int bits,
                         int nworkers, void *out)
{
    const double unit = ldexp(1.0, -bits);
    const int avg = op == INA_AVG;
    size_t invalid = 0;
    double buf[CHUNK];
    for (size_t i = 0; i < n; i += CHUNK) {
        size_t m = n - i < CHUNK ? n - i : CHUNK;
        for (size_t j = 0; j < m; j++) {
            int32_t q = (int32_t)ina__get32(in + 4 * (i + j));
            if (q == INA_FIX_INVALID) {
                invalid++;
                buf[j] = NAN;
                continue;
            }
            /* q 2^-bits is exact in double; AVG's division rounds once. */
            buf[j] = avg ? (double)q / nworkers * unit : (double)q * unit;
        }
        if (dt == INA_FLOAT64)
            memcpy((double *)out + i, buf, m * sizeof(double));
        else
            ina__round_to_dtype(dt, buf, m, out, i);
    }
    return invalid;
}

INA_EXTERN double ina_fixed_error_bound(ina_dtype dtype, int world_size, int bits,
                                        double exact_sum)
{
    double rel, sub;
    int k = ina__dtype_rounding(dtype, &rel, &sub);
    if (k <= 0)
        return k == 0 ? 0.0 : NAN;
    if (bits < 1 || bits > INA_FIXED_MAX_BITS)
        return NAN;
    if (exact_sum != exact_sum || isinf(exact_sum))
        return INFINITY;
    int n = world_size < 1 ? 1 : world_size;
    /* rel of the rounding applies to the computed sum, within the first term of exact */
    return (double)n * ldexp(1.0, -(bits + 1)) * (1.0 + rel) + rel * fabs(exact_sum) + sub;
}
