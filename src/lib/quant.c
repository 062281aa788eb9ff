/* quant.c: block floating point: float32 <-> big-endian int32 with an agreed block exponent. */
#include "lib/quant.h"

#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "lib/quant_simd.h"

#include "common/half_bits.h"
#include "common/wire.h"
#include "ina.h"

/*
 * Numerics (see quant.h for the contract):
 *
 *  - Encode computes x * 2^s, s = 31 - L - e, in double. A float has 24
 *    significant bits and s lies in -105..179 for every valid e, so the
 *    product is exact (no overflow, no underflow in double). It is then
 *    clamped to +-(2^(31-L) - 1) and rounded to nearest-even. Clamping before
 *    rounding gives the same result as clamping after, because the bounds are
 *    integers and rounding is monotone.
 *  - Decode computes sum * 2^-s in double (exact: 31-bit integer times a
 *    power of two in range), then converts to float: one rounding.
 *
 * Per worker the quantization error is at most 1/2 unit (rounding) or below
 * 1 unit (clamping of a value within 1/2 unit of 2^(31-L)), unit =
 * 2^(e+L-31); hence the N * unit term of the bound.
 */

/* ---- Byte order helpers -------------------------------------------------- */

/*
 * host_to_be32(v): the uint32 whose memory representation is v in big-endian
 * byte order; be32_to_host is its inverse. A byte swap on little-endian hosts,
 * nothing on big-endian ones, byte shuffling through memory elsewhere.
 */
#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__) && \
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ && (defined(__GNUC__) || defined(__clang__))
static inline uint32_t host_to_be32(uint32_t v) { return __builtin_bswap32(v); }
static inline uint32_t be32_to_host(uint32_t v) { return __builtin_bswap32(v); }
#elif defined(__BYTE_ORDER__) && defined(__ORDER_BIG_ENDIAN__) && \
    __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
static inline uint32_t host_to_be32(uint32_t v) { return v; }
static inline uint32_t be32_to_host(uint32_t v) { return v; }
#else
static inline uint32_t host_to_be32(uint32_t v)
{
    uint8_t b[4];
    uint32_t r;
    ina__put32(b, v);
    memcpy(&r, b, 4);
    return r;
}
static inline uint32_t be32_to_host(uint32_t v)
{
    uint8_t b[4];
    memcpy(b, &v, 4);
    return ina__get32(b);
}
#endif

/* Load/store one big-endian uint32 at a possibly unaligned address. */
static inline uint32_t load_be32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return be32_to_host(v);
}

static inline void store_be32(uint8_t *p, uint32_t v)
{
    v = host_to_be32(v);
    memcpy(p, &v, 4);
}

/*
 * The functions of quant.h dispatch (bottom of this file) to the AVX2 kernels
 * of quant_avx2.c when the CPU has AVX2 and INA_NO_SIMD is not set, else to
 * the *_scalar functions here, which are the reference (quant_simd.h).
 *
 * ina__quant_block_exp_scalar works on chunks of INA_QUANT_CHUNK elements: the fixed
 * trip count of the inner loop lets gcc -O2 vectorize it (its default "very
 * cheap" cost model rejects loops that need a scalar epilogue), and the lane
 * maxima are folded at the end. Measured: 1.0 -> 4.2 Gelem/s with gcc 12 -O2.
 * The same trick did not help encode/decode under gcc -O2 (the float<->double
 * conversions are not vectorized there), so they stay plain loops, which
 * clang -O2 and gcc -O3 vectorize.
 */
#define INA_QUANT_CHUNK 8

/* ---- Block exponent ------------------------------------------------------ */

/* The block exponent from the largest |x| bit pattern (shared by both paths). */
static int16_t exp_of_absmax_bits(uint32_t mx)
{
    if (mx >= 0x7F800000u)
        return INA_EXP_NONFINITE;
    if (mx == 0)
        return INA_EXP_ZERO;
    /* max = m * 2^e with 0.5 <= m < 1, so 2^(e-1) <= max < 2^e. Subnormals
     * are handled by frexpf: 2^-149 gives e = -148. */
    float f;
    memcpy(&f, &mx, 4);
    int e;
    (void)frexpf(f, &e);
    return (int16_t)e;
}

int16_t ina__quant_block_exp_scalar(const float *x, size_t n)
{
    /*
     * For non-negative floats the order of the bit patterns is the numeric
     * order, and NaN/Inf (exponent all ones) are exactly the patterns
     * >= 0x7F800000. So one unsigned max over |x|'s bits gives both the
     * largest magnitude and whether anything is non-finite. The loop has no
     * branch and vectorizes.
     */
    uint32_t lane[INA_QUANT_CHUNK] = {0};
    size_t i = 0;
    for (; i + INA_QUANT_CHUNK <= n; i += INA_QUANT_CHUNK) {
        for (int j = 0; j < INA_QUANT_CHUNK; j++) {
            uint32_t a = ina__f32_bits(x[i + j]) & 0x7FFFFFFFu;
            lane[j] = a > lane[j] ? a : lane[j];
        }
    }
    uint32_t mx = 0;
    for (int j = 0; j < INA_QUANT_CHUNK; j++)
        mx = lane[j] > mx ? lane[j] : mx;
    for (; i < n; i++) {
        uint32_t a = ina__f32_bits(x[i]) & 0x7FFFFFFFu;
        mx = a > mx ? a : mx;
    }
    return exp_of_absmax_bits(mx);
}

int16_t ina__quant_exp_of_f32bits(uint32_t absmax_bits) { return exp_of_absmax_bits(absmax_bits); }

int16_t ina__quant_block_exp_f64(const double *x, size_t n)
{
    /* As the float scan: the bit patterns of |x| order like the values, and
     * NaN/Inf are exactly those >= 0x7FF0...0. AVX2 has no unsigned 64-bit
     * max, so this one stays scalar. */
    uint64_t mx = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t a;
        memcpy(&a, &x[i], 8);
        a &= 0x7FFFFFFFFFFFFFFFull;
        mx = a > mx ? a : mx;
    }
    if (mx >= 0x7FF0000000000000ull)
        return INA_EXP_NONFINITE;
    if (mx == 0)
        return INA_EXP_ZERO;
    double f;
    memcpy(&f, &mx, 8);
    int e;
    (void)frexp(f, &e);
    /* The floor keeps every scale of encode and decode a normal double (quant.h). */
    return (int16_t)(e < INA_QUANT_F64_EXP_MIN ? INA_QUANT_F64_EXP_MIN : e);
}

int ina__quant_headroom_bits(int nworkers)
{
    int l = 0;
    while (l < 31 && ((int64_t)1 << l) < (int64_t)nworkers)
        l++;
    return l;
}

/* 2^k as a double, with k clamped so that the result is a finite, normal
 * double (the valid exponents of every dtype need k in -1001..1001: quant.h;
 * the clamp is only reached for garbage input). */
static double pow2_clamped(int k)
{
    if (k > 1023)
        k = 1023;
    if (k < -1022)
        k = -1022;
    return ldexp(1.0, k);
}

/* Class code of one element in a NONFINITE block (quant.h); floats are
 * widened to double exactly, class and sign included. */
static inline uint32_t nonfinite_code(double d)
{
    if (isnan(d))
        return 1u << 18;
    if (isinf(d))
        return signbit(d) ? 1u << 9 : 1u; /* -Inf : +Inf */
    return 0;
}

/* Element i of a float (f64 = 0) or double array, as a double (exact). */
static inline double elem_at(const void *x, size_t i, int f64)
{
    return f64 ? ((const double *)x)[i] : (double)((const float *)x)[i];
}

/* ---- Encode -------------------------------------------------------------- */

/* The special exponents: @return 1 if handled (out written). Rare: stays scalar. */
static int encode_special(const void *x, int f64, size_t n, int16_t e, uint8_t *out)
{
    if (e == INA_EXP_ZERO) {
        memset(out, 0, 4 * n);
        return 1;
    }
    if (e == INA_EXP_NONFINITE) {
        for (size_t i = 0; i < n; i++)
            store_be32(out + 4 * i, nonfinite_code(elem_at(x, i, f64)));
        return 1;
    }
    return 0;
}

/* Scale 2^(31-L-e) and clamp bound 2^(31-L) - 1 (both paths use these doubles). */
static void encode_params(int16_t e, int nworkers, double *scale, double *qmax)
{
    const int l = ina__quant_headroom_bits(nworkers);
    *scale = pow2_clamped(31 - l - (int)e);
    *qmax = (double)((UINT32_C(1) << (31 - l)) - 1u);
}

/* One scaled element v = x * 2^s: clamped to +-qmax, rounded to nearest-even, big-endian at out. */
static inline void quantize_one(double v, double qmax, uint8_t *out)
{
#if defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD == 0
    /* Adding 1.5 * 2^52 to |v| <= 2^31 lands in [2^52, 2^53) where the double
     * ulp is 1: the addition rounds v to an integer in the current rounding
     * mode (nearest-even by default, as rint), and the low 32 bits of the
     * significand are that integer in two's complement (2^51 is a multiple
     * of 2^32). Requires double arithmetic to be done in double
     * (FLT_EVAL_METHOD == 0); otherwise the rint() path below is used. */
    const double magic = 6755399441055744.0; /* 0x1.8p52 */
    v = v < -qmax ? -qmax : v;
    v = v > qmax ? qmax : v;
    v += magic;
    uint64_t bits;
    memcpy(&bits, &v, 8);
    store_be32(out, (uint32_t)bits);
#else
    v = v < -qmax ? -qmax : v;
    v = v > qmax ? qmax : v;
    if (v != v) /* NaN: contract violation (e not from this data); no UB */
        v = 0.0;
    store_be32(out, (uint32_t)(int32_t)rint(v));
#endif
}

void ina__quant_encode_scalar(const float *x, size_t n, int16_t e, int nworkers, uint8_t *out)
{
    if (encode_special(x, 0, n, e, out))
        return;
    double scale, qmax;
    encode_params(e, nworkers, &scale, &qmax);

    /*
     * The reference loop. Auto-vectorized by clang -O2 and gcc -O3
     * (cvtps2pd, mulpd, min/max, add, shuffle, bswap), not by gcc -O2. The
     * AVX2 kernel (quant_avx2.c) performs the same operations lane by lane
     * (bit-identical, NaN included); a NEON version would have to as well.
     * A float-only variant (twice the lanes) is also exact for valid input:
     * x * 2^s is exact in float unless it underflows below 2^-126, and such
     * values round to 0 either way; 2^s needs splitting into two float
     * factors when s > 127 (e < -96 - L); clamp to the largest float <= qmax,
     * round with the +-2^23 trick for |v| < 2^23 (larger floats are already
     * integers), convert with cvttps2dq.
     */
    for (size_t i = 0; i < n; i++)
        quantize_one((double)x[i] * scale, qmax, out + 4 * i);
}

/*
 * Doubles: the same, without the widening. x * 2^s is exact unless it falls
 * below 2^-1022, where it rounds to 0 either way; |x| < 2^E keeps it below
 * 2^(31-L). (The 53-bit significand is cut to the 31 - L bits of the block's
 * grid: see the FLOAT64 error bound.)
 */
void ina__quant_encode_f64_scalar(const double *x, size_t n, int16_t e, int nworkers, uint8_t *out)
{
    if (encode_special(x, 1, n, e, out))
        return;
    double scale, qmax;
    encode_params(e, nworkers, &scale, &qmax);
    for (size_t i = 0; i < n; i++)
        quantize_one(x[i] * scale, qmax, out + 4 * i);
}

/* ---- Decode -------------------------------------------------------------- */

static inline float nonfinite_decode(uint32_t v)
{
    uint32_t pinf = v & 0x1FFu, ninf = (v >> 9) & 0x1FFu, nan = (v >> 18) & 0x1FFu;
    if (nan > 0 || (pinf > 0 && ninf > 0))
        return NAN;
    if (pinf > 0)
        return INFINITY;
    if (ninf > 0)
        return -INFINITY;
    return NAN; /* a finite element in a non-finite block cannot be carried */
}

/* Store v into element i of a float (f64 = 0, one rounding) or double array. */
static inline void put_elem(void *out, size_t i, int f64, double v)
{
    if (f64)
        ((double *)out)[i] = v;
    else
        ((float *)out)[i] = (float)v;
}

/* The special exponents: @return 1 if handled (out written). */
static int decode_special(const uint8_t *in, size_t n, int16_t e, void *out, int f64)
{
    if (e == INA_EXP_ZERO) {
        for (size_t i = 0; i < n; i++)
            put_elem(out, i, f64, 0.0);
        return 1;
    }
    if (e == INA_EXP_NONFINITE) {
        for (size_t i = 0; i < n; i++)
            put_elem(out, i, f64, nonfinite_decode(load_be32(in + 4 * i)));
        return 1;
    }
    return 0;
}

static double decode_scale(int16_t e, int nworkers)
{
    return pow2_clamped((int)e + ina__quant_headroom_bits(nworkers) - 31);
}

void ina__quant_decode_scalar(const uint8_t *in, size_t n, int16_t e, int nworkers, float *out)
{
    if (decode_special(in, n, e, out, 0))
        return;
    const double scale = decode_scale(e, nworkers);

    /*
     * The reference loop. Auto-vectorized by clang -O2 and gcc -O3 (load,
     * bswap, cvtdq2pd, mulpd, cvtpd2ps); the AVX2 kernel does the same
     * operations (one rounding, to float). A float-only variant ((float)s * 2^k) is also a
     * single rounding whenever every nonzero result is normal, i.e. for
     * k >= -126 (e >= -95 - L): the conversion rounds, the power-of-two
     * scaling is then exact; smaller e needs the double path.
     */
    for (size_t i = 0; i < n; i++) {
        uint32_t u = load_be32(in + 4 * i);
        int32_t s;
        memcpy(&s, &u, 4); /* two's complement reinterpretation, well defined */
        out[i] = (float)((double)s * scale);
    }
}

/* The same into doubles, without the rounding: the product is exact (quant.h). */
void ina__quant_decode_f64_scalar(const uint8_t *in, size_t n, int16_t e, int nworkers, double *out)
{
    if (decode_special(in, n, e, out, 1))
        return;
    const double scale = decode_scale(e, nworkers);
    for (size_t i = 0; i < n; i++) {
        uint32_t u = load_be32(in + 4 * i);
        int32_t s;
        memcpy(&s, &u, 4);
        out[i] = (double)s * scale;
    }
}

/* AVG's divisor N (a bad N of 0 or less divides by 1, as the scale rule treats it). */
static double avg_div(int nworkers) { return (double)(nworkers < 1 ? 1 : nworkers); }

/*
 * AVG into doubles: (s / N) * 2^(E+L-31). Dividing before scaling rounds
 * once, like dividing the exact sum (a power-of-two scaling of a normal
 * double is exact), but cannot overflow where the sum would: the average
 * of two FLOAT64 values near DBL_MAX stays finite. Scalar: only AVG uses it.
 */
void ina__quant_decode_avg_f64(const uint8_t *in, size_t n, int16_t e, int nworkers, double *out)
{
    const double div = avg_div(nworkers);
    if (decode_special(in, n, e, out, 1)) {
        for (size_t i = 0; i < n; i++)
            out[i] /= div; /* 0, +-Inf and NaN stay what they are */
        return;
    }
    const double scale = decode_scale(e, nworkers);
    for (size_t i = 0; i < n; i++) {
        uint32_t u = load_be32(in + 4 * i);
        int32_t s;
        memcpy(&s, &u, 4);
        out[i] = (double)s / div * scale;
    }
}

/*
 * AVG into floats: (float)((s / N) * 2^(E+L-31)), the doubles of
 * ina__quant_decode_avg_f64 rounded once to float, in one pass (FLOAT32 AVG,
 * the DDP hook's op). The special exponents decode to 0, +-Inf or NaN, which
 * the division leaves as they are.
 */
static int decode_avg_special(const uint8_t *in, size_t n, int16_t e, int nworkers, float *out)
{
    if (!decode_special(in, n, e, out, 0))
        return 0;
    const float div = (float)avg_div(nworkers);
    for (size_t i = 0; i < n; i++)
        out[i] /= div;
    return 1;
}

void ina__quant_decode_avg_scalar(const uint8_t *in, size_t n, int16_t e, int nworkers, float *out)
{
    if (decode_avg_special(in, n, e, nworkers, out))
        return;
    const double div = avg_div(nworkers);
    const double scale = decode_scale(e, nworkers);
    for (size_t i = 0; i < n; i++) {
        uint32_t u = load_be32(in + 4 * i);
        int32_t s;
        memcpy(&s, &u, 4);
        out[i] = (float)((double)s / div * scale);
    }
}

/* ---- int32 passthrough ----------------------------------------------------- */

void ina__i32_encode_scalar(const int32_t *x, size_t n, uint8_t *out)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        store_be32(out + 4 * i, u);
    }
}

void ina__i32_decode_scalar(const uint8_t *in, size_t n, int32_t *out)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u = load_be32(in + 4 * i);
        memcpy(&out[i], &u, 4);
    }
}

/* ---- AVX2 entry points (full semantics; quant_avx2.c has the kernels) ---------- */

/*
 * The AVX2 path mirrors the FLT_EVAL_METHOD == 0 scalar loop (the 0x1.8p52
 * rounding), which is what x86-64 compilers use; elsewhere it is not built.
 */
#if INA_QUANT_HAVE_AVX2 && defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD == 0
#define INA_QUANT_AVX2 1
#else
#define INA_QUANT_AVX2 0
#endif

#if INA_QUANT_AVX2

int16_t ina__quant_block_exp_avx2(const float *x, size_t n)
{
    return exp_of_absmax_bits(ina__avx2_absmax_bits(x, n));
}

void ina__quant_encode_avx2(const float *x, size_t n, int16_t e, int nworkers, uint8_t *out)
{
    if (encode_special(x, 0, n, e, out))
        return;
    double scale, qmax;
    encode_params(e, nworkers, &scale, &qmax);
    ina__avx2_quant_encode(x, n, scale, qmax, out);
}

void ina__quant_encode_f64_avx2(const double *x, size_t n, int16_t e, int nworkers, uint8_t *out)
{
    if (encode_special(x, 1, n, e, out))
        return;
    double scale, qmax;
    encode_params(e, nworkers, &scale, &qmax);
    ina__avx2_quant_encode_f64(x, n, scale, qmax, out);
}

void ina__quant_decode_avx2(const uint8_t *in, size_t n, int16_t e, int nworkers, float *out)
{
    if (decode_special(in, n, e, out, 0))
        return;
    ina__avx2_quant_decode(in, n, decode_scale(e, nworkers), out);
}

void ina__quant_decode_f64_avx2(const uint8_t *in, size_t n, int16_t e, int nworkers, double *out)
{
    if (decode_special(in, n, e, out, 1))
        return;
    ina__avx2_quant_decode_f64(in, n, decode_scale(e, nworkers), out);
}

void ina__quant_decode_avg_avx2(const uint8_t *in, size_t n, int16_t e, int nworkers, float *out)
{
    if (decode_avg_special(in, n, e, nworkers, out))
        return;
    ina__avx2_quant_decode_avg(in, n, avg_div(nworkers), decode_scale(e, nworkers), out);
}

void ina__i32_encode_avx2(const int32_t *x, size_t n, uint8_t *out) { ina__avx2_bswap32(x, n, out); }
void ina__i32_decode_avx2(const uint8_t *in, size_t n, int32_t *out) { ina__avx2_bswap32(in, n, out); }

int ina__quant_avx2_supported(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") ? 1 : 0;
}

#else /* no AVX2 code in this build: the named variants are the scalar ones */

int16_t ina__quant_block_exp_avx2(const float *x, size_t n) { return ina__quant_block_exp_scalar(x, n); }
void ina__quant_encode_avx2(const float *x, size_t n, int16_t e, int nworkers, uint8_t *out)
{
    ina__quant_encode_scalar(x, n, e, nworkers, out);
}
void ina__quant_decode_avx2(const uint8_t *in, size_t n, int16_t e, int nworkers, float *out)
{
    ina__quant_decode_scalar(in, n, e, nworkers, out);
}
void ina__quant_encode_f64_avx2(const double *x, size_t n, int16_t e, int nworkers, uint8_t *out)
{
    ina__quant_encode_f64_scalar(x, n, e, nworkers, out);
}
void ina__quant_decode_f64_avx2(const uint8_t *in, size_t n, int16_t e, int nworkers, double *out)
{
    ina__quant_decode_f64_scalar(in, n, e, nworkers, out);
}
void ina__quant_decode_avg_avx2(const uint8_t *in, size_t n, int16_t e, int nworkers, float *out)
{
    ina__quant_decode_avg_scalar(in, n, e, nworkers, out);
}
void ina__i32_encode_avx2(const int32_t *x, size_t n, uint8_t *out) { ina__i32_encode_scalar(x, n, out); }
void ina__i32_decode_avx2(const uint8_t *in, size_t n, int32_t *out) { ina__i32_decode_scalar(in, n, out); }
int ina__quant_avx2_supported(void) { return 0; }

#endif

/* ---- Dispatch ---------------------------------------------------------------------- */

/*
 * Decided once per process, on first use: a relaxed atomic, since threads
 * racing on the first call all compute the same value.
 */
static _Atomic int quant_impl = -1;

static int impl_init(void)
{
    int impl = INA_QUANT_IMPL_SCALAR;
    const char *no = getenv("INA_NO_SIMD");
    int disabled = no && no[0] && strcmp(no, "0") != 0;
    if (!disabled && ina__quant_avx2_supported())
        impl = INA_QUANT_IMPL_AVX2;
    atomic_store_explicit(&quant_impl, impl, memory_order_relaxed);
    return impl;
}

static inline int impl_get(void)
{
    int v = atomic_load_explicit(&quant_impl, memory_order_relaxed);
    return v >= 0 ? v : impl_init();
}

enum ina_quant_impl ina__quant_impl_active(void) { return (enum ina_quant_impl)impl_get(); }

const char *ina__quant_impl_name(enum ina_quant_impl impl)
{
    return impl == INA_QUANT_IMPL_AVX2 ? "avx2" : "scalar";
}

int16_t ina__quant_block_exp(const float *x, size_t n)
{
    return impl_get() == INA_QUANT_IMPL_AVX2 ? ina__quant_block_exp_avx2(x, n)
                                              : ina__quant_block_exp_scalar(x, n);
}

void ina__quant_encode(const float *x, size_t n, int16_t e, int nworkers, uint8_t *out)
{
    if (impl_get() == INA_QUANT_IMPL_AVX2)
        ina__quant_encode_avx2(x, n, e, nworkers, out);
    else
        ina__quant_encode_scalar(x, n, e, nworkers, out);
}

void ina__quant_decode(const uint8_t *in, size_t n, int16_t e, int nworkers, float *out)
{
    if (impl_get() == INA_QUANT_IMPL_AVX2)
        ina__quant_decode_avx2(in, n, e, nworkers, out);
    else
        ina__quant_decode_scalar(in, n, e, nworkers, out);
}

void ina__quant_encode_f64(const double *x, size_t n, int16_t e, int nworkers, uint8_t *out)
{
    if (impl_get() == INA_QUANT_IMPL_AVX2)
        ina__quant_encode_f64_avx2(x, n, e, nworkers, out);
    else
        ina__quant_encode_f64_scalar(x, n, e, nworkers, out);
}

void ina__quant_decode_f64(const uint8_t *in, size_t n, int16_t e, int nworkers, double *out)
{
    if (impl_get() == INA_QUANT_IMPL_AVX2)
        ina__quant_decode_f64_avx2(in, n, e, nworkers, out);
    else
        ina__quant_decode_f64_scalar(in, n, e, nworkers, out);
}

void ina__quant_decode_avg(const uint8_t *in, size_t n, int16_t e, int nworkers, float *out)
{
    if (impl_get() == INA_QUANT_IMPL_AVX2)
        ina__quant_decode_avg_avx2(in, n, e, nworkers, out);
    else
        ina__quant_decode_avg_scalar(in, n, e, nworkers, out);
}

void ina__i32_encode(const int32_t *x, size_t n, uint8_t *out)
{
    if (impl_get() == INA_QUANT_IMPL_AVX2)
        ina__i32_encode_avx2(x, n, out);
    else
        ina__i32_encode_scalar(x, n, out);
}

void ina__i32_decode(const uint8_t *in, size_t n, int32_t *out)
{
    if (impl_get() == INA_QUANT_IMPL_AVX2)
        ina__i32_decode_avx2(in, n, out);
    else
        ina__i32_decode_scalar(in, n, out);
}

/* ---- Public error bound ---------------------------------------------------- */

INA_EXTERN double ina_float_error_bound(int world_size, double amax, double exact_sum)
{
    const double rel = ldexp(fabs(exact_sum), -24) + ldexp(1.0, -149);
    amax = fabs(amax);
    if (amax != amax || amax == INFINITY || exact_sum != exact_sum)
        return INFINITY;
    if (amax == 0.0)
        return rel;
    int n = world_size < 1 ? 1 : world_size;
    int e;
    (void)frexp(amax, &e); /* amax = m * 2^e, 0.5 <= m < 1: the block exponent */
    return (double)n * ldexp(1.0, e + ina__quant_headroom_bits(n) - 31) + rel;
}
