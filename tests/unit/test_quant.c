/* test_quant.c: block floating point quantization (src/lib/quant.c) and the public error bound. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dtypes.h"
#include "common/wire.h"
#include "ina.h"
#include "lib/quant.h"

/* ---- Deterministic random numbers (splitmix64) ---------------------------- */

static uint64_t rng_state;

static void rng_seed(uint64_t s) { rng_state = s; }

static uint64_t rng_u64(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform integer in [lo, hi]. */
static int rng_int(int lo, int hi) { return lo + (int)(rng_u64() % (uint64_t)(hi - lo + 1)); }

/* Uniform double in [0, 1). */
static double rng_unit(void) { return (double)(rng_u64() >> 11) * 0x1p-53; }

static float rng_sign(void) { return (rng_u64() & 1) ? -1.0f : 1.0f; }

/* Uniform significand in [1, 2) (never rounds up to 2). */
static float rng_mant(void)
{
    uint32_t b = 0x3F800000u | ((uint32_t)rng_u64() & 0x007FFFFFu);
    float f;
    memcpy(&f, &b, 4);
    return f;
}

/* ---- The switch's side, simulated ------------------------------------------ */

/*
 * Run one packet's worth of an all-reduce over n_workers workers: x holds the
 * workers' blocks back to back (n_workers * n floats). Each worker computes
 * its block exponent, the "switch" keeps the max, each worker encodes with
 * it (into a deliberately unaligned buffer), the switch adds the big-endian
 * int32s with wrapping uint32 arithmetic, and the result is decoded (again
 * from an unaligned buffer). Also checks that no int32 overflow is possible:
 * sum over workers of |q| <= 2^31 - 1 for every element (for numeric
 * blocks), and every |q| <= 2^(31-L) - 1.
 */
static int16_t run_pipeline(const float *x, int n_workers, size_t n, float *res)
{
    int16_t e_max = INA_EXP_ZERO;
    for (int w = 0; w < n_workers; w++) {
        int16_t e = ina__quant_block_exp(x + (size_t)w * n, n);
        e_max = e > e_max ? e : e_max;
    }

    uint8_t *enc = malloc(4 * n + 1);
    uint8_t *sum = malloc(4 * n + 3);
    uint32_t *acc = calloc(n ? n : 1, sizeof(*acc));
    int64_t *sumabs = calloc(n ? n : 1, sizeof(*sumabs));
    int64_t *sum64 = calloc(n ? n : 1, sizeof(*sum64));
    if (!enc || !sum || !acc || !sumabs || !sum64) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    const int l = ina__quant_headroom_bits(n_workers);
    const int64_t qmax = ((int64_t)1 << (31 - l)) - 1;
    int q_in_range = 1;
    for (int w = 0; w < n_workers; w++) {
        ina__quant_encode(x + (size_t)w * n, n, e_max, n_workers, enc + 1);
        for (size_t i = 0; i < n; i++) {
            uint32_t u = ina__get32(enc + 1 + 4 * i);
            acc[i] += u; /* what the switch does: wrapping add */
            int32_t q;
            memcpy(&q, &u, 4);
            sum64[i] += q;
            sumabs[i] += q < 0 ? -(int64_t)q : q;
            if (e_max != INA_EXP_NONFINITE && (q > qmax || q < -qmax))
                q_in_range = 0;
        }
    }
    CHECK(q_in_range);
    int no_overflow = 1;
    for (size_t i = 0; i < n; i++) {
        int32_t wrapped;
        memcpy(&wrapped, &acc[i], 4);
        if (sumabs[i] > INT32_MAX || (int64_t)wrapped != sum64[i])
            no_overflow = 0;
        ina__put32(sum + 3 + 4 * i, acc[i]);
    }
    CHECK(no_overflow);
    ina__quant_decode(sum + 3, n, e_max, n_workers, res);
    free(enc);
    free(sum);
    free(acc);
    free(sumabs);
    free(sum64);
    return e_max;
}

/* Error-free accumulation (TwoSum): the exact sum of the workers' floats is
 * hi + lo to about 2^-100 relative, far below every term of the bound. */
static void dd_add(double *hi, double *lo, double v)
{
    double s = *hi + v;
    double bp = s - *hi;
    double err = (*hi - (s - bp)) + (v - bp);
    *hi = s;
    *lo += err;
}

/* ---- Block exponent --------------------------------------------------------- */

static void test_block_exp(void)
{
    float v;
    v = 1.0f;
    CHECK_EQ_INT(ina__quant_block_exp(&v, 1), 1);
    v = 0.5f;
    CHECK_EQ_INT(ina__quant_block_exp(&v, 1), 0);
    v = 0.75f;
    CHECK_EQ_INT(ina__quant_block_exp(&v, 1), 0);
    v = 3.0f;
    CHECK_EQ_INT(ina__quant_block_exp(&v, 1), 2);
    v = -3.0f;
    CHECK_EQ_INT(ina__quant_block_exp(&v, 1), 2);
    v = FLT_MAX;
    CHECK_EQ_INT(ina__quant_block_exp(&v, 1), 128);
    v = -FLT_MAX;
    CHECK_EQ_INT(ina__quant_block_exp(&v, 1), 128);
    v = 0x1p-149f;
    CHECK_EQ_INT(ina__quant_block_exp(&v, 1), -148);
    v = FLT_MIN; /* 2^-126 */
    CHECK_EQ_INT(ina__quant_block_exp(&v, 1), -125);
    v = nextafterf(FLT_MIN, 0.0f); /* largest subnormal, < 2^-126 */
    CHECK_EQ_INT(ina__quant_block_exp(&v, 1), -126);
    v = 0.0f;
    CHECK_EQ_INT(ina__quant_block_exp(&v, 1), INA_EXP_ZERO);
    v = -0.0f;
    CHECK_EQ_INT(ina__quant_block_exp(&v, 1), INA_EXP_ZERO);
    CHECK_EQ_INT(ina__quant_block_exp(NULL, 0), INA_EXP_ZERO);
    CHECK_EQ_INT(ina__quant_block_exp(&v, 0), INA_EXP_ZERO);
    v = NAN;
    CHECK_EQ_INT(ina__quant_block_exp(&v, 1), INA_EXP_NONFINITE);
    v = -NAN;
    CHECK_EQ_INT(ina__quant_block_exp(&v, 1), INA_EXP_NONFINITE);
    v = bits_float(0x7F800001u); /* signalling NaN, smallest payload */
    CHECK_EQ_INT(ina__quant_block_exp(&v, 1), INA_EXP_NONFINITE);
    v = INFINITY;
    CHECK_EQ_INT(ina__quant_block_exp(&v, 1), INA_EXP_NONFINITE);
    v = -INFINITY;
    CHECK_EQ_INT(ina__quant_block_exp(&v, 1), INA_EXP_NONFINITE);

    float mix[] = {0.0f, -3.0f, 1.0f, -0.0f, 0x1p-149f};
    CHECK_EQ_INT(ina__quant_block_exp(mix, 5), 2);
    CHECK_EQ_INT(ina__quant_block_exp(mix, 1), INA_EXP_ZERO);
    float zeros[] = {0.0f, -0.0f, 0.0f, -0.0f};
    CHECK_EQ_INT(ina__quant_block_exp(zeros, 4), INA_EXP_ZERO);
    float fm[] = {FLT_MAX, -INFINITY, 1.0f};
    CHECK_EQ_INT(ina__quant_block_exp(fm, 3), INA_EXP_NONFINITE);

    /* Every power of two and its neighbours: 2^k -> k+1, just above -> k+1,
     * just below -> k (smallest e with |x| < 2^e). */
    int pow_ok = 1;
    for (int k = -149; k <= 127; k++) {
        float p = ldexpf(1.0f, k);
        float up = nextafterf(p, INFINITY), dn = nextafterf(p, 0.0f);
        if (ina__quant_block_exp(&p, 1) != k + 1)
            pow_ok = 0;
        if (k > -149 && ina__quant_block_exp(&up, 1) != k + 1) /* 2^-149's neighbour is 2^-148 */
            pow_ok = 0;
        if (k > -149 && ina__quant_block_exp(&dn, 1) != k)
            pow_ok = 0;
        float neg = -p;
        if (ina__quant_block_exp(&neg, 1) != k + 1)
            pow_ok = 0;
    }
    CHECK(pow_ok);

    /* Long arrays (vector body + tails): the max, or a NaN/Inf, at every
     * position of every length up to 67, plus one long array. */
    float buf[1031];
    int pos_ok = 1;
    for (size_t len = 1; len <= 67; len++) {
        for (size_t at = 0; at < len; at++) {
            for (size_t i = 0; i < len; i++)
                buf[i] = (i & 1) ? -0.25f : 0.125f;
            buf[at] = -5.0f;
            if (ina__quant_block_exp(buf, len) != 3)
                pos_ok = 0;
            buf[at] = NAN;
            if (ina__quant_block_exp(buf, len) != INA_EXP_NONFINITE)
                pos_ok = 0;
            buf[at] = -INFINITY;
            if (ina__quant_block_exp(buf, len) != INA_EXP_NONFINITE)
                pos_ok = 0;
        }
    }
    CHECK(pos_ok);
    rng_seed(11);
    for (size_t i = 0; i < 1031; i++)
        buf[i] = (float)(rng_unit() - 0.5);
    buf[1030] = 0x1.fffffep+9f; /* just below 2^10 */
    CHECK_EQ_INT(ina__quant_block_exp(buf, 1031), 10);
    buf[1030] = 0.0f;
    buf[517] = -1024.0f;
    CHECK_EQ_INT(ina__quant_block_exp(buf, 1031), 11);
}

static void test_headroom(void)
{
    CHECK_EQ_INT(ina__quant_headroom_bits(1), 0);
    CHECK_EQ_INT(ina__quant_headroom_bits(2), 1);
    CHECK_EQ_INT(ina__quant_headroom_bits(3), 2);
    CHECK_EQ_INT(ina__quant_headroom_bits(4), 2);
    CHECK_EQ_INT(ina__quant_headroom_bits(5), 3);
    CHECK_EQ_INT(ina__quant_headroom_bits(8), 3);
    CHECK_EQ_INT(ina__quant_headroom_bits(9), 4);
    CHECK_EQ_INT(ina__quant_headroom_bits(64), 6);
    CHECK_EQ_INT(ina__quant_headroom_bits(65), 7);
    CHECK_EQ_INT(ina__quant_headroom_bits(128), 7);
    CHECK_EQ_INT(ina__quant_headroom_bits(129), 8);
    CHECK_EQ_INT(ina__quant_headroom_bits(255), 8);
    CHECK_EQ_INT(ina__quant_headroom_bits(256), 8);
}

/* ---- Encode / decode: exact values ------------------------------------------- */

static uint32_t enc1(float x, int16_t e, int nw)
{
    uint8_t b[5] = {0xAA, 0xAA, 0xAA, 0xAA, 0xAA};
    ina__quant_encode(&x, 1, e, nw, b + 1); /* unaligned */
    return ina__get32(b + 1);
}

static float dec1(uint32_t v, int16_t e, int nw)
{
    uint8_t b[7];
    ina__put32(b + 3, v);
    float f = -123.0f;
    ina__quant_decode(b + 3, 1, e, nw, &f);
    return f;
}

static void test_encode_exact(void)
{
    /* Byte layout: big-endian. */
    uint8_t b[9];
    memset(b, 0xAA, sizeof(b));
    float one[2] = {1.0f, -1.0f};
    ina__quant_encode(one, 2, 1, 1, b + 1);
    CHECK_EQ_INT(b[0], 0xAA);
    CHECK_EQ_INT(b[1], 0x40);
    CHECK_EQ_INT(b[2], 0x00);
    CHECK_EQ_INT(b[3], 0x00);
    CHECK_EQ_INT(b[4], 0x00);
    CHECK_EQ_INT(ina__get32(b + 5), 0xC0000000u);

    CHECK_EQ_INT(enc1(1.0f, 1, 2), 0x20000000u);  /* L = 1 */
    CHECK_EQ_INT(enc1(1.0f, 1, 3), 0x10000000u);  /* L = 2 */
    CHECK_EQ_INT(enc1(1.0f, 1, 256), 0x00400000u); /* L = 8 */

    /* Round to nearest, ties to even (scale 2^0 with e = 31, N = 1). */
    CHECK_EQ_INT((int32_t)enc1(2.5f, 31, 1), 2);
    CHECK_EQ_INT((int32_t)enc1(3.5f, 31, 1), 4);
    CHECK_EQ_INT((int32_t)enc1(-2.5f, 31, 1), -2);
    CHECK_EQ_INT((int32_t)enc1(0.5f, 31, 1), 0);
    CHECK_EQ_INT((int32_t)enc1(1.5f, 31, 1), 2);
    CHECK_EQ_INT((int32_t)enc1(-1.5f, 31, 1), -2);
    CHECK_EQ_INT((int32_t)enc1(2.75f, 31, 1), 3);
    CHECK_EQ_INT((int32_t)enc1(0x1p-149f, 31, 1), 0);

    /* Clamping: 1 - 2^-24 with e = 0, L = 8 scales to 2^23 - 1/2, which
     * rounds (to even) to 2^23 and is clamped to 2^23 - 1. */
    CHECK_EQ_INT(enc1(nextafterf(1.0f, 0.0f), 0, 256), 0x007FFFFFu);
    CHECK_EQ_INT((int32_t)enc1(-nextafterf(1.0f, 0.0f), 0, 256), -0x007FFFFF);
    CHECK_EQ_INT(enc1(FLT_MAX, 128, 256), 0x007FFFFFu);
    CHECK_EQ_INT(enc1(FLT_MAX, 128, 1), 0x7FFFFF80u); /* (1 - 2^-24) * 2^31 */
    /* A value outside the agreed block (contract violation) is clamped. */
    CHECK_EQ_INT(enc1(4.0f, 1, 1), 0x7FFFFFFFu);
    CHECK_EQ_INT(enc1(-4.0f, 1, 1), 0x80000001u);
    CHECK_EQ_INT(enc1(FLT_MAX, -148, 1), 0x7FFFFFFFu);
    /* Extreme scales: 2^179 and 2^-105. */
    CHECK_EQ_INT(enc1(0x1p-149f, -148, 1), 0x40000000u);
    CHECK_EQ_INT(enc1(0x1p-149f, -148, 256), 0x00400000u);
    CHECK_EQ_INT(enc1(0x1p127f, 128, 256), 0x00400000u);
    CHECK_EQ_INT(enc1(0x1p-149f, 128, 256), 0u); /* rounds to 0 */

    /* Zero block: zeros written. */
    memset(b, 0xAA, sizeof(b));
    ina__quant_encode(one, 2, INA_EXP_ZERO, 4, b + 1);
    CHECK_EQ_INT(b[0], 0xAA);
    CHECK_EQ_INT(ina__get32(b + 1), 0);
    CHECK_EQ_INT(ina__get32(b + 5), 0);

    /* Non-finite block: class codes. */
    float nf[7] = {INFINITY, -INFINITY, NAN, 1.0f, -0.0f, -NAN, bits_float(0x7F800001u)};
    uint8_t nb[29];
    ina__quant_encode(nf, 7, INA_EXP_NONFINITE, 256, nb + 1);
    CHECK_EQ_INT(ina__get32(nb + 1), 1);
    CHECK_EQ_INT(ina__get32(nb + 5), 1u << 9);
    CHECK_EQ_INT(ina__get32(nb + 9), 1u << 18);
    CHECK_EQ_INT(ina__get32(nb + 13), 0);
    CHECK_EQ_INT(ina__get32(nb + 17), 0);
    CHECK_EQ_INT(ina__get32(nb + 21), 1u << 18);
    CHECK_EQ_INT(ina__get32(nb + 25), 1u << 18);

    /* n == 0 touches nothing. */
    memset(b, 0xAA, sizeof(b));
    ina__quant_encode(one, 0, 1, 1, b);
    ina__quant_encode(one, 0, INA_EXP_ZERO, 1, b);
    ina__quant_encode(one, 0, INA_EXP_NONFINITE, 1, b);
    CHECK_EQ_INT(b[0], 0xAA);
    float f = 7.0f;
    ina__quant_decode(b, 0, 1, 1, &f);
    ina__quant_decode(b, 0, INA_EXP_ZERO, 1, &f);
    ina__quant_decode(b, 0, INA_EXP_NONFINITE, 1, &f);
    CHECK(f == 7.0f);
}

static void test_decode_exact(void)
{
    CHECK(dec1(0x40000000u, 1, 1) == 1.0f);
    CHECK(dec1(0xC0000000u, 1, 1) == -1.0f);
    CHECK(dec1(0x00400000u, 1, 256) == 1.0f);
    CHECK(dec1(0x7FFFFFFFu, 1, 1) == 2.0f); /* (2^31-1) * 2^-30 rounds to 2.0f */
    CHECK(dec1(0x80000000u, 1, 1) == -2.0f); /* a wrapped sum still decodes, no UB */
    CHECK(dec1(1u, -148, 1) == 0.0f);        /* 2^-179 -> +0 */
    CHECK(dec1(0x40000000u, -148, 1) == 0x1p-149f);
    CHECK(dec1(0x60000000u, -148, 1) == 0x1p-148f); /* 1.5 * 2^-149: tie to even */
    CHECK(dec1(0x7FFFFF80u, 128, 1) == FLT_MAX);
    CHECK(isinf(dec1(0x7FFFFFFFu, 128, 1)) && dec1(0x7FFFFFFFu, 128, 1) > 0);
    CHECK(isinf(dec1(0x80000001u, 128, 1)) && dec1(0x80000001u, 128, 1) < 0);

    /* Zero block: +0.0f. */
    float z = dec1(0x12345678u, INA_EXP_ZERO, 3);
    CHECK(z == 0.0f && !signbit(z));

    /* Non-finite block: class counts. */
    CHECK(isnan(dec1(0u, INA_EXP_NONFINITE, 4)));
    CHECK(dec1(1u, INA_EXP_NONFINITE, 4) == INFINITY);
    CHECK(dec1(5u, INA_EXP_NONFINITE, 8) == INFINITY);
    CHECK(dec1(256u, INA_EXP_NONFINITE, 256) == INFINITY);
    CHECK(dec1(1u << 9, INA_EXP_NONFINITE, 4) == -INFINITY);
    CHECK(dec1(256u << 9, INA_EXP_NONFINITE, 256) == -INFINITY);
    CHECK(isnan(dec1(1u | 1u << 9, INA_EXP_NONFINITE, 4)));
    CHECK(isnan(dec1(1u << 18, INA_EXP_NONFINITE, 4)));
    CHECK(isnan(dec1(256u << 18, INA_EXP_NONFINITE, 256)));
    CHECK(isnan(dec1(3u | 1u << 18, INA_EXP_NONFINITE, 4)));

    /* Exponents outside the valid range (garbage from the wire) give a value,
     * never NaN, and never crash. */
    CHECK(dec1(0u, 30000, 1) == 0.0f);
    CHECK(isinf(dec1(1u, 30000, 1)));
    CHECK(dec1(0x7FFFFFFFu, -30000, 1) == 0.0f);
    CHECK(enc1(0.0f, 30000, 1) == 0u);
    CHECK(enc1(0.0f, -30000, 1) == 0u);
}

/* ---- Round trip with one worker ----------------------------------------------- */

static float random_finite_float(void)
{
    for (;;) {
        float f = bits_float((uint32_t)rng_u64());
        if (isfinite(f))
            return f;
    }
}

static void test_round_trip_single(void)
{
    rng_seed(1);
    /* A single element encoded with its own exponent: q holds its 24
     * significant bits exactly as long as 31 - L >= 24 (N <= 128), so the
     * round trip is exact. With N = 256 (23 bits) it is within the bound. */
    static const int nws[] = {1, 2, 3, 4, 8, 64, 128, 256};
    int exact_ok = 1, bound_ok = 1;
    for (size_t k = 0; k < sizeof(nws) / sizeof(nws[0]); k++) {
        int nw = nws[k];
        for (int t = 0; t < 20000; t++) {
            float x = random_finite_float();
            if (t < 277) /* every binade, including subnormals, at least once */
                x = rng_sign() * ldexpf(rng_mant(), t - 149 > 127 ? 127 : t - 149);
            int16_t e = ina__quant_block_exp(&x, 1);
            uint8_t b[5];
            float y;
            if (e == INA_EXP_ZERO) {
                ina__quant_encode(&x, 1, e, nw, b + 1);
                ina__quant_decode(b + 1, 1, e, nw, &y);
                if (y != 0.0f)
                    exact_ok = 0;
                continue;
            }
            ina__quant_encode(&x, 1, e, nw, b + 1);
            ina__quant_decode(b + 1, 1, e, nw, &y);
            if (nw <= 128 && float_bits(y) != float_bits(x) && !(x == 0.0f && y == 0.0f))
                exact_ok = 0;
            double err = fabs((double)y - (double)x);
            if (!(err <= ina_float_error_bound(nw, fabs((double)x), (double)x)))
                bound_ok = 0;
        }
    }
    CHECK(exact_ok);
    CHECK(bound_ok);

    /* A whole block with N = 1: small elements round toward the block's grid. */
    float x[300], y[300];
    uint8_t b[4 * 300 + 1];
    int blk_ok = 1;
    for (int t = 0; t < 200; t++) {
        double amax = 0;
        for (int i = 0; i < 300; i++) {
            x[i] = rng_sign() * ldexpf(rng_mant(), rng_int(-40, 40));
            if (fabs((double)x[i]) > amax)
                amax = fabs((double)x[i]);
        }
        int16_t e = ina__quant_block_exp(x, 300);
        ina__quant_encode(x, 300, e, 1, b + 1);
        ina__quant_decode(b + 1, 300, e, 1, y);
        for (int i = 0; i < 300; i++) {
            double err = fabs((double)y[i] - (double)x[i]);
            if (!(err <= ina_float_error_bound(1, amax, (double)x[i])))
                blk_ok = 0;
            if (fabs((double)x[i]) == amax && y[i] != x[i]) /* the max is exact */
                blk_ok = 0;
        }
    }
    CHECK(blk_ok);
}

/* ---- Simulated N-worker sums ---------------------------------------------------- */

enum dist {
    D_UNIFORM,      /* uniform in [-1, 1) */
    D_MIXED,        /* magnitudes 2^-30 .. 2^30 within one block */
    D_WORKER_SCALE, /* each worker its own scale 2^-40 .. 2^40: very different e_w */
    D_DENORMAL,     /* subnormals and the smallest normals */
    D_POW2,         /* exact powers of two and their lower neighbours (clamping) */
    D_NEAR_MAX_POS, /* positive, in [FLT_MAX/2, FLT_MAX] */
    D_NEAR_MAX_MIX, /* both signs, in [FLT_MAX/2, FLT_MAX] */
    D_SPARSE,       /* most workers all +-0 (block exp ZERO), one has data */
    D_ALL_ZERO,     /* every element +-0 */
    D_COUNT
};

static const char *const dist_name[D_COUNT] = {
    "uniform", "mixed", "worker_scale", "denormal", "pow2",
    "near_max_pos", "near_max_mix", "sparse", "all_zero"};

static float gen(enum dist d, int w, int worker_k, int sparse_w)
{
    switch (d) {
    case D_UNIFORM:
        return (float)(2.0 * rng_unit() - 1.0);
    case D_MIXED:
        return rng_sign() * ldexpf(rng_mant(), rng_int(-30, 30));
    case D_WORKER_SCALE:
        return ldexpf((float)(2.0 * rng_unit() - 1.0), worker_k);
    case D_DENORMAL: {
        uint32_t b = (uint32_t)rng_u64() & 0x00FFFFFFu; /* exponent field 0 or 1 */
        if ((rng_u64() & 7) == 0)
            b = 0;
        if ((rng_u64() & 7) == 1)
            b = 1; /* 2^-149 */
        return rng_sign() * bits_float(b);
    }
    case D_POW2: {
        float p = ldexpf(1.0f, rng_int(-10, 9));
        return rng_sign() * ((rng_u64() & 1) ? p : nextafterf(2.0f * p, 0.0f));
    }
    case D_NEAR_MAX_POS:
        return (rng_u64() & 15) == 0 ? FLT_MAX : (float)(FLT_MAX * (0.5 + 0.5 * rng_unit()));
    case D_NEAR_MAX_MIX:
        return rng_sign() * (float)(FLT_MAX * (0.5 + 0.5 * rng_unit()));
    case D_SPARSE:
        return w == sparse_w ? (float)(2.0 * rng_unit() - 1.0) * 1000.0f
                             : ((rng_u64() & 1) ? -0.0f : 0.0f);
    case D_ALL_ZERO:
        return (rng_u64() & 1) ? -0.0f : 0.0f;
    case D_COUNT:
        break;
    }
    return 0.0f;
}

/*
 * Overflow near FLT_MAX (decided behaviour): the decoded sum is the one
 * rounding of S = (int32 sum) * 2^(E+L-31) to float, so it is +-Inf exactly
 * when |S| >= 2^128 - 2^103 (IEEE overflow threshold), and |S - exact| is
 * below N * 2^(E+L-31). Hence the result is either
 *   - finite and within the bound, or
 *   - +-Inf with the sign of the exact sum, and |exact| >= 2^128 - 2^103 -
 *     N * 2^(E+L-31): the exact sum overflows float or lies within the
 *     quantization error of the overflow threshold.
 * It is never a wrong finite value. With all-positive inputs near FLT_MAX
 * and N >= 2 the exact sum is >= 2^128 and the result must be +Inf.
 */
static void simulate(int nw, size_t n, enum dist d, uint64_t seed)
{
    rng_seed(seed);
    float *x = malloc((size_t)nw * n * sizeof(float));
    float *res = malloc((n ? n : 1) * sizeof(float));
    if (!x || !res) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    int sparse_w = rng_int(0, nw - 1);
    double amax = 0;
    for (int w = 0; w < nw; w++) {
        int worker_k = rng_int(-40, 40);
        for (size_t i = 0; i < n; i++) {
            float v = gen(d, w, worker_k, sparse_w);
            x[(size_t)w * n + i] = v;
            if (fabs((double)v) > amax)
                amax = fabs((double)v);
        }
    }
    int16_t e_max = run_pipeline(x, nw, n, res);

    const int l = ina__quant_headroom_bits(nw);
    const double thr = ldexp(1.0, 128) - ldexp(1.0, 103);
    int ok = 1, inf_count = 0;
    double worst = 0; /* max err / bound */
    for (size_t i = 0; i < n && ok; i++) {
        double hi = 0, lo = 0;
        for (int w = 0; w < nw; w++)
            dd_add(&hi, &lo, (double)x[(size_t)w * n + i]);
        double exact = hi + lo;
        if (e_max == INA_EXP_ZERO) {
            if (!(res[i] == 0.0f && !signbit(res[i]) && exact == 0.0)) {
                fprintf(stderr, "  %s N=%d i=%zu: zero block gave %a\n", dist_name[d], nw, i,
                        (double)res[i]);
                ok = 0;
            }
            continue;
        }
        if (e_max == INA_EXP_NONFINITE) {
            fprintf(stderr, "  %s N=%d: unexpected non-finite block\n", dist_name[d], nw);
            ok = 0;
            continue;
        }
        double unit_n = (double)nw * ldexp(1.0, e_max + l - 31);
        double bound = ina_float_error_bound(nw, amax, exact);
        double want = unit_n + ldexp(fabs(exact), -24) + 0x1p-149;
        if (bound != want) {
            fprintf(stderr, "  bound %a != formula %a\n", bound, want);
            ok = 0;
        }
        if (isnan(res[i])) {
            fprintf(stderr, "  %s N=%d i=%zu: NaN\n", dist_name[d], nw, i);
            ok = 0;
        } else if (isinf(res[i])) {
            inf_count++;
            if ((res[i] > 0) != (exact > 0) || !(fabs(exact) >= thr - unit_n)) {
                fprintf(stderr, "  %s N=%d i=%zu: Inf but exact %a\n", dist_name[d], nw, i, exact);
                ok = 0;
            }
        } else {
            double err = fabs(((double)res[i] - hi) - lo);
            if (err / bound > worst)
                worst = err / bound;
            if (!(err <= bound)) {
                fprintf(stderr, "  %s N=%d i=%zu: got %a exact %a err %a bound %a\n",
                        dist_name[d], nw, i, (double)res[i], exact, err, bound);
                ok = 0;
            }
        }
    }
    if (!ok)
        fprintf(stderr, "simulate(N=%d, n=%zu, %s, seed=%llu) failed\n", nw, n, dist_name[d],
                (unsigned long long)seed);
    CHECK(ok);
    CHECK_LE_DBL(worst, 1.0);
    if (d == D_NEAR_MAX_POS && nw >= 2)
        CHECK_EQ_INT(inf_count, (long long)n); /* exact >= 2^128: always +Inf */
    if (d == D_NEAR_MAX_POS && nw == 1)
        CHECK_EQ_INT(inf_count, 0);
    if (d == D_ALL_ZERO)
        CHECK_EQ_INT(e_max, INA_EXP_ZERO);
    if (d == D_SPARSE)
        CHECK(e_max != INA_EXP_ZERO && e_max != INA_EXP_NONFINITE);
    free(x);
    free(res);
}

static void test_simulated_sums(void)
{
    static const int nws[] = {1, 2, 3, 4, 8, 64, 256};
    static const size_t ns[] = {1, 7, 256, 1000};
    uint64_t seed = 1000;
    for (size_t a = 0; a < sizeof(nws) / sizeof(nws[0]); a++)
        for (int d = 0; d < D_COUNT; d++)
            for (size_t b = 0; b < sizeof(ns) / sizeof(ns[0]); b++)
                for (int rep = 0; rep < 3; rep++)
                    simulate(nws[a], ns[b], (enum dist)d, seed++);
}

/*
 * Worst case for the clamp: every worker holds the block's largest value
 * just below 2^E, so every worker's q is clamped (error just under 1 unit)
 * and the sum sits right at the int32 limit. Must not overflow and must
 * stay within the bound (its N * unit term is exactly what this needs).
 */
static void test_clamp_worst_case(void)
{
    static const int nws[] = {1, 2, 3, 4, 8, 64, 128, 256};
    for (size_t a = 0; a < sizeof(nws) / sizeof(nws[0]); a++) {
        int nw = nws[a];
        float *x = malloc((size_t)nw * 2 * sizeof(float));
        float res[2];
        if (!x)
            exit(2);
        for (int w = 0; w < nw; w++) {
            x[2 * w] = nextafterf(1.0f, 0.0f);
            x[2 * w + 1] = -nextafterf(1.0f, 0.0f);
        }
        int16_t e = run_pipeline(x, nw, 2, res);
        CHECK_EQ_INT(e, 0);
        double exact = (double)nw * (double)nextafterf(1.0f, 0.0f);
        double bound = ina_float_error_bound(nw, (double)nextafterf(1.0f, 0.0f), exact);
        CHECK_LE_DBL(fabs((double)res[0] - exact), bound);
        CHECK_LE_DBL(fabs((double)res[1] + exact), bound);
        free(x);
    }
}

/* ---- NaN / Inf ------------------------------------------------------------------- */

/* Expected decode of one element given the workers' values (quant.h rules). */
static int expect_class(const float *x, int nw, size_t n, size_t i)
{
    int pinf = 0, ninf = 0, nan = 0;
    for (int w = 0; w < nw; w++) {
        float v = x[(size_t)w * n + i];
        if (isnan(v))
            nan++;
        else if (v == INFINITY)
            pinf++;
        else if (v == -INFINITY)
            ninf++;
    }
    if (nan || (pinf && ninf))
        return 0; /* NaN */
    if (pinf)
        return 1;
    if (ninf)
        return -1;
    return 0; /* finite element in a non-finite block: NaN */
}

static int matches_class(float r, int cls)
{
    if (cls == 1)
        return r == INFINITY;
    if (cls == -1)
        return r == -INFINITY;
    return isnan(r);
}

static void test_nonfinite(void)
{
    enum { NMAX = 256, LEN = 8 };
    static float x[NMAX * LEN];
    float res[LEN];

    /* One worker has a NaN: that element is NaN, and (documented) every
     * finite element of the block comes back as NaN too. */
    rng_seed(7);
    for (int i = 0; i < 4 * LEN; i++)
        x[i] = (float)(rng_unit() - 0.5);
    x[2 * LEN + 3] = NAN;
    CHECK_EQ_INT(run_pipeline(x, 4, LEN, res), INA_EXP_NONFINITE);
    CHECK(isnan(res[3]));
    int all_nan = 1;
    for (int i = 0; i < LEN; i++)
        all_nan &= isnan(res[i]) != 0;
    CHECK(all_nan);

    /* +Inf and finite -> +Inf; +Inf and -Inf -> NaN; -Inf and finite -> -Inf. */
    for (int i = 0; i < 2 * LEN; i++)
        x[i] = 5.0f;
    x[0 * LEN + 1] = INFINITY;
    x[0 * LEN + 2] = INFINITY;
    x[1 * LEN + 2] = -INFINITY;
    x[1 * LEN + 4] = -INFINITY;
    x[0 * LEN + 5] = INFINITY;
    x[1 * LEN + 5] = INFINITY;
    CHECK_EQ_INT(run_pipeline(x, 2, LEN, res), INA_EXP_NONFINITE);
    CHECK(res[1] == INFINITY);
    CHECK(isnan(res[2]));
    CHECK(res[4] == -INFINITY);
    CHECK(res[5] == INFINITY);
    CHECK(isnan(res[0])); /* 5 + 5: finite in a non-finite block */

    /* The non-finite worker's block wins over all-zero blocks of the others. */
    for (int i = 0; i < 3 * LEN; i++)
        x[i] = 0.0f;
    x[1 * LEN + 6] = -INFINITY;
    CHECK_EQ_INT(run_pipeline(x, 3, LEN, res), INA_EXP_NONFINITE);
    CHECK(res[6] == -INFINITY);
    CHECK(isnan(res[0]));

    /* 256 workers: no class field overflows. */
    for (int w = 0; w < NMAX; w++) {
        float *xw = x + (size_t)w * LEN;
        xw[0] = INFINITY;
        xw[1] = NAN;
        xw[2] = -INFINITY;
        xw[3] = w == 17 ? -INFINITY : INFINITY;
        xw[4] = w == 255 ? NAN : INFINITY;
        xw[5] = w == 0 ? -INFINITY : 1.0f;
        xw[6] = FLT_MAX;
        xw[7] = w & 1 ? -NAN : NAN;
    }
    CHECK_EQ_INT(run_pipeline(x, NMAX, LEN, res), INA_EXP_NONFINITE);
    CHECK(res[0] == INFINITY);
    CHECK(isnan(res[1]));
    CHECK(res[2] == -INFINITY);
    CHECK(isnan(res[3]));
    CHECK(isnan(res[4]));
    CHECK(res[5] == -INFINITY);
    CHECK(isnan(res[6]));
    CHECK(isnan(res[7]));

    /* Random injections: the result always follows the class rules and is
     * never a finite value. */
    static const int nws[] = {1, 2, 3, 4, 8, 64, 256};
    rng_seed(99);
    int rules_ok = 1, never_finite = 1;
    for (int t = 0; t < 300; t++) {
        int nw = nws[t % 7];
        size_t n = (size_t)rng_int(1, LEN);
        for (int w = 0; w < nw; w++)
            for (size_t i = 0; i < n; i++) {
                float v = (float)(rng_unit() - 0.5);
                uint64_t r = rng_u64() % 64;
                if (r == 0)
                    v = NAN;
                else if (r == 1)
                    v = INFINITY;
                else if (r == 2)
                    v = -INFINITY;
                x[(size_t)w * n + i] = v;
            }
        /* make sure at least one non-finite value exists */
        x[(size_t)rng_int(0, nw - 1) * n + (size_t)rng_int(0, (int)n - 1)] = INFINITY;
        CHECK_EQ_INT(run_pipeline(x, nw, n, res), INA_EXP_NONFINITE);
        for (size_t i = 0; i < n; i++) {
            if (!matches_class(res[i], expect_class(x, nw, n, i)))
                rules_ok = 0;
            if (isfinite(res[i]))
                never_finite = 0;
        }
    }
    CHECK(rules_ok);
    CHECK(never_finite);
}

/* ---- int32 passthrough ------------------------------------------------------------- */

static void test_i32(void)
{
    int32_t v[] = {0, 1, -1, INT32_MIN, INT32_MAX, 0x12345678, -0x12345678, 256};
    const size_t n = sizeof(v) / sizeof(v[0]);
    uint8_t b[4 * 8 + 3];
    int32_t back[8];
    memset(b, 0xAA, sizeof(b));
    ina__i32_encode(v, n, b + 1);
    CHECK_EQ_INT(b[0], 0xAA);
    CHECK_EQ_INT(b[4 * 8 + 1], 0xAA);
    CHECK_EQ_INT(ina__get32(b + 1 + 4 * 3), 0x80000000u);
    CHECK_EQ_INT(ina__get32(b + 1 + 4 * 4), 0x7FFFFFFFu);
    CHECK_EQ_INT(b[1 + 4 * 5], 0x12);
    CHECK_EQ_INT(b[2 + 4 * 5], 0x34);
    CHECK_EQ_INT(b[3 + 4 * 5], 0x56);
    CHECK_EQ_INT(b[4 + 4 * 5], 0x78);
    CHECK_EQ_INT(ina__get32(b + 1 + 4 * 2), 0xFFFFFFFFu);
    ina__i32_decode(b + 1, n, back);
    int same = 1;
    for (size_t i = 0; i < n; i++)
        same &= back[i] == v[i];
    CHECK(same);

    /* Random round trip at every alignment. */
    rng_seed(5);
    enum { M = 1000 };
    static int32_t src[M], dst[M];
    static uint8_t buf[4 * M + 4];
    int rt_ok = 1;
    for (int off = 0; off < 4; off++) {
        for (int i = 0; i < M; i++)
            src[i] = (int32_t)(uint32_t)rng_u64();
        ina__i32_encode(src, M, buf + off);
        ina__i32_decode(buf + off, M, dst);
        for (int i = 0; i < M; i++)
            rt_ok &= src[i] == dst[i];
    }
    CHECK(rt_ok);

    /* Wrapping sums, as the switch computes them (two's complement mod 2^32). */
    enum { W = 5 };
    int32_t a[W][4] = {
        {INT32_MAX, INT32_MIN, -1, 7},
        {1, -1, INT32_MIN, -7},
        {INT32_MAX, INT32_MIN, INT32_MIN, 0},
        {0, 0, 1, INT32_MAX},
        {2, 5, 0, INT32_MAX},
    };
    uint32_t acc[4] = {0, 0, 0, 0};
    uint8_t pk[4 * 4 + 1];
    for (int w = 0; w < W; w++) {
        ina__i32_encode(a[w], 4, pk + 1);
        for (int i = 0; i < 4; i++)
            acc[i] += ina__get32(pk + 1 + 4 * i);
    }
    for (int i = 0; i < 4; i++)
        ina__put32(pk + 1 + 4 * i, acc[i]);
    int32_t got[4];
    ina__i32_decode(pk + 1, 4, got);
    int wrap_ok = 1;
    for (int i = 0; i < 4; i++) {
        int64_t s = 0;
        for (int w = 0; w < W; w++)
            s += a[w][i];
        uint32_t m = (uint32_t)((uint64_t)s & 0xFFFFFFFFu); /* exact sum mod 2^32 */
        int32_t want;
        memcpy(&want, &m, 4);
        wrap_ok &= got[i] == want;
    }
    CHECK(wrap_ok);
    CHECK_EQ_INT(got[0], 1); /* 2 * (2^31 - 1) + 3 = 2^32 + 1 */
}

/* ---- Public error bound -------------------------------------------------------------- */

static void test_error_bound(void)
{
    CHECK(ina_float_error_bound(1, 1.0, 1.0) == 0x1p-30 + 0x1p-24 + 0x1p-149);
    CHECK(ina_float_error_bound(1, 0.0, 0.0) == 0x1p-149);
    CHECK(ina_float_error_bound(4, 0.0, -8.0) == 0x1p-21 + 0x1p-149);
    CHECK(ina_float_error_bound(256, 3.0, 0.0) == 256.0 * 0x1p-21 + 0x1p-149);
    CHECK(ina_float_error_bound(3, 0.5, 1.0) == 3.0 * 0x1p-29 + 0x1p-24 + 0x1p-149);
    CHECK(ina_float_error_bound(2, -0.5, -1.0) == 2.0 * 0x1p-30 + 0x1p-24 + 0x1p-149);
    CHECK(ina_float_error_bound(1, (double)FLT_MAX, 0.0) == 0x1p97 + 0x1p-149);
    CHECK(ina_float_error_bound(1, 0x1p-149, 0.0) == 0x1p-179 + 0x1p-149);
    CHECK(isinf(ina_float_error_bound(2, (double)INFINITY, 1.0)));
    CHECK(isinf(ina_float_error_bound(2, 1.0, (double)NAN)));
}

int main(void)
{
    test_block_exp();
    test_headroom();
    test_encode_exact();
    test_decode_exact();
    test_round_trip_single();
    test_simulated_sums();
    test_clamp_worst_case();
    test_nonfinite();
    test_i32();
    test_error_bound();
    return check_report("test_quant");
}
