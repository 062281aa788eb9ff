/* be32.c: big-endian int32 array kernels; see be32.h. */
#include "common/be32.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define INA_BE32_X86 1
#endif

static void load_scalar(int32_t *v, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t x;
        memcpy(&x, p + 4 * i, 4);
        v[i] = (int32_t)__builtin_bswap32(x);
    }
}

static void add_scalar(int32_t *v, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t x;
        memcpy(&x, p + 4 * i, 4);
        v[i] = (int32_t)((uint32_t)v[i] + __builtin_bswap32(x)); /* wraps, defined */
    }
}

static void minmax_scalar(int32_t *v, const uint8_t *p, size_t n, int want_max)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t x;
        memcpy(&x, p + 4 * i, 4);
        int32_t y = (int32_t)__builtin_bswap32(x);
        int take = want_max ? y > v[i] : y < v[i];
        v[i] = take ? y : v[i];
    }
}

static void fadd_scalar(int32_t *v, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t x = 0;
        float a, b;
        memcpy(&x, p + 4 * i, 4);
        x = __builtin_bswap32(x);
        memcpy(&a, &v[i], 4);
        memcpy(&b, &x, 4);
        a += b;
        memcpy(&v[i], &a, 4);
    }
}

void ina__be32_fixadd(int32_t *v, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t x;
        memcpy(&x, p + 4 * i, 4);
        int32_t b = (int32_t)__builtin_bswap32(x);
        int64_t s = (int64_t)v[i] + b;
        int invalid = v[i] == INT32_MIN || b == INT32_MIN || s > INT32_MAX || s < -INT32_MAX;
        v[i] = invalid ? INT32_MIN : (int32_t)s;
    }
}

static void store_scalar(uint8_t *p, const int32_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t x = __builtin_bswap32((uint32_t)v[i]);
        memcpy(p + 4 * i, &x, 4);
    }
}

#ifdef INA_BE32_X86
/* Reverse the bytes of each 32-bit lane. */
#define INA_BSWAP32_MASK                                                                      \
    _mm256_setr_epi8(3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8, 15, 14, 13, 12, 3, 2, 1, 0, 7, 6, \
                     5, 4, 11, 10, 9, 8, 15, 14, 13, 12)

__attribute__((target("avx2"))) static void load_avx2(int32_t *v, const uint8_t *p, size_t n)
{
    const __m256i m = INA_BSWAP32_MASK;
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_si256((__m256i *)(void *)(v + i),
                            _mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)(const void *)(p + 4 * i)), m));
    load_scalar(v + i, p + 4 * i, n - i);
}

/* v[i] = COMBINE(v[i], be32(p[i])) for the 8-lane COMBINE; then the statement
 * TAIL does the last n - i elements. */
#define COMBINE_AVX2(COMBINE, TAIL)                                                                 \
    const __m256i m = INA_BSWAP32_MASK;                                                             \
    size_t i = 0;                                                                                   \
    for (; i + 8 <= n; i += 8) {                                                                    \
        __m256i x = _mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)(const void *)(p + 4 * i)), m); \
        __m256i a = _mm256_loadu_si256((const __m256i *)(const void *)(v + i));                     \
        _mm256_storeu_si256((__m256i *)(void *)(v + i), COMBINE(a, x));                             \
    }                                                                                               \
    TAIL;

__attribute__((target("avx2"))) static void add_avx2(int32_t *v, const uint8_t *p, size_t n)
{
    COMBINE_AVX2(_mm256_add_epi32, add_scalar(v + i, p + 4 * i, n - i))
}

__attribute__((target("avx2"))) static void max_avx2(int32_t *v, const uint8_t *p, size_t n)
{
    COMBINE_AVX2(_mm256_max_epi32, minmax_scalar(v + i, p + 4 * i, n - i, 1))
}

__attribute__((target("avx2"))) static void min_avx2(int32_t *v, const uint8_t *p, size_t n)
{
    COMBINE_AVX2(_mm256_min_epi32, minmax_scalar(v + i, p + 4 * i, n - i, 0))
}

#define INA_FADD_PS(a, x) _mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(a), _mm256_castsi256_ps(x)))

__attribute__((target("avx2"))) static void fadd_avx2(int32_t *v, const uint8_t *p, size_t n)
{
    COMBINE_AVX2(INA_FADD_PS, fadd_scalar(v + i, p + 4 * i, n - i))
}

__attribute__((target("avx2"))) static void store_avx2(uint8_t *p, const int32_t *v, size_t n)
{
    const __m256i m = INA_BSWAP32_MASK;
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_si256((__m256i *)(void *)(p + 4 * i),
                            _mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)(const void *)(v + i)), m));
    store_scalar(p + 4 * i, v + i, n - i);
}
#endif

static int use_avx2 = -1; /* decided on first use; a benign race (same value) */

static int simd(void)
{
    if (use_avx2 < 0) {
#ifdef INA_BE32_X86
        use_avx2 = __builtin_cpu_supports("avx2") && !getenv("INA_NO_SIMD");
#else
        use_avx2 = 0;
#endif
    }
    return use_avx2;
}

void ina__be32_load(int32_t *v, const uint8_t *p, size_t n)
{
#ifdef INA_BE32_X86
    if (simd())
        return load_avx2(v, p, n);
#endif
    load_scalar(v, p, n);
}

void ina__be32_add(int32_t *v, const uint8_t *p, size_t n)
{
#ifdef INA_BE32_X86
    if (simd())
        return add_avx2(v, p, n);
#endif
    add_scalar(v, p, n);
}

void ina__be32_minmax(int32_t *v, const uint8_t *p, size_t n, int want_max)
{
#ifdef INA_BE32_X86
    if (simd()) {
        if (want_max)
            max_avx2(v, p, n);
        else
            min_avx2(v, p, n);
        return;
    }
#endif
    minmax_scalar(v, p, n, want_max);
}

void ina__be32_fadd(int32_t *v, const uint8_t *p, size_t n)
{
#ifdef INA_BE32_X86
    if (simd())
        return fadd_avx2(v, p, n);
#endif
    fadd_scalar(v, p, n);
}

void ina__be32_store(uint8_t *p, const int32_t *v, size_t n)
{
#ifdef INA_BE32_X86
    if (simd())
        return store_avx2(p, v, n);
#endif
    store_scalar(p, v, n);
}
