/* quant_avx2.c: AVX2 kernels for quant.c, compiled per function with target("avx2"). */
#include "lib/quant_simd.h"

#if INA_QUANT_HAVE_AVX2

#include <immintrin.h>
#include <string.h>

/*
 * Exactness: every kernel performs, lane by lane, the same IEEE operations
 * as the scalar loop in quant.c, in the same order and precision, so the
 * results are bit-identical for every input, NaN payloads included:
 *
 *  encode  cvtps2pd (exact, like the scalar (double) cast; quiets an sNaN
 *          the same way), mulpd by the same double scale, the clamp as
 *          max(-qmax, v) then min(qmax, v): MAXPD/MINPD return their second
 *          operand when the comparison is false or unordered, i.e. exactly
 *          `v < -qmax ? -qmax : v` and `v > qmax ? qmax : v` (v stays NaN,
 *          and +-0 stays v), then addpd 0x1.8p52 and the low 32 bits of each
 *          double, byte-swapped.
 *  decode  byte swap, cvtdq2pd (exact), mulpd by the same scale, cvtpd2ps
 *          (one rounding, nearest-even under the default MXCSR), like the
 *          scalar (float)((double)s * scale).
 *
 * No FMA is enabled here, so no multiply-add can be contracted. Tails (n not
 * a multiple of the vector width) go through the same vector code via a
 * zero-padded stack copy, so there is no second scalar implementation.
 */

#define INA_AVX2 __attribute__((target("avx2")))

/* vpshufb control reversing the bytes of each 32-bit element. */
#define BSWAP32_CTL                                                                          \
    _mm256_setr_epi8(3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8, 15, 14, 13, 12, 3, 2, 1, 0, 7, 6, \
                     5, 4, 11, 10, 9, 8, 15, 14, 13, 12)

/* ---- Encode ------------------------------------------------------------------ */

struct enc_consts {
    __m256d scale, lo, hi, magic;
    __m256i bswap;
};

/* 8 values at x (floats, widened exactly; or doubles if f64) -> 8 big-endian
 * int32 in the returned register. */
INA_AVX2 static inline __m256i enc8(const void *x, int f64, const struct enc_consts *k)
{
    __m256d a, b;
    if (f64) {
        a = _mm256_loadu_pd((const double *)x);
        b = _mm256_loadu_pd((const double *)x + 4);
    } else {
        a = _mm256_cvtps_pd(_mm_loadu_ps((const float *)x));
        b = _mm256_cvtps_pd(_mm_loadu_ps((const float *)x + 4));
    }
    a = _mm256_mul_pd(a, k->scale);
    b = _mm256_mul_pd(b, k->scale);
    a = _mm256_max_pd(k->lo, a); /* a < -qmax ? -qmax : a */
    b = _mm256_max_pd(k->lo, b);
    a = _mm256_min_pd(k->hi, a); /* a > qmax ? qmax : a */
    b = _mm256_min_pd(k->hi, b);
    a = _mm256_add_pd(a, k->magic);
    b = _mm256_add_pd(b, k->magic);
    /* Low dwords: per 128-bit lane [a0 a1 b0 b1 | a2 a3 b2 b3], then reorder the qwords. */
    __m256 lo = _mm256_shuffle_ps(_mm256_castpd_ps(a), _mm256_castpd_ps(b), _MM_SHUFFLE(2, 0, 2, 0));
    __m256i r = _mm256_permute4x64_epi64(_mm256_castps_si256(lo), _MM_SHUFFLE(3, 1, 2, 0));
    return _mm256_shuffle_epi8(r, k->bswap);
}

/* Both encoders; always inlined, so each gets its own loop with f64 constant. */
INA_AVX2 static inline __attribute__((always_inline)) void
encode_loop(const void *xv, int f64, size_t n, double scale, double qmax, uint8_t *out)
{
    const uint8_t *x = xv;
    const size_t es = f64 ? 8 : 4; /* bytes per input element */
    struct enc_consts k;
    k.scale = _mm256_set1_pd(scale);
    k.lo = _mm256_set1_pd(-qmax);
    k.hi = _mm256_set1_pd(qmax);
    k.magic = _mm256_set1_pd(6755399441055744.0); /* 0x1.8p52, see quant.c */
    k.bswap = BSWAP32_CTL;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i r0 = enc8(x + es * i, f64, &k);
        __m256i r1 = enc8(x + es * (i + 8), f64, &k);
        _mm256_storeu_si256((__m256i *)(out + 4 * i), r0);
        _mm256_storeu_si256((__m256i *)(out + 4 * i + 32), r1);
    }
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_si256((__m256i *)(out + 4 * i), enc8(x + es * i, f64, &k));
    if (i < n) {
        double tx[8] = {0}; /* zero bytes: 0.0 as float or double */
        uint8_t to[32];
        memcpy(tx, x + es * i, es * (n - i));
        _mm256_storeu_si256((__m256i *)to, enc8(tx, f64, &k));
        memcpy(out + 4 * i, to, 4 * (n - i));
    }
}

INA_AVX2 void ina__avx2_quant_encode(const float *x, size_t n, double scale, double qmax,
                                      uint8_t *out)
{
    encode_loop(x, 0, n, scale, qmax, out);
}

INA_AVX2 void ina__avx2_quant_encode_f64(const double *x, size_t n, double scale, double qmax,
                                          uint8_t *out)
{
    encode_loop(x, 1, n, scale, qmax, out);
}

/* ---- Decode ------------------------------------------------------------------ */

/* 4 big-endian int32 at in -> 4 floats at out (rounded), or 4 doubles if f64. avg: each
 * divided by div before the scaling, as the scalar (double)s / div * scale. */
INA_AVX2 static inline __attribute__((always_inline)) void
dec4(const uint8_t *in, void *out, int f64, __m256d scale, __m128i bswap, int avg, __m256d div)
{
    __m128i v = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)in), bswap);
    __m256d q = _mm256_cvtepi32_pd(v);
    if (avg)
        q = _mm256_div_pd(q, div);
    __m256d d = _mm256_mul_pd(q, scale);
    if (f64)
        _mm256_storeu_pd((double *)out, d);
    else
        _mm_storeu_ps((float *)out, _mm256_cvtpd_ps(d));
}

/* The decoders; always inlined, so each gets its own loop with f64 and avg constant. */
INA_AVX2 static inline __attribute__((always_inline)) void
decode_loop(const uint8_t *in, size_t n, double scale, void *outv, int f64, int avg, double div)
{
    uint8_t *out = outv;
    const size_t es = f64 ? 8 : 4; /* bytes per output element */
    const __m256d vs = _mm256_set1_pd(scale), vd = _mm256_set1_pd(div);
    const __m128i bswap = _mm_setr_epi8(3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8, 15, 14, 13, 12);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        dec4(in + 4 * i, out + es * i, f64, vs, bswap, avg, vd);
        dec4(in + 4 * i + 16, out + es * (i + 4), f64, vs, bswap, avg, vd);
        dec4(in + 4 * i + 32, out + es * (i + 8), f64, vs, bswap, avg, vd);
        dec4(in + 4 * i + 48, out + es * (i + 12), f64, vs, bswap, avg, vd);
    }
    for (; i + 4 <= n; i += 4)
        dec4(in + 4 * i, out + es * i, f64, vs, bswap, avg, vd);
    if (i < n) {
        uint8_t ti[16] = {0};
        double to[4];
        memcpy(ti, in + 4 * i, 4 * (n - i));
        dec4(ti, to, f64, vs, bswap, avg, vd);
        memcpy(out + es * i, to, es * (n - i));
    }
}

INA_AVX2 void ina__avx2_quant_decode(const uint8_t *in, size_t n, double scale, float *out)
{
    decode_loop(in, n, scale, out, 0, 0, 1.0);
}

INA_AVX2 void ina__avx2_quant_decode_f64(const uint8_t *in, size_t n, double scale, double *out)
{
    decode_loop(in, n, scale, out, 1, 0, 1.0);
}

INA_AVX2 void ina__avx2_quant_decode_avg(const uint8_t *in, size_t n, double div, double scale,
                                         float *out)
{
    decode_loop(in, n, scale, out, 0, 1, div);
}

/* ---- Block exponent: max of |x|'s bit patterns ---------------------------------- */

INA_AVX2 uint32_t ina__avx2_absmax_bits(const float *x, size_t n)
{
    const __m256i mask = _mm256_set1_epi32(0x7FFFFFFF);
    __m256i m0 = _mm256_setzero_si256(), m1 = m0, m2 = m0, m3 = m0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(x + i));
        __m256i b = _mm256_loadu_si256((const __m256i *)(x + i + 8));
        __m256i c = _mm256_loadu_si256((const __m256i *)(x + i + 16));
        __m256i d = _mm256_loadu_si256((const __m256i *)(x + i + 24));
        m0 = _mm256_max_epu32(m0, _mm256_and_si256(a, mask));
        m1 = _mm256_max_epu32(m1, _mm256_and_si256(b, mask));
        m2 = _mm256_max_epu32(m2, _mm256_and_si256(c, mask));
        m3 = _mm256_max_epu32(m3, _mm256_and_si256(d, mask));
    }
    for (; i + 8 <= n; i += 8) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(x + i));
        m0 = _mm256_max_epu32(m0, _mm256_and_si256(a, mask));
    }
    if (i < n) {
        uint32_t t[8] = {0}; /* zero padding never raises the max */
        memcpy(t, x + i, 4 * (n - i));
        __m256i a = _mm256_loadu_si256((const __m256i *)t);
        m0 = _mm256_max_epu32(m0, _mm256_and_si256(a, mask));
    }
    m0 = _mm256_max_epu32(_mm256_max_epu32(m0, m1), _mm256_max_epu32(m2, m3));
    __m128i m = _mm_max_epu32(_mm256_castsi256_si128(m0), _mm256_extracti128_si256(m0, 1));
    m = _mm_max_epu32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(1, 0, 3, 2)));
    m = _mm_max_epu32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(2, 3, 0, 1)));
    return (uint32_t)_mm_cvtsi128_si32(m);
}

/* ---- Byte swap of 32-bit elements (int32 passthrough) ------------------------------ */

INA_AVX2 void ina__avx2_bswap32(const void *in, size_t n, void *out)
{
    const uint8_t *s = in;
    uint8_t *d = out;
    const __m256i ctl = BSWAP32_CTL;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(s + 4 * i));
        __m256i b = _mm256_loadu_si256((const __m256i *)(s + 4 * i + 32));
        __m256i c = _mm256_loadu_si256((const __m256i *)(s + 4 * i + 64));
        __m256i e = _mm256_loadu_si256((const __m256i *)(s + 4 * i + 96));
        _mm256_storeu_si256((__m256i *)(d + 4 * i), _mm256_shuffle_epi8(a, ctl));
        _mm256_storeu_si256((__m256i *)(d + 4 * i + 32), _mm256_shuffle_epi8(b, ctl));
        _mm256_storeu_si256((__m256i *)(d + 4 * i + 64), _mm256_shuffle_epi8(c, ctl));
        _mm256_storeu_si256((__m256i *)(d + 4 * i + 96), _mm256_shuffle_epi8(e, ctl));
    }
    for (; i + 8 <= n; i += 8) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(s + 4 * i));
        _mm256_storeu_si256((__m256i *)(d + 4 * i), _mm256_shuffle_epi8(a, ctl));
    }
    for (; i < n; i++) {
        uint32_t v;
        memcpy(&v, s + 4 * i, 4);
        v = __builtin_bswap32(v);
        memcpy(d + 4 * i, &v, 4);
    }
}

#else
typedef int ina__quant_avx2_unused; /* no AVX2 code on this target */
#endif
