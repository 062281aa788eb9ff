/* test_quant_simd.c: the dispatched and AVX2 quantization paths against the scalar reference, bit for bit. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/wire.h"
#include "lib/quant.h"
#include "lib/quant_simd.h"

/*
 * Every case runs the scalar function and the candidate (the AVX2 variant
 * when this CPU has it, and the public dispatched function) on the same
 * input, writing into guarded, deliberately misaligned buffers, and compares
 * the outputs byte for byte, plus the guard bytes around them (no write
 * outside [0, 4n)). Inputs: random floats of every exponent, ties at .5
 * after scaling, values at and around the clamp, denormals, +-0, NaN/Inf
 * (also inside finite blocks, a contract violation that must still agree),
 * exponents -160..140 plus garbage ones, lengths 0..67 and large.
 */

/* ---- Deterministic random numbers (splitmix64) ---------------------------- */

static uint64_t rng_state = 0x5EED1234ABCDull;

static uint64_t rng_u64(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int rng_int(int lo, int hi) { return lo + (int)(rng_u64() % (uint64_t)(hi - lo + 1)); }

static float bits_float(uint32_t b)
{
    float f;
    memcpy(&f, &b, 4);
    return f;
}

/* ---- Candidates ----------------------------------------------------------------- */

typedef void (*enc_fn)(const float *, size_t, int16_t, int, uint8_t *);
typedef void (*dec_fn)(const uint8_t *, size_t, int16_t, int, float *);
typedef int16_t (*exp_fn)(const float *, size_t);
typedef void (*i32e_fn)(const int32_t *, size_t, uint8_t *);
typedef void (*i32d_fn)(const uint8_t *, size_t, int32_t *);
typedef void (*enc64_fn)(const double *, size_t, int16_t, int, uint8_t *);
typedef void (*dec64_fn)(const uint8_t *, size_t, int16_t, int, double *);

struct impl {
    const char *name;
    enc_fn enc;
    dec_fn dec;
    exp_fn bexp;
    i32e_fn i32e;
    i32d_fn i32d;
    enc64_fn enc64;
    dec64_fn dec64;
    dec_fn deca; /* FLOAT32 AVG */
};

static struct impl impls[2];
static int nimpls;

#define GUARD 64
#define MAXN 20000

static uint8_t ref_buf[4 * MAXN + 2 * GUARD + 64];
static uint8_t got_buf[4 * MAXN + 2 * GUARD + 64];
static uint8_t in_buf[4 * MAXN + 64];
static float xs[MAXN + 16];
static double ds[MAXN / 2 + 16];

static unsigned long long cases, mismatches;

/* Report the first few mismatches in detail. */
static void report(const char *what, const char *impl, size_t n, int16_t e, int nw, size_t at,
                   const uint8_t *ref, const uint8_t *got)
{
    mismatches++;
    if (mismatches <= 10)
        fprintf(stderr,
                "MISMATCH %s [%s] n=%zu e=%d nworkers=%d at byte %zu: ref %02x%02x%02x%02x got "
                "%02x%02x%02x%02x\n",
                what, impl, n, e, nw, at, ref[0], ref[1], ref[2], ref[3], got[0], got[1], got[2],
                got[3]);
}

/* Compare [base - GUARD, base + len + GUARD) of two buffers filled with the same guard pattern. */
static void compare(const char *what, const char *impl, size_t n, int16_t e, int nw,
                    const uint8_t *ref, const uint8_t *got, size_t len)
{
    cases++;
    if (memcmp(ref - GUARD, got - GUARD, len + 2 * GUARD) == 0)
        return;
    for (size_t i = 0; i < len + 2 * GUARD; i++)
        if (ref[i - GUARD] != got[i - GUARD]) {
            size_t at = i < GUARD ? 0 : (i - GUARD) & ~(size_t)3;
            report(what, impl, n, e, nw, at, ref + at, got + at);
            return;
        }
}

/* xs[0..n) at float offset 0 (aligned storage) but the functions get x = xs + xoff. */
static void check_encode(const float *x, size_t n, int16_t e, int nw, unsigned oalign)
{
    uint8_t *ref = ref_buf + GUARD + oalign, *got = got_buf + GUARD + oalign;
    for (int k = 0; k < nimpls; k++) {
        memset(ref_buf, 0xA5, sizeof(ref_buf));
        memset(got_buf, 0xA5, sizeof(got_buf));
        ina__quant_encode_scalar(x, n, e, nw, ref);
        impls[k].enc(x, n, e, nw, got);
        compare("encode", impls[k].name, n, e, nw, ref, got, 4 * n);
    }
}

static double avg_f64[MAXN];

/* The FLOAT32 AVG reference: the AVG doubles (ina__quant_decode_avg_f64, the
 * path FLOAT32 AVG took before it had its own kernel) rounded once to float. */
static void decode_avg_reference(const uint8_t *in, size_t n, int16_t e, int nw, float *out)
{
    ina__quant_decode_avg_f64(in, n, e, nw, avg_f64);
    for (size_t i = 0; i < n; i++)
        out[i] = (float)avg_f64[i];
}

static void check_decode(const uint8_t *in, size_t n, int16_t e, int nw, unsigned oalign)
{
    uint8_t *ref = ref_buf + GUARD + oalign, *got = got_buf + GUARD + oalign;
    for (int k = 0; k < nimpls; k++) {
        memset(ref_buf, 0x5A, sizeof(ref_buf));
        memset(got_buf, 0x5A, sizeof(got_buf));
        /* float stores need float alignment for the scalar reference (it writes
         * through float *); oalign is a multiple of 4 here. */
        ina__quant_decode_scalar(in, n, e, nw, (float *)(void *)ref);
        impls[k].dec(in, n, e, nw, (float *)(void *)got);
        compare("decode", impls[k].name, n, e, nw, ref, got, 4 * n);
    }
    for (int k = 0; k <= nimpls; k++) { /* k == nimpls: the scalar kernel itself */
        memset(ref_buf, 0x5A, sizeof(ref_buf));
        memset(got_buf, 0x5A, sizeof(got_buf));
        decode_avg_reference(in, n, e, nw, (float *)(void *)ref);
        dec_fn f = k < nimpls ? impls[k].deca : ina__quant_decode_avg_scalar;
        f(in, n, e, nw, (float *)(void *)got);
        compare("decode_avg", k < nimpls ? impls[k].name : "scalar", n, e, nw, ref, got, 4 * n);
    }
}

static void check_block_exp(const float *x, size_t n)
{
    int16_t ref = ina__quant_block_exp_scalar(x, n);
    for (int k = 0; k < nimpls; k++) {
        int16_t got = impls[k].bexp(x, n);
        cases++;
        if (got != ref) {
            mismatches++;
            if (mismatches <= 10)
                fprintf(stderr, "MISMATCH block_exp [%s] n=%zu: ref %d got %d\n", impls[k].name, n,
                        ref, got);
        }
    }
}

static void check_i32(const uint8_t *in, size_t n, unsigned oalign)
{
    uint8_t *ref = ref_buf + GUARD + oalign, *got = got_buf + GUARD + oalign;
    for (int k = 0; k < nimpls; k++) {
        memset(ref_buf, 0x3C, sizeof(ref_buf));
        memset(got_buf, 0x3C, sizeof(got_buf));
        ina__i32_encode_scalar((const int32_t *)(const void *)in, n, ref);
        impls[k].i32e((const int32_t *)(const void *)in, n, got);
        compare("i32_encode", impls[k].name, n, 0, 0, ref, got, 4 * n);
        memset(ref_buf, 0x3C, sizeof(ref_buf));
        memset(got_buf, 0x3C, sizeof(got_buf));
        ina__i32_decode_scalar(in, n, (int32_t *)(void *)(ref));
        impls[k].i32d(in, n, (int32_t *)(void *)(got));
        compare("i32_decode", impls[k].name, n, 0, 0, ref, got, 4 * n);
    }
}

/* FLOAT64: encode n doubles and decode n int32 to doubles (8n bytes: n <= MAXN / 2). */
static void check_f64(const double *x, const uint8_t *in, size_t n, int16_t e, int nw,
                      unsigned oalign)
{
    uint8_t *ref = ref_buf + GUARD + oalign, *got = got_buf + GUARD + oalign;
    for (int k = 0; k < nimpls; k++) {
        memset(ref_buf, 0x6B, sizeof(ref_buf));
        memset(got_buf, 0x6B, sizeof(got_buf));
        ina__quant_encode_f64_scalar(x, n, e, nw, ref);
        impls[k].enc64(x, n, e, nw, got);
        compare("encode_f64", impls[k].name, n, e, nw, ref, got, 4 * n);
        /* double stores need double alignment (oalign is a multiple of 8 here) */
        memset(ref_buf, 0x6B, sizeof(ref_buf));
        memset(got_buf, 0x6B, sizeof(got_buf));
        ina__quant_decode_f64_scalar(in, n, e, nw, (double *)(void *)ref);
        impls[k].dec64(in, n, e, nw, (double *)(void *)got);
        compare("decode_f64", impls[k].name, n, e, nw, ref, got, 8 * n);
    }
}

/* ---- Input generators --------------------------------------------------------------- */

/* A random float of magnitude below 2^e (the block exponent contract), any class of value. */
static float gen_below(int e)
{
    int kind = rng_int(0, 15);
    float sign = (rng_u64() & 1) ? -1.0f : 1.0f;
    switch (kind) {
    case 0: return 0.0f * sign;
    case 1: return sign * bits_float((uint32_t)rng_int(1, 0x7FFFFF)); /* denormal */
    case 2: return sign * ldexpf(1.0f, e) * (1.0f - 0x1p-24f); /* the largest below 2^e */
    default: {
        /* Random significand, exponent within 40 binades below e. */
        uint32_t m = 0x3F800000u | ((uint32_t)rng_u64() & 0x7FFFFFu);
        float f = ldexpf(bits_float(m), e - 1 - rng_int(0, 40));
        return sign * f;
    }
    }
}

/*
 * A value that lands exactly on a tie (k + 0.5) or near the clamp after
 * scaling by 2^(31-L-e): v / 2^(31-L-e) when representable as a float.
 */
static float gen_scaled(int e, int l, double v)
{
    return (float)ldexp(v, e + l - 31);
}

static float gen_adversarial(int e, int l)
{
    double qmax = (double)((1u << (31 - l)) - 1u);
    switch (rng_int(0, 7)) {
    case 0: return gen_scaled(e, l, (double)rng_int(-1000, 1000) + 0.5); /* small ties */
    case 1: return gen_scaled(e, l, (double)rng_int(-(1 << 22), 1 << 22) + 0.5); /* ties */
    case 2: return gen_scaled(e, l, qmax - 0.5); /* tie just below the clamp */
    case 3: return gen_scaled(e, l, qmax + 0.5 * rng_int(-2, 2)); /* around the clamp */
    case 4: return gen_scaled(e, l, -qmax - 0.5 * rng_int(-2, 2));
    case 5: return gen_scaled(e, l, ldexp(1.0, 31 - l)); /* exactly 2^(31-L): clamps */
    case 6: return gen_scaled(e, l, -ldexp(1.0, 31 - l));
    default: return gen_scaled(e, l, (rng_u64() & 1 ? 1 : -1) * 0.5 * rng_int(0, 4)); /* +-0.5, 1, ... */
    }
}

/* A special value for contract-violating blocks. */
static float gen_special(void)
{
    switch (rng_int(0, 5)) {
    case 0: return INFINITY;
    case 1: return -INFINITY;
    case 2: return NAN;
    case 3: return bits_float(0x7F800001u | ((uint32_t)rng_u64() & 0x3FFFFFu)); /* sNaN */
    case 4: return bits_float(0xFFC00000u | ((uint32_t)rng_u64() & 0x3FFFFFu)); /* -qNaN payload */
    default: return bits_float((uint32_t)rng_u64()); /* any pattern */
    }
}

static const int worker_counts[] = {1, 2, 3, 4, 5, 8, 16, 64, 128, 256, 0, -3, 1 << 20, INT32_MAX};

static int pick_workers(void)
{
    return worker_counts[rng_int(0, (int)(sizeof(worker_counts) / sizeof(worker_counts[0])) - 1)];
}

/* ---- Tests ------------------------------------------------------------------------ */

/* Encode: valid data below 2^e, for every valid e, with adversarial values mixed in. */
static void test_encode_valid(void)
{
    for (int e = -160; e <= 140; e++) {
        for (int rep = 0; rep < 6; rep++) {
            size_t n = rep < 4 ? (size_t)rng_int(0, 67) : (size_t)rng_int(68, 700);
            int nw = pick_workers();
            int l = ina__quant_headroom_bits(nw);
            unsigned xoff = (unsigned)rng_int(0, 7), oal = (unsigned)rng_int(0, 7);
            float *x = xs + xoff; /* float-aligned, any vector alignment */
            for (size_t i = 0; i < n; i++)
                x[i] = (rng_u64() & 3) == 0 && l < 31 ? gen_adversarial(e, l) : gen_below(e);
            check_encode(x, n, (int16_t)e, nw, oal);
            check_block_exp(x, n);
        }
    }
}

/* Encode: contract violations and garbage exponents must agree too. */
static void test_encode_garbage(void)
{
    static const int16_t exps[] = {INA_EXP_ZERO, INA_EXP_NONFINITE, -32767, -2000, -1100, -1000,
                                   -300, -200, -149, -148, -147, 0, 1, 127, 128, 129, 200,
                                   1000, 1100, 2000, 32766};
    for (size_t k = 0; k < sizeof(exps) / sizeof(exps[0]); k++) {
        for (int rep = 0; rep < 40; rep++) {
            size_t n = (size_t)rng_int(0, 67);
            int nw = pick_workers();
            float *x = xs + rng_int(0, 7);
            for (size_t i = 0; i < n; i++) {
                int c = rng_int(0, 3);
                x[i] = c == 0   ? gen_special()
                       : c == 1 ? bits_float((uint32_t)rng_u64())
                                : gen_below(rng_int(-150, 129));
            }
            check_encode(x, n, exps[k], nw, (unsigned)rng_int(0, 7));
            check_block_exp(x, n);
        }
    }
    /* Random exponents, random bit patterns. */
    for (int rep = 0; rep < 3000; rep++) {
        size_t n = (size_t)rng_int(0, 67);
        float *x = xs + rng_int(0, 7);
        for (size_t i = 0; i < n; i++)
            x[i] = bits_float((uint32_t)rng_u64());
        check_encode(x, n, (int16_t)rng_int(-32768, 32767), pick_workers(), (unsigned)rng_int(0, 7));
        check_block_exp(x, n);
    }
}

/* Block exponent: every position of the maximum, every length 0..67, specials anywhere. */
static void test_block_exp(void)
{
    for (size_t n = 0; n <= 67; n++) {
        for (size_t pos = 0; pos < n; pos++) {
            for (int kind = 0; kind < 5; kind++) {
                float *x = xs + (n + pos) % 8;
                for (size_t i = 0; i < n; i++)
                    x[i] = gen_below(3);
                x[pos] = kind == 0   ? -15.5f
                         : kind == 1 ? INFINITY
                         : kind == 2 ? -NAN
                         : kind == 3 ? bits_float(1)
                                     : bits_float(0x7F7FFFFFu);
                check_block_exp(x, n);
            }
        }
        float *x = xs + n % 8;
        for (size_t i = 0; i < n; i++)
            x[i] = (i & 1) ? -0.0f : 0.0f;
        check_block_exp(x, n);
        for (size_t i = 0; i < n; i++)
            x[i] = bits_float((uint32_t)rng_int(1, 7)); /* all denormal */
        check_block_exp(x, n);
    }
    /* Large blocks with the maximum in the tail, the middle, the head. */
    for (int rep = 0; rep < 50; rep++) {
        size_t n = (size_t)rng_int(1, MAXN);
        float *x = xs + rng_int(0, 7);
        int e = rng_int(-149, 128);
        for (size_t i = 0; i < n; i++)
            x[i] = gen_below(e);
        x[rng_int(0, (int)n - 1)] = rep & 1 ? gen_special() : gen_below(e);
        check_block_exp(x, n);
    }
}

/* Decode: every int32 class (extremes, near zero, random) for every exponent. */
static void test_decode(void)
{
    for (int e = -170; e <= 150; e++) {
        for (int rep = 0; rep < 6; rep++) {
            size_t n = rep < 4 ? (size_t)rng_int(0, 67) : (size_t)rng_int(68, 700);
            int nw = pick_workers();
            unsigned ioff = (unsigned)rng_int(0, 15);
            uint8_t *in = in_buf + ioff;
            for (size_t i = 0; i < n; i++) {
                uint32_t v;
                switch (rng_int(0, 5)) {
                case 0: v = (uint32_t)rng_int(-1000, 1000); break;
                case 1: v = rng_u64() & 1 ? 0x7FFFFFFFu : 0x80000000u; break;
                case 2: v = (uint32_t)rng_int(-(1 << 24) - 50, -(1 << 24) + 50); break; /* 25-bit: rounds */
                case 3: v = (uint32_t)rng_int((1 << 25) - 50, (1 << 25) + 50); break;
                default: v = (uint32_t)rng_u64(); break;
                }
                memcpy(in + 4 * i, &v, 4); /* any byte order: the value is random anyway */
            }
            check_decode(in, n, (int16_t)e, nw, 4u * (unsigned)rng_int(0, 3));
        }
    }
    static const int16_t exps[] = {INA_EXP_ZERO, INA_EXP_NONFINITE, -32767, -2000, -1000, -300,
                                   300, 1000, 2000, 32766};
    for (size_t k = 0; k < sizeof(exps) / sizeof(exps[0]); k++) {
        for (int rep = 0; rep < 40; rep++) {
            size_t n = (size_t)rng_int(0, 67);
            uint8_t *in = in_buf + rng_int(0, 15);
            for (size_t i = 0; i < 4 * n; i++)
                in[i] = (uint8_t)rng_u64();
            check_decode(in, n, exps[k], pick_workers(), 4u * (unsigned)rng_int(0, 3));
        }
    }
}

/* A double below 2^e (or, rarely, any pattern), with ties and clamp cases after scaling. */
static double gen_double_below(int e, int l)
{
    double sign = rng_u64() & 1 ? -1.0 : 1.0;
    double qmax = (double)((1u << (31 - l)) - 1u);
    switch (rng_int(0, 9)) {
    case 0: return 0.0 * sign;
    case 1: return sign * ldexp(1.0, e) * (1 - 0x1p-53); /* the largest below 2^e */
    case 2: return ldexp((double)rng_int(-(1 << 22), 1 << 22) + 0.5, e + l - 31); /* ties */
    case 3: return ldexp(qmax + 0.5 * rng_int(-2, 1), e + l - 31); /* around the clamp */
    case 4: {
        uint64_t b = rng_u64();
        double d;
        memcpy(&d, &b, 8);
        return d; /* contract violation: any pattern */
    }
    default: return sign * ldexp((double)(rng_u64() >> 11) * 0x1p-53, e - rng_int(0, 60));
    }
}

/* FLOAT64 kernels: every valid exponent band, garbage exponents, any int32 sums. */
static void test_f64(void)
{
    static const int16_t garbage[] = {INA_EXP_ZERO, INA_EXP_NONFINITE, -32767, -2000, -1100,
                                      1100, 2000, 32766};
    for (int e = INA_QUANT_F64_EXP_MIN - 30; e <= 1030; e += 7) {
        for (int rep = 0; rep < 3; rep++) {
            size_t n = rep < 2 ? (size_t)rng_int(0, 67) : (size_t)rng_int(68, 700);
            int nw = pick_workers();
            int l = ina__quant_headroom_bits(nw);
            double *x = ds + rng_int(0, 3);
            for (size_t i = 0; i < n; i++)
                x[i] = l < 31 ? gen_double_below(e, l) : 1.0;
            uint8_t *in = in_buf + rng_int(0, 15);
            for (size_t i = 0; i < 4 * n; i++)
                in[i] = (uint8_t)rng_u64();
            check_f64(x, in, n, (int16_t)e, nw, 8u * (unsigned)rng_int(0, 3));
        }
    }
    for (size_t k = 0; k < sizeof(garbage) / sizeof(garbage[0]); k++) {
        for (int rep = 0; rep < 20; rep++) {
            size_t n = (size_t)rng_int(0, 67);
            double *x = ds + rng_int(0, 3);
            for (size_t i = 0; i < n; i++)
                x[i] = gen_double_below(rng_int(-1074, 1024), 2);
            uint8_t *in = in_buf + rng_int(0, 15);
            for (size_t i = 0; i < 4 * n; i++)
                in[i] = (uint8_t)rng_u64();
            check_f64(x, in, n, garbage[k], pick_workers(), 8u * (unsigned)rng_int(0, 3));
        }
    }
}

/* A full round trip through the public functions equals the scalar round trip. */
static void test_large(void)
{
    static const size_t sizes[] = {256, 2048, 16360, MAXN};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        size_t n = sizes[k];
        for (int rep = 0; rep < 4; rep++) {
            float *x = xs + rep;
            int e = rng_int(-140, 128);
            for (size_t i = 0; i < n; i++)
                x[i] = (rng_u64() & 7) == 0 ? gen_adversarial(e, 2) : gen_below(e);
            int16_t be = ina__quant_block_exp_scalar(x, n);
            check_block_exp(x, n);
            check_encode(x, n, be, 4, (unsigned)rep);
            uint8_t *in = in_buf + rep;
            for (size_t i = 0; i < 4 * n; i++)
                in[i] = (uint8_t)rng_u64();
            check_decode(in, n, be, 4, 4u * (unsigned)rep);
            check_i32(in, n, (unsigned)rep);
        }
    }
}

static void test_i32(void)
{
    for (size_t n = 0; n <= 131; n++) {
        uint8_t *in = in_buf + n % 16;
        for (size_t i = 0; i < 4 * n; i++)
            in[i] = (uint8_t)rng_u64();
        check_i32(in, n, (unsigned)(n % 8));
    }
}

/* Exact known values through the dispatched path (whatever it is). */
static void test_known(void)
{
    /* nworkers 4: L = 2, qmax = 2^29 - 1; e = 1: scale 2^28. */
    float x[9] = {1.0f, -1.0f, 0x1p-29f, 0x1.8p-28f, -0x1.8p-28f, 0x1p-30f, 1.9999999f, -2.0f, 0.0f};
    uint8_t b[9 * 4 + 1];
    ina__quant_encode(x, 9, 1, 4, b + 1);
    static const int32_t want[9] = {1 << 28, -(1 << 28), 0 /* 0.5 ties to even */, 2 /* 1.5 -> 2 */,
                                    -2, 0, 536870880, -536870911 /* clamped */, 0};
    for (int i = 0; i < 9; i++)
        CHECK_EQ_INT((int32_t)ina__get32(b + 1 + 4 * i), want[i]);
    float y[9];
    ina__quant_decode(b + 1, 9, 1, 4, y);
    CHECK(y[0] == 1.0f && y[1] == -1.0f && y[2] == 0.0f && y[3] == 0x1p-27f && y[8] == 0.0f);
}

int main(void)
{
    impls[nimpls++] = (struct impl){"dispatched", ina__quant_encode, ina__quant_decode,
                                    ina__quant_block_exp, ina__i32_encode, ina__i32_decode,
                                    ina__quant_encode_f64, ina__quant_decode_f64,
                                    ina__quant_decode_avg};
    if (ina__quant_avx2_supported())
        impls[nimpls++] = (struct impl){"avx2", ina__quant_encode_avx2, ina__quant_decode_avx2,
                                        ina__quant_block_exp_avx2, ina__i32_encode_avx2,
                                        ina__i32_decode_avx2, ina__quant_encode_f64_avx2,
                                        ina__quant_decode_f64_avx2, ina__quant_decode_avg_avx2};
    printf("quant implementations: active %s, avx2 %s\n", ina__quant_impl_name(ina__quant_impl_active()),
           ina__quant_avx2_supported() ? "supported (tested directly)" : "not available");

    test_known();
    test_block_exp();
    test_encode_valid();
    test_encode_garbage();
    test_decode();
    test_i32();
    test_f64();
    test_large();

    printf("%llu comparisons, %llu mismatches\n", cases, mismatches);
    CHECK_EQ_INT(mismatches, 0);
    CHECK(cases > 10000);
    return check_report("test_quant_simd");
}
