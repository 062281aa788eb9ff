/* sparse_scan.c: the zero test of block-sparse all-reduce: scalar reference, dispatch, and the block map. */
#include <math.h>
#include <string.h>

#include "lib/half.h"
#include "lib/quant_simd.h"
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

int ina__block_nonzero(ina_dtype dt, const void *x, size_t n, double threshold)
{
    if (ina__quant_impl_active() == INA_QUANT_IMPL_AVX2)
        return ina__block_nonzero_avx2(dt, x, n, threshold);
    return ina__block_nonzero_scalar(dt, x, n, threshold);
}

/* Element size of the dtypes the zero test knows. */
static size_t esize(ina_dtype dt)
{
    return dt == INA_FLOAT64 ? 8 : (dt == INA_FLOAT16 || dt == INA_BFLOAT16) ? 2 : 4;
}

uint64_t ina__sparse_scan(ina_dtype dt, const void *x, size_t count, size_t block, size_t phase,
                          double threshold, uint64_t *map)
{
    const uint8_t *p = x;
    const size_t es = esize(dt);
    const int simd = ina__quant_impl_active() == INA_QUANT_IMPL_AVX2;
    uint64_t nblocks = (phase + count + block - 1) / block, nnz = 0;
    memset(map, 0, ((nblocks + 63) / 64) * sizeof(uint64_t));
    for (uint64_t b = 0; b < nblocks; b++) {
        size_t start = b ? (size_t)b * block - phase : 0, end = (size_t)(b + 1) * block - phase;
        size_t n = (end < count ? end : count) - start;
        const void *blk = p + start * es;
        int nz = simd ? ina__block_nonzero_avx2(dt, blk, n, threshold)
                      : ina__block_nonzero_scalar(dt, blk, n, threshold);
        if (nz) {
            map[b >> 6] |= 1ull << (b & 63);
            nnz++;
        }
    }
    return nnz;
}
