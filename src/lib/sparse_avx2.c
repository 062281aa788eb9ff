/* sparse_avx2.c: AVX2 kernels of the zero test (sparse_scan.h), compiled per function with target("avx2"). */
#include "lib/quant_simd.h"
#include "lib/sparse_scan.h"

#if INA_QUANT_HAVE_AVX2

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define INA_AVX2 __attribute__((target("avx2")))

/*
 * Threshold 0: a block is zero iff every element's bits, less the sign bit
 * for the float types, are 0. So one kernel serves every dtype: AND each
 * 32-byte vector with a mask of the dtype's non-sign bits, test for any bit
 * left, and stop at the first vector that has one. The masks as 32-bit
 * lanes (little endian): INT32 all bits; FLOAT32 0x7FFFFFFF; FLOAT16 and
 * BFLOAT16 0x7FFF7FFF (two elements per lane); FLOAT64 0xFFFFFFFF then
 * 0x7FFFFFFF (low word, then the high word with the sign).
 *
 * Threshold > 0, FLOAT32: |x| <= t compared as floats, NaN unordered, so it
 * counts as non-zero (_CMP_NLE_UQ is true for it). Other float dtypes with
 * a threshold go to the scalar code (ina__block_nonzero dispatches).
 *
 * The tail (bytes past the last whole vector) goes through the same test on
 * a zero-padded copy: zero padding never makes a block non-zero.
 */

INA_AVX2 static int any_bits(const uint8_t *p, size_t nbytes, uint64_t mask64)
{
    const __m256i mask = _mm256_set1_epi64x((long long)mask64);
    size_t i = 0;
    for (; i + 128 <= nbytes; i += 128) { /* four vectors per test: most blocks are long */
        __m256i a = _mm256_loadu_si256((const __m256i *)(p + i));
        __m256i b = _mm256_loadu_si256((const __m256i *)(p + i + 32));
        __m256i c = _mm256_loadu_si256((const __m256i *)(p + i + 64));
        __m256i d = _mm256_loadu_si256((const __m256i *)(p + i + 96));
        __m256i o = _mm256_or_si256(_mm256_or_si256(a, b), _mm256_or_si256(c, d));
        if (!_mm256_testz_si256(o, mask))
            return 1;
    }
    for (; i + 32 <= nbytes; i += 32)
        if (!_mm256_testz_si256(_mm256_loadu_si256((const __m256i *)(p + i)), mask))
            return 1;
    if (i < nbytes) {
        uint8_t tail[32] = {0};
        memcpy(tail, p + i, nbytes - i);
        if (!_mm256_testz_si256(_mm256_loadu_si256((const __m256i *)tail), mask))
            return 1;
    }
    return 0;
}

INA_AVX2 static int f32_over(const float *x, size_t n, float t)
{
    const __m256 sign = _mm256_set1_ps(-0.0f), tv = _mm256_set1_ps(t);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 a = _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i));
        if (_mm256_movemask_ps(_mm256_cmp_ps(a, tv, _CMP_NLE_UQ)))
            return 1;
    }
    if (i < n) {
        float tail[8] = {0};
        memcpy(tail, x + i, (n - i) * sizeof(float));
        __m256 a = _mm256_andnot_ps(sign, _mm256_loadu_ps(tail));
        if (_mm256_movemask_ps(_mm256_cmp_ps(a, tv, _CMP_NLE_UQ)))
            return 1;
    }
    return 0;
}

INA_AVX2 int ina__block_nonzero_avx2(ina_dtype dt, const void *x, size_t n, double threshold)
{
    switch (dt) {
    case INA_INT32: return any_bits(x, n * 4, ~0ull);
    case INA_FLOAT32:
        if (threshold > 0)
            return f32_over(x, n, (float)threshold); /* see the scalar code for the rounding */
        return any_bits(x, n * 4, 0x7FFFFFFF7FFFFFFFull);
    case INA_FLOAT16:
    case INA_BFLOAT16:
        if (threshold > 0)
            break;
        return any_bits(x, n * 2, 0x7FFF7FFF7FFF7FFFull);
    case INA_FLOAT64:
        if (threshold > 0)
            break;
        return any_bits(x, n * 8, 0x7FFFFFFFFFFFFFFFull);
    }
    return ina__block_nonzero_scalar(dt, x, n, threshold);
}

#else

int ina__block_nonzero_avx2(ina_dtype dt, const void *x, size_t n, double threshold)
{
    return ina__block_nonzero_scalar(dt, x, n, threshold);
}

#endif
