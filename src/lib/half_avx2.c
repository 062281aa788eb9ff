/* half_avx2.c: AVX2 + F16C kernels for half.c's conversions, compiled per function with target("avx2,f16c"). */
#include "lib/half.h"
#include "lib/quant_simd.h"

#if INA_QUANT_HAVE_AVX2

#include <cpuid.h>
#include <immintrin.h>
#include <string.h>

/*
 * Exactness: lane by lane, the same operations as the scalar reference in
 * half.c, so every input (NaN payloads included) gives the same bits:
 *
 *  f16 -> f32   VCVTPH2PS: exact; quiets a NaN as ina__f16_to_f32_bits does.
 *  f32 -> f16   VCVTPS2PH with imm RNE (not MXCSR): RNE, IEEE overflow, quiet
 *               NaN with the top payload bits, as ina__f32_bits_to_f16.
 *  bf16 <-> f32 integer shifts and the same RNE add as ina__f32_bits_to_bf16.
 *  f64 -> f32 odd  cvtpd2ps and cvtps2pd are the scalar casts; the two
 *               ordered compares are the scalar `fabs(back) > fabs(d)` and
 *               `back < d || back > d`.
 *
 * Tails (n not a multiple of 8) go through the same vector code via a
 * zero-padded stack copy, so there is no second scalar path here.
 */

#define INA_HALF_SIMD __attribute__((target("avx2,f16c")))

int ina__half_simd_supported(void)
{
    unsigned a, b, c, d;
    /* clang's __builtin_cpu_supports has no "f16c": ask CPUID (leaf 1, ECX
     * bit 29). The AVX2 check covers the OS's saving of the ymm state. */
    if (!ina__quant_avx2_supported() || !__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    return (c & bit_F16C) != 0;
}

/* ---- Widening ------------------------------------------------------------------- */

INA_HALF_SIMD static inline __m256 f16x8(const uint16_t *in)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)in));
}

INA_HALF_SIMD static inline __m256 bf16x8(const uint16_t *in)
{
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)in));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

/* Converts n 16-bit values with the 8-lane kernel WIDEN. */
#define WIDEN_LOOP(WIDEN)                                        \
    size_t i = 0;                                                \
    for (; i + 8 <= n; i += 8)                                   \
        _mm256_storeu_ps(out + i, WIDEN(in + i));                \
    if (i < n) {                                                 \
        uint16_t t[8] = {0};                                     \
        float o[8];                                              \
        memcpy(t, in + i, 2 * (n - i));                          \
        _mm256_storeu_ps(o, WIDEN(t));                           \
        memcpy(out + i, o, 4 * (n - i));                         \
    }

INA_HALF_SIMD void ina__f16_to_f32_simd(const uint16_t *in, size_t n, float *out)
{
    WIDEN_LOOP(f16x8)
}

INA_HALF_SIMD void ina__bf16_to_f32_simd(const uint16_t *in, size_t n, float *out)
{
    WIDEN_LOOP(bf16x8)
}

/* ---- Narrowing float -> 16 bits --------------------------------------------------- */

INA_HALF_SIMD static inline __m128i f32x8_to_f16(__m256 f)
{
    return _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT);
}

INA_HALF_SIMD static inline __m128i f32x8_to_bf16(__m256 f)
{
    const __m256i b = _mm256_castps_si256(f);
    const __m256i one = _mm256_set1_epi32(1);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), one);
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x7FFF)), lsb), 16);
    /* NaN: |b| > Inf's pattern (both non-negative as int32, so a signed compare works). */
    __m256i a = _mm256_and_si256(b, _mm256_set1_epi32(0x7FFFFFFF));
    __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7F800000));
    __m256i qn = _mm256_or_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(0x40));
    r = _mm256_blendv_epi8(r, qn, nan);
    /* 8 x 32 -> 8 x 16: every value is <= 0xFFFF, so unsigned saturation is a
     * plain truncation; packus works per 128-bit lane, so gather qwords 0, 2. */
    __m256i p = _mm256_packus_epi32(r, r);
    return _mm256_castsi256_si128(_mm256_permute4x64_epi64(p, _MM_SHUFFLE(3, 1, 2, 0)));
}

/* Converts n floats at in with the 8-lane kernel NARROW. */
#define NARROW_LOOP(LOAD, NARROW, TIN)                                          \
    size_t i = 0;                                                               \
    for (; i + 8 <= n; i += 8)                                                  \
        _mm_storeu_si128((__m128i *)(void *)(out + i), NARROW(LOAD(in + i)));   \
    if (i < n) {                                                                \
        TIN t[8] = {0};                                                         \
        uint16_t o[8];                                                          \
        memcpy(t, in + i, sizeof(TIN) * (n - i));                               \
        _mm_storeu_si128((__m128i *)(void *)o, NARROW(LOAD(t)));                \
        memcpy(out + i, o, 2 * (n - i));                                        \
    }

INA_HALF_SIMD static inline __m256 load_f32x8(const float *in) { return _mm256_loadu_ps(in); }

INA_HALF_SIMD void ina__f32_to_f16_simd(const float *in, size_t n, uint16_t *out)
{
    NARROW_LOOP(load_f32x8, f32x8_to_f16, float)
}

INA_HALF_SIMD void ina__f32_to_bf16_simd(const float *in, size_t n, uint16_t *out)
{
    NARROW_LOOP(load_f32x8, f32x8_to_bf16, float)
}

/* ---- Narrowing double -> 16 bits, through float with round-to-odd ----------------- */

/* 4 doubles -> 4 floats rounded to odd (ina__f64_to_f32_odd_bits, lane by lane). */
INA_HALF_SIMD static inline __m128 f64x4_to_f32_odd(__m256d d)
{
    const __m256d absmask = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7FFFFFFFFFFFFFFFll));
    const __m256i lowdw = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    __m128 f = _mm256_cvtpd_ps(d);
    __m256d back = _mm256_cvtps_pd(f);
    __m256d away = _mm256_cmp_pd(_mm256_and_pd(back, absmask), _mm256_and_pd(d, absmask),
                                 _CMP_GT_OQ);
    __m256d inexact = _mm256_cmp_pd(back, d, _CMP_NEQ_OQ);
    /* The 64-bit masks as 32-bit lanes: their low dwords. */
    __m128i aw = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(_mm256_castpd_si256(away), lowdw));
    __m128i ix = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(_mm256_castpd_si256(inexact), lowdw));
    __m128i b = _mm_add_epi32(_mm_castps_si128(f), aw); /* aw is -1 where rounded away */
    b = _mm_or_si128(b, _mm_srli_epi32(ix, 31));
    return _mm_castsi128_ps(b);
}

INA_HALF_SIMD static inline __m256 load_f64x8_odd(const double *in)
{
    __m128 lo = f64x4_to_f32_odd(_mm256_loadu_pd(in));
    __m128 hi = f64x4_to_f32_odd(_mm256_loadu_pd(in + 4));
    return _mm256_insertf128_ps(_mm256_castps128_ps256(lo), hi, 1);
}

INA_HALF_SIMD void ina__f64_to_f16_simd(const double *in, size_t n, uint16_t *out)
{
    NARROW_LOOP(load_f64x8_odd, f32x8_to_f16, double)
}

INA_HALF_SIMD void ina__f64_to_bf16_simd(const double *in, size_t n, uint16_t *out)
{
    NARROW_LOOP(load_f64x8_odd, f32x8_to_bf16, double)
}

#else
typedef int ina__half_avx2_unused; /* no vector code on this target */
#endif
