/* sparse_scalar.c: the scalar reference of the sparse zero test; the AVX2 kernels finish their tails with it. */
#include <math.h>
#include <string.h>

#include "lib/half.h"
#include "lib/sparse_scan.h"

/*
 * The threshold is compared in the dtype's own terms: FLOAT32 against
 * (float)threshold, as the AVX2 kernel does (so both agree on every input);
 * the 16-bit types widened exactly to float, against the same float;
 * FLOAT64 against the double.
 */
int ina__block_nonzero_scalar(ina_dtype dt, const void *x, size_t n, double threshold)
{
    switch (dt) {
    case INA_INT32: {
        const int32_t *v = x;
        for (size_t i = 0; i < n; i++)
            if (v[i])
                return 1;
        return 0;
    }
    case INA_FLOAT32: {
        const float *v = x;
        const float t = threshold > 0 ? (float)threshold : 0.0f;
        for (size_t i = 0; i < n; i++)
            if (!(fabsf(v[i]) <= t))
                return 1;
        return 0;
    }
    case INA_FLOAT16:
    case INA_BFLOAT16: {
        const uint16_t *v = x;
        const float t = threshold > 0 ? (float)threshold : 0.0f;
        for (size_t i = 0; i < n; i++) {
            if (!(v[i] & 0x7FFF))
                continue;
            if (t <= 0)
                return 1;
            uint32_t b = dt == INA_FLOAT16 ? ina__f16_to_f32_bits(v[i]) : (uint32_t)v[i] << 16;
            float f;
            memcpy(&f, &b, 4);
            if (!(fabsf(f) <= t))
                return 1;
        }
        return 0;
    }
    case INA_FLOAT64: {
        const double *v = x;
        const double t = threshold > 0 ? threshold : 0.0;
        for (size_t i = 0; i < n; i++)
            if (!(fabs(v[i]) <= t))
                return 1;
        return 0;
    }
    }
    return 1; /* unknown dtype: never called (ctx.c checks); never "zero" */
}
