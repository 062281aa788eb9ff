/* h16_avx2.c: AVX2 + F16C kernels of the 16-bit wire (h16.h), lane by lane the operations of h16_scalar.c. */
#include "common/h16_simd.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <cpuid.h>
#include <immintrin.h>
#include <string.h>

/*
 * Each step is the scalar reference's, on 8 lanes (so the bits agree):
 *   binary16 -> binary32   VCVTPH2PS: exact, quiets a NaN (ina__f16_to_f32_bits)
 *   bfloat16 -> binary32   a shift
 *   * 2^e, + lanes         VMULPS, VADDPS: IEEE binary32, as the C operators
 *   binary32 -> binary16   VCVTPS2PH with the RNE immediate (ina__f32_bits_to_f16)
 *   binary32 -> bfloat16   the integer RNE add of ina__f32_bits_to_bf16
 *   NaN (switch, decode)   replaced by the canonical NaN by compare and blend
 * A block is done 16 elements (8 words, 32 bytes of payload) at a time; the
 * rest goes to the scalar reference, which is the same function.
 */

#define H16_SIMD __attribute__((target("avx2,f16c")))

/* Swap the two bytes of every 16-bit lane (big-endian <-> little-endian). */
#define BSWAP16_MASK                                                                             \
    _mm256_setr_epi8(1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14, 1, 0, 3, 2, 5, 4, 7, 6, \
                     9, 8, 11, 10, 13, 12, 15, 14)

H16_SIMD static inline __m256i load16x16(const uint8_t *p)
{
    return _mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)(const void *)p), BSWAP16_MASK);
}

H16_SIMD static inline void store16x16(uint8_t *p, __m256i w)
{
    _mm256_storeu_si256((__m256i *)(void *)p, _mm256_shuffle_epi8(w, BSWAP16_MASK));
}

/* Eight 16-bit elements to binary32 (exact). */
H16_SIMD static inline __m256 widen8(__m128i w, enum ina_h16_fmt f)
{
    if (f == INA_H16_F16)
        return _mm256_cvtph_ps(w);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(w), 16));
}

/* Eight binary32 to bfloat16, RNE (NaN as ina__f32_bits_to_bf16: quieted, top bits). */
H16_SIMD static inline __m128i narrow8_bf16(__m256 x)
{
    const __m256i b = _mm256_castps_si256(x);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x7FFF)), lsb), 16);
    __m256i a = _mm256_and_si256(b, _mm256_set1_epi32(0x7FFFFFFF));
    __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7F800000));
    r = _mm256_blendv_epi8(r, _mm256_or_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(0x40)), nan);
    /* Every lane is <= 0xFFFF: unsigned saturation is a truncation; packus
     * works per 128-bit half, so gather quadwords 0 and 2. */
    __m256i pk = _mm256_packus_epi32(r, r);
    return _mm256_castsi256_si128(_mm256_permute4x64_epi64(pk, _MM_SHUFFLE(3, 1, 2, 0)));
}

H16_SIMD static inline __m128i narrow8(__m256 x, enum ina_h16_fmt f)
{
    return f == INA_H16_F16 ? _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT) : narrow8_bf16(x);
}

/* Sixteen 16-bit lanes with every NaN of the format replaced by its canonical NaN. */
H16_SIMD static inline __m256i canon16x16(__m256i w, enum ina_h16_fmt f)
{
    const int f16 = f == INA_H16_F16;
    __m256i a = _mm256_and_si256(w, _mm256_set1_epi16(0x7FFF));
    __m256i nan = _mm256_cmpgt_epi16(a, _mm256_set1_epi16(f16 ? 0x7C00 : 0x7F80));
    return _mm256_blendv_epi8(w, _mm256_set1_epi16((short)(f16 ? INA_H16_F16_QNAN : INA_H16_BF16_QNAN)),
                              nan);
}

H16_SIMD static inline __m256 pow2x8(int e) { return _mm256_castsi256_ps(_mm256_set1_epi32((e + 127) << 23)); }

/* ---- Switch -------------------------------------------------------------------------- */

/* Lanes i .. i+15 of a payload: the scaled binary32 values (exact widening, one multiply). */
#define SCALED_PAIR(p, i, f, e, scale, lo, hi)                                   \
    __m256i w_ = load16x16((p) + 2 * (i));                                       \
    __m256 lo = widen8(_mm256_castsi256_si128(w_), f);                           \
    __m256 hi = widen8(_mm256_extracti128_si256(w_, 1), f);                      \
    if ((e) != 0) {                                                              \
        lo = _mm256_mul_ps(lo, scale);                                           \
        hi = _mm256_mul_ps(hi, scale);                                           \
    }

/* Lanes of a contribution: stored (add = 0: a new round) or added (add = 1). */
H16_SIMD static inline void lanes_avx2(int32_t *v, const uint8_t *p, size_t words, int16_t exp,
                                       enum ina_h16_fmt f, int add)
{
    const int e = ina__h16_clamp_exp(exp);
    const __m256 scale = pow2x8(e);
    size_t w = 0;
    for (; w + 8 <= words; w += 8) {
        float *a = (float *)(void *)(v + 2 * w);
        SCALED_PAIR(p, 2 * w, f, e, scale, lo, hi)
        if (add) {
            lo = _mm256_add_ps(_mm256_loadu_ps(a), lo);
            hi = _mm256_add_ps(_mm256_loadu_ps(a + 8), hi);
        }
        _mm256_storeu_ps(a, lo);
        _mm256_storeu_ps(a + 8, hi);
    }
    (add ? ina__h16_add_scalar : ina__h16_load_scalar)(v + 2 * w, p + 4 * w, words - w, exp, f);
}

H16_SIMD static void load_avx2(int32_t *v, const uint8_t *p, size_t words, int16_t exp,
                               enum ina_h16_fmt f)
{
    lanes_avx2(v, p, words, exp, f, 0);
}

H16_SIMD static void add_avx2(int32_t *v, const uint8_t *p, size_t words, int16_t exp,
                              enum ina_h16_fmt f)
{
    lanes_avx2(v, p, words, exp, f, 1);
}

/* The largest of the finite magnitudes among 8 binary32 patterns, lane-wise into m. */
H16_SIMD static inline __m256i max_finite(__m256i m, __m256i b)
{
    __m256i a = _mm256_and_si256(b, _mm256_set1_epi32(0x7FFFFFFF));
    __m256i finite = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x7F800000), a);
    return _mm256_max_epi32(m, _mm256_and_si256(a, finite)); /* all non-negative */
}

H16_SIMD static inline uint32_t hmax8(__m256i m)
{
    __m128i x = _mm_max_epi32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
    x = _mm_max_epi32(x, _mm_shuffle_epi32(x, _MM_SHUFFLE(1, 0, 3, 2)));
    x = _mm_max_epi32(x, _mm_shuffle_epi32(x, _MM_SHUFFLE(2, 3, 0, 1)));
    return (uint32_t)_mm_cvtsi128_si32(x);
}

H16_SIMD static int16_t result_exp_avx2(const int32_t *v, size_t words, int16_t sexp,
                                        enum ina_h16_fmt f)
{
    if (f != INA_H16_F16)
        return (int16_t)ina__h16_clamp_exp(sexp);
    __m256i m = _mm256_setzero_si256();
    size_t i = 0, lanes = 2 * words;
    for (; i + 8 <= lanes; i += 8)
        m = max_finite(m, _mm256_loadu_si256((const __m256i *)(const void *)(v + i)));
    uint32_t mx = hmax8(m);
    /* The tail's exponent, from the reference, folded in: max is monotone in
     * both the scan and the fit, so scanning the tail on its own commutes. */
    int s = ina__h16_result_exp_scalar(v + i, (lanes - i) / 2, sexp, f);
    if (mx != 0) {
        int fit = ina__h16_fit_f16(mx);
        s = fit > s ? fit : s;
    }
    return (int16_t)s;
}

H16_SIMD static void store_avx2(uint8_t *p, const int32_t *v, size_t words, int16_t s,
                                enum ina_h16_fmt f)
{
    const int e = ina__h16_clamp_exp(s);
    const __m256 scale = pow2x8(-e);
    size_t w = 0;
    for (; w + 8 <= words; w += 8) {
        const float *a = (const float *)(const void *)(v + 2 * w);
        __m256 lo = _mm256_loadu_ps(a), hi = _mm256_loadu_ps(a + 8);
        if (e != 0) {
            lo = _mm256_mul_ps(lo, scale);
            hi = _mm256_mul_ps(hi, scale);
        }
        __m256i out = _mm256_inserti128_si256(_mm256_castsi128_si256(narrow8(lo, f)), narrow8(hi, f), 1);
        store16x16(p + 4 * w, canon16x16(out, f));
    }
    ina__h16_store_scalar(p + 4 * w, v + 2 * w, words - w, s, f);
}

/* ---- Worker -------------------------------------------------------------------------- */

H16_SIMD static void put_avx2(const uint16_t *x, size_t n, uint8_t *out)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        store16x16(out + 2 * i, _mm256_loadu_si256((const __m256i *)(const void *)(x + i)));
    ina__h16_put_scalar(x + i, n - i, out + 2 * i);
}

H16_SIMD static void get_avx2(const uint8_t *in, size_t n, enum ina_h16_fmt f, uint16_t *out)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(void *)(out + i), canon16x16(load16x16(in + 2 * i), f));
    ina__h16_get_scalar(in + 2 * i, n - i, f, out + i);
}

H16_SIMD static int16_t f32_scale_avx2(const float *x, size_t n)
{
    __m256i m = _mm256_setzero_si256();
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        m = max_finite(m, _mm256_loadu_si256((const __m256i *)(const void *)(x + i)));
    uint32_t mx = hmax8(m);
    for (; i < n; i++) {
        uint32_t a;
        memcpy(&a, &x[i], 4);
        a &= 0x7FFFFFFFu;
        if (a < 0x7F800000u && a > mx)
            mx = a;
    }
    return ina__h16_scale_of_max(mx);
}

H16_SIMD static void encode_f32_avx2(const float *x, size_t n, int16_t e, enum ina_h16_fmt f,
                                     uint8_t *out)
{
    const int c = ina__h16_clamp_exp(e);
    const __m256 scale = pow2x8(-c);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 lo = _mm256_loadu_ps(x + i), hi = _mm256_loadu_ps(x + i + 8);
        if (c != 0) {
            lo = _mm256_mul_ps(lo, scale);
            hi = _mm256_mul_ps(hi, scale);
        }
        store16x16(out + 2 * i,
                   _mm256_inserti128_si256(_mm256_castsi128_si256(narrow8(lo, f)), narrow8(hi, f), 1));
    }
    ina__h16_encode_f32_scalar(x + i, n - i, e, f, out + 2 * i);
}

/* Eight elements, widened, with a NaN as the positive quiet NaN. */
H16_SIMD static inline __m256 widen8_canon(__m128i w, enum ina_h16_fmt f)
{
    __m256 x = widen8(w, f);
    return _mm256_blendv_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FC00000)),
                            _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

H16_SIMD static void to_f32_avx2(const uint8_t *in, size_t n, int16_t s, enum ina_h16_fmt f,
                                 float *out)
{
    if (s < -126 || s > 127) /* 2^s is no normal binary32: the reference's double path */
        return ina__h16_to_f32_scalar(in, n, s, f, out);
    const __m256 scale = pow2x8(s);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i w = load16x16(in + 2 * i);
        __m256 lo = widen8_canon(_mm256_castsi256_si128(w), f);
        __m256 hi = widen8_canon(_mm256_extracti128_si256(w, 1), f);
        if (s != 0) { /* one rounding, as the reference's (float)(x * 2^s in double) */
            lo = _mm256_mul_ps(lo, scale);
            hi = _mm256_mul_ps(hi, scale);
        }
        _mm256_storeu_ps(out + i, lo);
        _mm256_storeu_ps(out + i + 8, hi);
    }
    ina__h16_to_f32_scalar(in + 2 * i, n - i, s, f, out + i);
}

/* Four binary32 lanes to doubles: (x / div) * 2^s, as the reference. */
H16_SIMD static inline void to_f64x4(__m128 x, __m256d div, int divide, __m256d scale, int s,
                                     double *out)
{
    __m256d d = _mm256_cvtps_pd(x);
    if (divide)
        d = _mm256_div_pd(d, div);
    if (s != 0)
        d = _mm256_mul_pd(d, scale);
    _mm256_storeu_pd(out, d);
}

H16_SIMD static void to_f64_avx2(const uint8_t *in, size_t n, int16_t s, int div,
                                 enum ina_h16_fmt f, double *out)
{
    /* (x / div) lies in [2^-141, 2^128] or is 0: times 2^s for |s| <= 800 it
     * stays a normal double, so the multiply is exact, as ldexp is. */
    if (s < -800 || s > 800)
        return ina__h16_to_f64_scalar(in, n, s, div, f, out);
    const __m256d dv = _mm256_set1_pd((double)div);
    const __m256d scale = _mm256_castsi256_pd(_mm256_set1_epi64x((long long)(s + 1023) << 52));
    const int divide = div > 1;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i w = load16x16(in + 2 * i);
        __m256 lo = widen8_canon(_mm256_castsi256_si128(w), f);
        __m256 hi = widen8_canon(_mm256_extracti128_si256(w, 1), f);
        to_f64x4(_mm256_castps256_ps128(lo), dv, divide, scale, s, out + i);
        to_f64x4(_mm256_extractf128_ps(lo, 1), dv, divide, scale, s, out + i + 4);
        to_f64x4(_mm256_castps256_ps128(hi), dv, divide, scale, s, out + i + 8);
        to_f64x4(_mm256_extractf128_ps(hi, 1), dv, divide, scale, s, out + i + 12);
    }
    ina__h16_to_f64_scalar(in + 2 * i, n - i, s, div, f, out + i);
}

static const struct ina_h16_kernels simd_kernels = {
    load_avx2, add_avx2, result_exp_avx2, store_avx2, put_avx2, get_avx2,
    f32_scale_avx2, encode_f32_avx2, to_f32_avx2, to_f64_avx2,
};

const struct ina_h16_kernels *ina__h16_simd(void)
{
    unsigned a, b, c, d;
    __builtin_cpu_init();
    /* clang's __builtin_cpu_supports has no "f16c": CPUID leaf 1, ECX bit 29.
     * The AVX2 check covers the OS's saving of the ymm state. */
    if (!__builtin_cpu_supports("avx2") || !__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_F16C))
        return NULL;
    return &simd_kernels;
}

#else /* no vector code on this target */

const struct ina_h16_kernels *ina__h16_simd(void) { return NULL; }

#endif
