/* test_half.c: float16/bfloat16 conversions (src/lib/half.c): every pattern, RNE ties, one rounding from double, SIMD = scalar. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "dtypes.h"
#include "lib/half.h"
#include "lib/quant.h"
#include "rng.h"

/* ---- Helpers ------------------------------------------------------------------- */

static int f16_is_nan(uint16_t h) { return (h & 0x7C00) == 0x7C00 && (h & 0x3FF); }
static int bf16_is_nan(uint16_t h) { return (h & 0x7F80) == 0x7F80 && (h & 0x7F); }

#define F16_MAX 65504.0
#define BF16_MAX 0x1.FEp127

/* The candidates: the scalar reference, and the vector kernels when present. */
struct impl {
    const char *name;
    void (*f16_f32)(const uint16_t *, size_t, float *);
    void (*bf16_f32)(const uint16_t *, size_t, float *);
    void (*f32_f16)(const float *, size_t, uint16_t *);
    void (*f32_bf16)(const float *, size_t, uint16_t *);
    void (*f64_f16)(const double *, size_t, uint16_t *);
    void (*f64_bf16)(const double *, size_t, uint16_t *);
};
static struct impl impls[3];
static int nimpls;

#define MAXN 200000
static uint16_t hin[MAXN], hout[MAXN + 16], href[MAXN + 16];
static float fbuf[MAXN + 16], fref[MAXN + 16];
static double dbuf[MAXN];
static unsigned long long mismatches;

/* Compare n 16-bit results of candidate k with the reference; report the first few. */
static void cmp16(const char *what, int k, const uint16_t *ref, const uint16_t *got, size_t n,
                  const void *in, size_t insz)
{
    for (size_t i = 0; i < n; i++)
        if (ref[i] != got[i]) {
            if (mismatches++ < 10) {
                uint64_t raw = 0;
                memcpy(&raw, (const uint8_t *)in + i * insz, insz);
                fprintf(stderr, "%s [%s] i=%zu in=%#llx: ref %04x got %04x\n", what,
                        impls[k].name, i, (unsigned long long)raw, ref[i], got[i]);
            }
            return;
        }
}

static void cmp32(const char *what, int k, const float *ref, const float *got, size_t n,
                  const uint16_t *in)
{
    if (memcmp(ref, got, 4 * n) == 0)
        return;
    for (size_t i = 0; i < n; i++)
        if (float_bits(ref[i]) != float_bits(got[i]) && mismatches++ < 10)
            fprintf(stderr, "%s [%s] in=%04x: ref %08x got %08x\n", what, impls[k].name, in[i],
                    float_bits(ref[i]), float_bits(got[i]));
}

/* ---- Every pattern -------------------------------------------------------------- */

static void test_f16_all_patterns(void)
{
    for (uint32_t h = 0; h < 65536; h++)
        hin[h] = (uint16_t)h;
    ina__f16_to_f32_scalar(hin, 65536, fref);
    int bad_value = 0, bad_back = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        double v = f16_value((uint16_t)h);
        if (f16_is_nan((uint16_t)h)) {
            /* quiet NaN, payload kept: what VCVTPH2PS gives */
            uint32_t want = (h & 0x8000u) << 16 | 0x7FC00000u | (h & 0x3FFu) << 13;
            bad_value += float_bits(fref[h]) != want;
            /* and back: the quiet version of the pattern */
            bad_back += ina__f32_bits_to_f16(float_bits(fref[h])) != (uint16_t)(h | 0x200u);
            continue;
        }
        bad_value += !((double)fref[h] == v && !signbit(fref[h]) == !signbit(v));
        bad_back += ina__f32_bits_to_f16(float_bits(fref[h])) != h; /* exact round trip */
    }
    CHECK_EQ_INT(bad_value, 0);
    CHECK_EQ_INT(bad_back, 0);
    /* The vector kernels: every pattern, at every length of the tail and offset. */
    for (int k = 0; k < nimpls; k++)
        for (size_t off = 0; off < 9; off++) {
            size_t n = 65536 - off - (off * 3 % 8);
            memset(fbuf, 0xEE, sizeof(fbuf));
            impls[k].f16_f32(hin + off, n, fbuf);
            cmp32("f16->f32", k, fref + off, fbuf, n, hin + off);
            CHECK(float_bits(fbuf[n]) == 0xEEEEEEEEu); /* nothing written past n */
            impls[k].f32_f16(fref + off, n, hout);
            ina__f32_to_f16_scalar(fref + off, n, href);
            cmp16("f32->f16 round trip", k, href, hout, n, fref + off, 4);
        }
}

static void test_bf16_all_patterns(void)
{
    for (uint32_t h = 0; h < 65536; h++)
        hin[h] = (uint16_t)h;
    ina__bf16_to_f32_scalar(hin, 65536, fref);
    int bad_value = 0, bad_back = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        bad_value += float_bits(fref[h]) != h << 16; /* bfloat16 is the top half of a float */
        uint16_t want = bf16_is_nan((uint16_t)h) ? (uint16_t)(h | 0x40u) : (uint16_t)h;
        bad_back += ina__f32_bits_to_bf16(float_bits(fref[h])) != want;
    }
    CHECK_EQ_INT(bad_value, 0);
    CHECK_EQ_INT(bad_back, 0);
    for (int k = 0; k < nimpls; k++)
        for (size_t off = 0; off < 9; off++) {
            size_t n = 65536 - off - (off * 5 % 8);
            impls[k].bf16_f32(hin + off, n, fbuf);
            cmp32("bf16->f32", k, fref + off, fbuf, n, hin + off);
            impls[k].f32_bf16(fref + off, n, hout);
            ina__f32_to_bf16_scalar(fref + off, n, href);
            cmp16("f32->bf16 round trip", k, href, hout, n, fref + off, 4);
        }
}

/* ---- Ties and neighbours ------------------------------------------------------- */

/*
 * For every pair of adjacent finite positive values a < b of the format
 * (b = Inf for the largest: the overflow threshold is the midpoint of the
 * largest finite value and the next power of two), the float midpoint must
 * round to the one with an even pattern, and the floats just below and above
 * it to a and b. Both signs, scalar and vector, all in one array.
 */
static void test_ties(int bf16)
{
    size_t n = 0;
    const uint32_t top = bf16 ? 0x7F7Fu : 0x7BFFu; /* the largest finite pattern */
    for (uint32_t a = 0; a <= top; a++) {
        uint32_t b = a + 1; /* the next pattern; a + 1 past top is Inf */
        uint32_t mid;
        if (bf16) {
            mid = a << 16 | 0x8000u;
        } else {
            double va = f16_value((uint16_t)a), vb = a == top ? 65536.0 : f16_value((uint16_t)b);
            mid = float_bits((float)((va + vb) / 2)); /* 12 bits: exact in float */
        }
        for (int s = 0; s < 2; s++) {
            uint32_t sg = s ? 0x80000000u : 0u;
            uint16_t hs = s ? 0x8000u : 0u;
            uint16_t even = (uint16_t)((a & 1) ? b : a);
            fref[n] = bits_float(sg | mid), href[n++] = (uint16_t)(hs | even);
            fref[n] = bits_float(sg | (mid - 1)), href[n++] = (uint16_t)(hs | a);
            fref[n] = bits_float(sg | (mid + 1)), href[n++] = (uint16_t)(hs | b);
        }
    }
    CHECK(n <= MAXN);
    for (int k = 0; k < nimpls; k++) {
        memset(hout, 0, sizeof(hout));
        (bf16 ? impls[k].f32_bf16 : impls[k].f32_f16)(fref, n, hout);
        cmp16(bf16 ? "bf16 ties" : "f16 ties", k, href, hout, n, fref, 4);
    }
    printf("%s: %zu tie/neighbour cases\n", bf16 ? "bfloat16" : "float16", n);
}

/* Named values: zeros, subnormals, the largest finite, the overflow threshold, Inf. */
static void test_named(void)
{
    static const struct {
        float f;
        uint16_t h, bf;
    } cases[] = {
        {0.0f, 0x0000, 0x0000},          {-0.0f, 0x8000, 0x8000},
        {1.0f, 0x3C00, 0x3F80},          {-2.0f, 0xC000, 0xC000},
        {0x1p-24f, 0x0001, 0x3380},      /* smallest f16 subnormal */
        {0x1p-25f, 0x0000, 0x3300},      /* half of it: tie to even (0) */
        {0x1.000002p-25f, 0x0001, 0x3300}, /* just above the tie */
        {0x1.8p-24f, 0x0002, 0x33C0},    /* 1.5 units: tie to even (2) */
        {0x1.ff8p-15f, 0x03FF, 0x3880},  /* largest f16 subnormal */
        {0x1p-14f, 0x0400, 0x3880},      /* smallest f16 normal */
        {65504.0f, 0x7BFF, 0x4780},      {65519.99f, 0x7BFF, 0x4780},
        {65520.0f, 0x7C00, 0x4780},      /* f16 overflow threshold: Inf */
        {INFINITY, 0x7C00, 0x7F80},      {-INFINITY, 0xFC00, 0xFF80},
        {0x1p-133f, 0x0000, 0x0001},     /* smallest bf16 subnormal */
        {0x1p-134f, 0x0000, 0x0000},     /* half of it: tie to even (0) */
        {0x1.fep127f, 0x7C00, 0x7F7F},   /* largest bf16 */
        {0x1.ffp127f, 0x7C00, 0x7F80},   /* bf16 overflow threshold: Inf */
        {0x1.fffffep127f, 0x7C00, 0x7F80}, /* FLT_MAX */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        for (int k = 0; k < nimpls; k++) {
            uint16_t h, b;
            impls[k].f32_f16(&cases[i].f, 1, &h);
            impls[k].f32_bf16(&cases[i].f, 1, &b);
            if (h != cases[i].h || b != cases[i].bf)
                fprintf(stderr, "named case %zu [%s] %a: f16 %04x (want %04x) bf16 %04x (want %04x)\n",
                        i, impls[k].name, (double)cases[i].f, h, cases[i].h, b, cases[i].bf);
            CHECK_EQ_INT(h, cases[i].h);
            CHECK_EQ_INT(b, cases[i].bf);
        }
    }
}

/* ---- Random floats, every class: vector = scalar --------------------------------- */

static void test_random_f32(void)
{
    for (int rep = 0; rep < 20; rep++) {
        size_t n = (size_t)rng_int(0, 4000);
        for (size_t i = 0; i < n; i++) {
            uint32_t b = (uint32_t)rng_u64();
            switch (rng_int(0, 3)) {
            case 0: break; /* any pattern: NaN payloads, subnormals, ... */
            case 1: b = (b & 0x807FFFFFu) | (uint32_t)rng_int(100, 145) << 23; break; /* f16 range */
            case 2: b &= 0x80001FFFu | (uint32_t)rng_int(100, 145) << 23; break; /* near ties */
            default: b = (b & 0xFFFF0000u) | (rng_u64() & 1 ? 0x8000u : 0x7FFFu); break;
            }
            fref[i] = bits_float(b);
        }
        for (int bf = 0; bf < 2; bf++) {
            (bf ? ina__f32_to_bf16_scalar : ina__f32_to_f16_scalar)(fref, n, href);
            for (int k = 0; k < nimpls; k++) {
                (bf ? impls[k].f32_bf16 : impls[k].f32_f16)(fref, n, hout);
                cmp16(bf ? "random f32->bf16" : "random f32->f16", k, href, hout, n, fref, 4);
            }
        }
    }
}

/* ---- double -> 16 bits: one rounding ------------------------------------------------- */

/* A double near a rounding boundary of the format (p bits), or anywhere in its range. */
static double gen_double(int bf16)
{
    const int p = bf16 ? 8 : 11, lo = bf16 ? -136 : -26, hi = bf16 ? 128 : 17;
    int e = rng_int(lo, hi);
    double sign = rng_u64() & 1 ? -1.0 : 1.0;
    /* A point of the format's grid at that binade plus half a unit: a tie. */
    int ulp_e = e - p < (bf16 ? -133 : -24) ? (bf16 ? -133 : -24) : e - p;
    double grid = ldexp((double)(rng_u64() >> 40), e - 24);
    double tie = ldexp(nearbyint(ldexp(grid, -ulp_e)) + 0.5, ulp_e);
    switch (rng_int(0, 5)) {
    case 0: return sign * tie;
    /* Just off the tie by less than float can see: a double rounding through
     * RNE float would land on the tie and round to even, wrongly. */
    case 1: return sign * tie * (1 + 0x1p-40);
    case 2: return sign * tie * (1 - 0x1p-40);
    case 3: return sign * nextafter(tie, 0);
    case 4: return sign * nextafter(tie, INFINITY);
    default: return sign * ldexp((double)(rng_u64() >> 11) * 0x1p-53 + 0.5, e);
    }
}

static void test_f64_one_rounding(void)
{
    for (int bf = 0; bf < 2; bf++) {
        size_t n = 60000, bad = 0;
        for (size_t i = 0; i < n; i++)
            dbuf[i] = gen_double(bf);
        /* specials */
        dbuf[0] = NAN, dbuf[1] = INFINITY, dbuf[2] = -INFINITY, dbuf[3] = 0.0, dbuf[4] = -0.0;
        dbuf[5] = 1e300, dbuf[6] = -1e300, dbuf[7] = 1e-300, dbuf[8] = -1e-300;
        dbuf[9] = bf ? 0x1.ffp127 : 65520.0; /* overflow thresholds: Inf */
        dbuf[10] = bf ? nextafter(0x1.ffp127, 0) : nextafter(65520.0, 0);
        dbuf[11] = bf ? 0x1p-134 * (1 + 0x1p-45) : 0x1p-25 * (1 + 0x1p-45); /* above half a subnormal */
        (bf ? ina__f64_to_bf16_scalar : ina__f64_to_f16_scalar)(dbuf, n, href);
        for (size_t i = 0; i < n; i++) {
            double want = bf ? ref_round(dbuf[i], 8, -133, BF16_MAX)
                             : ref_round(dbuf[i], 11, -24, F16_MAX);
            double got = bf ? bf16_value(href[i]) : f16_value(href[i]);
            int ok = isnan(want) ? isnan(got) : got == want && !signbit(got) == !signbit(want);
            if (!ok && bad++ < 5)
                fprintf(stderr, "%s: %a -> %a, want %a\n", bf ? "f64->bf16" : "f64->f16", dbuf[i],
                        got, want);
        }
        CHECK_EQ_INT(bad, 0);
        for (int k = 0; k < nimpls; k++)
            for (size_t off = 0; off < 9; off++) {
                size_t m = n - off - off % 8;
                (bf ? impls[k].f64_bf16 : impls[k].f64_f16)(dbuf + off, m, hout);
                cmp16(bf ? "f64->bf16" : "f64->f16", k, href + off, hout, m, dbuf + off, 8);
            }
    }
    /* Round-to-odd itself: exact values pass, inexact ones are odd and truncated. */
    CHECK_EQ_INT(ina__f64_to_f32_odd_bits(1.0), 0x3F800000);
    CHECK_EQ_INT(ina__f64_to_f32_odd_bits(1.0 + 0x1p-30), 0x3F800001);
    CHECK_EQ_INT(ina__f64_to_f32_odd_bits(1.0 + 0x1p-23 - 0x1p-30), 0x3F800001);
    CHECK_EQ_INT(ina__f64_to_f32_odd_bits(-0x1p-160), 0x80000001);
    CHECK_EQ_INT(ina__f64_to_f32_odd_bits(1e300), 0x7F7FFFFF);
    CHECK_EQ_INT(ina__f64_to_f32_odd_bits(INFINITY), 0x7F800000);
}

/* ---- Block maxima ------------------------------------------------------------------ */

static void test_absmax(void)
{
    for (int rep = 0; rep < 3000; rep++) {
        size_t n = (size_t)rng_int(0, 100);
        for (size_t i = 0; i < n; i++)
            hin[i] = (uint16_t)rng_u64();
        if (n && rng_int(0, 1)) /* mostly finite, small blocks */
            for (size_t i = 0; i < n; i++)
                hin[i] &= 0xBBFFu;
        uint32_t want16 = 0, wantbf = 0;
        for (size_t i = 0; i < n; i++) {
            uint32_t a = ina__f16_to_f32_bits(hin[i]) & 0x7FFFFFFFu;
            uint32_t b = ((uint32_t)hin[i] << 16) & 0x7FFFFFFFu;
            want16 = a > want16 ? a : want16;
            wantbf = b > wantbf ? b : wantbf;
        }
        /* The same bits, except that with NaNs it may be another NaN (widening
         * quiets a NaN, which can change the order of NaN patterns). */
        uint32_t got16 = ina__f16_absmax_f32bits(hin, n);
        if (want16 > 0x7F800000u)
            CHECK(got16 > 0x7F800000u);
        else
            CHECK_EQ_INT(got16, want16);
        CHECK_EQ_INT(ina__bf16_absmax_f32bits(hin, n), wantbf);
        /* the block exponent agrees with the float scan of the widened block */
        ina__f16_to_f32_scalar(hin, n, fbuf);
        CHECK_EQ_INT(ina__quant_exp_of_f32bits(ina__f16_absmax_f32bits(hin, n)),
                     ina__quant_block_exp(fbuf, n));
    }
}

int main(void)
{
    rng_state = 0x4A1F16ull;
    impls[nimpls++] = (struct impl){"scalar", ina__f16_to_f32_scalar, ina__bf16_to_f32_scalar,
                                    ina__f32_to_f16_scalar, ina__f32_to_bf16_scalar,
                                    ina__f64_to_f16_scalar, ina__f64_to_bf16_scalar};
    impls[nimpls++] = (struct impl){"dispatched", ina__f16_to_f32, ina__bf16_to_f32, ina__f32_to_f16,
                                    ina__f32_to_bf16, ina__f64_to_f16, ina__f64_to_bf16};
    if (ina__half_simd_supported())
        impls[nimpls++] = (struct impl){"avx2+f16c", ina__f16_to_f32_simd, ina__bf16_to_f32_simd,
                                        ina__f32_to_f16_simd, ina__f32_to_bf16_simd,
                                        ina__f64_to_f16_simd, ina__f64_to_bf16_simd};
    printf("half conversions: active %s, avx2+f16c %s\n",
           ina__half_simd_active() ? "avx2+f16c" : "scalar",
           ina__half_simd_supported() ? "supported (tested directly)" : "not available");

    test_f16_all_patterns();
    test_bf16_all_patterns();
    test_ties(0);
    test_ties(1);
    test_named();
    test_random_f32();
    test_f64_one_rounding();
    test_absmax();

    printf("%llu mismatches\n", mismatches);
    CHECK_EQ_INT(mismatches, 0);
    return check_report("test_half");
}
