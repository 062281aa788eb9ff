/* test_h16.c: the 16-bit wire (common/h16.h, lib/wire16.h): bound against exact sums for N = 1..256, ties, NaN/Inf, overflow, subnormals, trees, scalar = AVX2. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/h16.h"
#include "common/half_bits.h"
#include "dtypes.h"
#include "lib/wire16.h"
#include "rng.h"

/*
 * The oracle is independent of the code under test: element values from the
 * formats' definitions (dtypes.h), roundings by ref_round (scaling and rint
 * in double), and sums exact in a 448-bit fixed point (every value of every
 * type is a multiple of 2^-224 below 2^223).
 */

#define F16_MAX 65504.0
#define BF16_MAX 0x1.FEp127
#define MAXN 256 /* ranks */
#define MAXE 600 /* elements per block */

static const struct ina_h16_kernels *impl[2]; /* scalar, and AVX2 + F16C if any */
static int nimpl;

/* ---- Exact sums: two's complement fixed point, LSB 2^BIG_LSB -------------------------- */

#define BIG_WORDS 7
#define BIG_LSB (-224)
typedef struct {
    uint64_t w[BIG_WORDS];
} big;

/* a += m * 2^shift (neg: a -= ...), m < 2^64, 0 <= shift < 64 * (BIG_WORDS - 1). */
static void big_add_shifted(big *a, uint64_t m, int shift, int neg)
{
    uint64_t t[BIG_WORDS] = {0};
    int q = shift / 64, r = shift % 64;
    t[q] = m << r;
    if (r && q + 1 < BIG_WORDS)
        t[q + 1] = m >> (64 - r);
    if (neg) { /* two's complement of t */
        int carry = 1;
        for (int i = 0; i < BIG_WORDS; i++) {
            t[i] = ~t[i] + (uint64_t)carry;
            carry = carry && t[i] == 0;
        }
    }
    unsigned __int128 c = 0;
    for (int i = 0; i < BIG_WORDS; i++) {
        c += (unsigned __int128)a->w[i] + t[i];
        a->w[i] = (uint64_t)c;
        c >>= 64;
    }
}

static unsigned long long big_inexact;

/* a += d exactly (d finite; its last bit at or above 2^BIG_LSB, else the check fails). */
static void big_add(big *a, double d)
{
    if (d == 0)
        return;
    int e;
    double f = frexp(fabs(d), &e);
    uint64_t m = (uint64_t)ldexp(f, 53);
    int shift = e - 53 - BIG_LSB;
    while (shift < 0 && !(m & 1)) {
        m >>= 1;
        shift++;
    }
    if (shift < 0)
        big_inexact++; /* a value below the grid: never, for these types */
    else
        big_add_shifted(a, m, shift, d < 0);
}

static int big_neg(const big *a) { return (int64_t)a->w[BIG_WORDS - 1] < 0; }

static void big_abs(big *a)
{
    if (!big_neg(a))
        return;
    int carry = 1;
    for (int i = 0; i < BIG_WORDS; i++) {
        a->w[i] = ~a->w[i] + (uint64_t)carry;
        carry = carry && a->w[i] == 0;
    }
}

/* |a| as a double, rounded up (so that bounds computed from it are not too small). */
static double big_mag_up(big a)
{
    big_abs(&a);
    int top = -1;
    for (int i = BIG_WORDS - 1; i >= 0 && top < 0; i--)
        if (a.w[i])
            top = 64 * i + 63 - __builtin_clzll(a.w[i]);
    if (top < 0)
        return 0.0;
    int lo = top - 52 < 0 ? 0 : top - 52;
    uint64_t m = 0;
    int sticky = 0;
    for (int b = 0; b < 64 * BIG_WORDS; b++) {
        int bit = (int)((a.w[b / 64] >> (b % 64)) & 1);
        if (b < lo)
            sticky |= bit;
        else if (b <= top)
            m |= (uint64_t)bit << (b - lo);
    }
    double d = ldexp((double)m, lo + BIG_LSB);
    return sticky ? nextafter(d, INFINITY) : d;
}

/* |a| <= bound, with bound (a double >= 0) rounded up to the grid. */
static int big_within(big a, double bound)
{
    big b = {{0}};
    int e;
    double f = frexp(bound, &e);
    uint64_t m = (uint64_t)ldexp(f, 53);
    int shift = e - 53 - BIG_LSB;
    if (bound > 0) {
        if (shift < 0) { /* below the grid: one unit, which is more */
            m = 1;
            shift = 0;
        }
        big_add_shifted(&b, m, shift, 0);
    }
    big_abs(&a);
    for (int i = BIG_WORDS - 1; i >= 0; i--)
        if (a.w[i] != b.w[i])
            return a.w[i] < b.w[i];
    return 1;
}

/* ---- Values ----------------------------------------------------------------------------- */

/* The value of element i of a dtype buffer, from the format's definition. */
static double val(ina_dtype dt, const void *x, size_t i)
{
    return value_at(dt, x, i);
}

/* The value of a wire element w in format f. */
static double wval(enum ina_h16_fmt f, uint16_t w) { return f == INA_H16_F16 ? f16_value(w) : bf16_value(w); }

static double round_fmt(enum ina_h16_fmt f, double d)
{
    return f == INA_H16_F16 ? ref_round(d, 11, -24, F16_MAX) : ref_round(d, 8, -133, BF16_MAX);
}

static uint16_t be16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }

/* A random finite value of dt whose magnitude is below 2^lim (and, for the
 * 16-bit types, above the smallest subnormal or zero), with an exponent
 * uniform over [lo, lim). */
static double rand_exp_value(int lo, int lim)
{
    int e = rng_int(lo, lim - 1);
    double m = 1.0 + (double)(rng_u64() >> 11) * 0x1p-53; /* [1, 2) */
    double v = ldexp(m, e - 1);
    return (rng_u64() & 1) ? -v : v;
}

/* Store the value d (already of the dtype's precision or not) into element i, rounding RNE. */
static void put_val(ina_dtype dt, void *x, size_t i, double d)
{
    if (dt == INA_FLOAT32) {
        ((float *)x)[i] = (float)d;
        return;
    }
    double r = dt == INA_FLOAT16 ? ref_round(d, 11, -24, F16_MAX) : ref_round(d, 8, -133, BF16_MAX);
    /* the bits of r: through float (exact for both formats' values) */
    uint32_t b = float_bits((float)r);
    ((uint16_t *)x)[i] = dt == INA_FLOAT16 ? ina__f32_bits_to_f16(b) : (uint16_t)(b >> 16);
}

/* The exponent range of finite values of dt: [lo, hi) for rand_exp_value. */
static void exp_range(ina_dtype dt, int *lo, int *hi)
{
    switch (dt) {
    case INA_FLOAT16: *lo = -23, *hi = 17; break;    /* 2^-24 .. 65504 */
    case INA_BFLOAT16: *lo = -132, *hi = 129; break; /* 2^-133 .. 3.39e38 */
    default: *lo = -148, *hi = 129; break;           /* 2^-149 .. 3.4e38 */
    }
}

/* ---- The pipeline: ranks encode, a switch adds (any kernels), ranks decode -------------- */

struct block {
    ina_dtype dt;
    enum ina_h16_fmt f;
    int n;     /* ranks */
    size_t ne; /* elements */
    uint8_t x[MAXN][MAXE * 4]; /* each rank's input, dtype elements */
};

static struct block blk;
static uint8_t pkt[MAXN][MAXE * 2 + 4];
static int16_t pexp[MAXN];

static void encode_all(void)
{
    for (int r = 0; r < blk.n; r++)
        pexp[r] = ina__w16_encode(blk.dt, blk.f, blk.x[r], blk.ne, pkt[r]);
}

/* Sum packets `who` (count m, their exps) in the order given with kernels k:
 * result payload at out, @return its exp. */
static int16_t switch_sum(const struct ina_h16_kernels *k, uint8_t (*pk)[MAXE * 2 + 4],
                          const int16_t *ex, const int *who, int m, size_t words, uint8_t *out)
{
    static int32_t lanes[2 * (MAXE / 2 + 1)];
    int16_t sexp = INT16_MIN;
    for (int j = 0; j < m; j++) {
        int r = who[j];
        if (j == 0)
            k->load(lanes, pk[r], words, ex[r], blk.f);
        else
            k->add(lanes, pk[r], words, ex[r], blk.f);
        sexp = ex[r] > sexp ? ex[r] : sexp; /* the switch's max rule; clamped by result_exp */
    }
    int16_t s = k->result_exp(lanes, words, sexp, blk.f);
    k->store(out, lanes, words, s, blk.f);
    return s;
}

static void shuffle(int *a, int m)
{
    for (int i = m - 1; i > 0; i--) {
        int j = (int)(rng_u64() % (uint64_t)(i + 1));
        int t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

static unsigned long long bound_checks, bound_fails, ident_fails;
static double worst_ratio; /* the largest |error| / bound seen */

/* Check element i of the decoded output against the exact sum of the inputs. */
static void check_elem(ina_op op, const void *out, size_t i, int16_t s, int children,
                       const int *const *groups, const int *gsize)
{
    big exact = {{0}}, absx = {{0}};
    int finite = 1;
    for (int r = 0; r < blk.n; r++) {
        double v = val(blk.dt, blk.x[r], i);
        finite &= isfinite(v);
        if (!finite)
            return;
        big_add(&exact, v);
        big_add(&absx, fabs(v));
    }
    double partial = 0.0; /* sum over children of |their exact partial sums| (rounded up) */
    for (int c = 0; c < children; c++) {
        big p = {{0}};
        for (int j = 0; j < gsize[c]; j++)
            big_add(&p, val(blk.dt, blk.x[groups[c][j]], i));
        partial += big_mag_up(p);
    }
    partial = partial > 0 ? nextafter(partial, INFINITY) : 0.0;
    double ex_mag = big_mag_up(exact), x_mag = big_mag_up(absx);
    double bound = ina__w16_tree_error_bound(blk.dt, blk.f, op, blk.n, children, x_mag, partial,
                                             ex_mag, s);
    double r = val(blk.dt, out, i);
    bound_checks++;
    if (!isfinite(r) || !(bound >= 0)) {
        if (bound_fails++ < 5)
            fprintf(stderr, "dt %d fmt %d op %d N %d elem %zu: result %g not finite (bound %g)\n",
                    blk.dt, blk.f, op, blk.n, i, r, bound);
        return;
    }
    /* AVG: compare N * result with the exact sum, scaled back (exact: N * r
     * and exact are both on the grid). |r - S/N| <= b  <=>  |N r - S| <= N b. */
    big diff = exact;
    if (op == INA_AVG) {
        big nr = {{0}};
        for (int k = 0; k < blk.n; k++)
            big_add(&nr, r);
        for (int w = 0; w < BIG_WORDS; w++)
            diff.w[w] = ~diff.w[w];
        big_add_shifted(&diff, 1, 0, 0); /* -exact */
        for (int w = 0, c = 0; w < BIG_WORDS; w++) {
            unsigned __int128 t = (unsigned __int128)diff.w[w] + nr.w[w] + (unsigned)c;
            diff.w[w] = (uint64_t)t;
            c = (int)(t >> 64);
        }
        bound *= blk.n;
    } else {
        big_add(&diff, -r); /* exact - r */
    }
    double err = big_mag_up(diff);
    if (bound > 0 && err / bound > worst_ratio) {
        worst_ratio = err / bound;
        if (getenv("H16_WORST"))
            fprintf(stderr, "worst so far %.4f: dt %d fmt %d op %d N %d ch %d exact %a result %a err %a bound %a s %d\n",
                    worst_ratio, blk.dt, blk.f, op, blk.n, children, ex_mag, r, err, bound, s);
    }
    if (!big_within(diff, bound) && bound_fails++ < 5)
        fprintf(stderr, "dt %d fmt %d op %d N %d children %d elem %zu: |err| %.6g > bound %.6g "
                        "(exact %.17g, result %.17g, s %d)\n",
                blk.dt, blk.f, op, blk.n, children, i, err, bound, ex_mag, r, s);
}

/* Decode with the library and check every element; also that the elements
 * past the block are not written. */
static void decode_check(ina_op op, const uint8_t *res, int16_t s, int children,
                         const int *const *groups, const int *gsize)
{
    static uint8_t out[MAXE * 4 + 64];
    memset(out, 0xA5, sizeof(out));
    ina__w16_decode(blk.dt, blk.f, op, res, blk.ne, s, blk.n, out);
    size_t es = blk.dt == INA_FLOAT32 ? 4 : 2;
    int guard_ok = 1;
    for (size_t b = blk.ne * es; b < blk.ne * es + 16; b++)
        guard_ok &= out[b] == 0xA5;
    CHECK(guard_ok);
    for (size_t i = 0; i < blk.ne; i++)
        check_elem(op, out, i, s, children, groups, gsize);
}

/* One flat block: every rank straight to the root, in a random order, with
 * each kernel set (the results must be the same bits). */
static void run_flat(void)
{
    static uint8_t res[2][MAXE * 2 + 4];
    int order[MAXN];
    size_t words = ina__h16_words(blk.ne);
    encode_all();
    for (int r = 0; r < blk.n; r++)
        order[r] = r;
    shuffle(order, blk.n);
    int16_t s[2] = {0, 0};
    for (int k = 0; k < nimpl; k++)
        s[k] = switch_sum(impl[k], pkt, pexp, order, blk.n, words, res[k]);
    if (nimpl == 2 && (s[0] != s[1] || memcmp(res[0], res[1], 4 * words) != 0))
        ident_fails++;
    /* the pad element of an odd block comes back +0 */
    if (blk.ne & 1)
        CHECK_EQ_INT(be16(res[0] + 2 * blk.ne), 0);
    decode_check(INA_SUM, res[0], s[0], 0, NULL, NULL);
    decode_check(INA_AVG, res[0], s[0], 0, NULL, NULL);
}

/* One block through a tree: `children` child switches, each adding a random
 * group of ranks and sending its partial sum up (its exp s_c), and the root
 * adding those and the remaining ranks. */
static void run_tree(int children)
{
    static uint8_t up[MAXN][MAXE * 2 + 4], all[MAXN + MAXN][MAXE * 2 + 4];
    static uint8_t res[MAXE * 2 + 4];
    static int members[MAXN];
    int16_t upexp[MAXN] = {0}, allexp[MAXN + MAXN] = {0};
    const int *groups[MAXN];
    int gsize[MAXN], order[MAXN];
    size_t words = ina__h16_words(blk.ne);
    encode_all();
    for (int r = 0; r < blk.n; r++)
        members[r] = r;
    shuffle(members, blk.n);
    /* children take the first ranks of the shuffle, in groups of at least one */
    int pos = 0, direct;
    for (int c = 0; c < children; c++) {
        int left = blk.n - pos - (children - 1 - c);
        gsize[c] = c == children - 1 ? (rng_u64() & 1 ? left : rng_int(1, left)) : rng_int(1, left / 2 + 1);
        groups[c] = members + pos;
        pos += gsize[c];
    }
    direct = blk.n - pos;
    int m = 0;
    for (int c = 0; c < children; c++) {
        int grp[MAXN];
        memcpy(grp, groups[c], sizeof(int) * (size_t)gsize[c]);
        shuffle(grp, gsize[c]);
        upexp[c] = switch_sum(impl[nimpl - 1], pkt, pexp, grp, gsize[c], words, up[c]);
        memcpy(all[m], up[c], 4 * words);
        allexp[m++] = upexp[c];
    }
    for (int j = 0; j < direct; j++) {
        memcpy(all[m], pkt[members[pos + j]], 4 * words);
        allexp[m++] = pexp[members[pos + j]];
    }
    for (int j = 0; j < m; j++)
        order[j] = j;
    shuffle(order, m);
    int16_t s = switch_sum(impl[nimpl - 1], all, allexp, order, m, words, res);
    for (int c = 0; c < children; c++)
        CHECK(upexp[c] <= s);
    decode_check(INA_SUM, res, s, children, groups, gsize);
    decode_check(INA_AVG, res, s, children, groups, gsize);
}

/* Fill every rank's block: mode 0 values spread over the whole exponent
 * range, 1 around a common scale (gradients), 2 cancelling (the sums are
 * small against the values), 3 mostly small with a few large (a block whose
 * largest value dwarfs the rest). Magnitudes stay below the type's largest
 * divided by N, so no sum overflows (overflow is tested on its own). */
static void fill(int mode)
{
    int lo, hi;
    exp_range(blk.dt, &lo, &hi);
    int lg = 0;
    while ((1 << lg) < blk.n)
        lg++;
    hi -= lg + 1;
    int common = rng_int(lo + 8, hi - 1);
    for (size_t i = 0; i < blk.ne; i++) {
        double base = rand_exp_value(lo, hi);
        for (int r = 0; r < blk.n; r++) {
            double d;
            switch (mode) {
            case 0: d = rand_exp_value(lo, hi); break;
            case 1: d = rand_exp_value(common - 6, common + 1); break;
            case 2: d = (r & 1 ? -base : base) * (1.0 + ldexp((double)rng_int(-8, 8), -10)); break;
            default: d = rng_int(0, 15) == 0 ? rand_exp_value(hi - 4, hi) : rand_exp_value(lo, lo + 20); break;
            }
            if (rng_int(0, 31) == 0)
                d = rng_u64() & 1 ? 0.0 : -0.0;
            put_val(blk.dt, blk.x[r], i, d);
        }
    }
}

/* The combinations of the wire: each 16-bit dtype in its own format, FLOAT32 in both. */
static const struct {
    ina_dtype dt;
    enum ina_h16_fmt f;
} combos[4] = {
    {INA_FLOAT16, INA_H16_F16},
    {INA_BFLOAT16, INA_H16_BF16},
    {INA_FLOAT32, INA_H16_BF16},
    {INA_FLOAT32, INA_H16_F16},
};

/* The bound, for every N = 1..256, every combination, SUM and AVG, four value
 * distributions; odd and even block lengths. */
static void test_bound_every_n(void)
{
    rng_state = 0x16B0u;
    for (int n = 1; n <= MAXN; n++) {
        for (int c = 0; c < 4; c++) {
            blk.dt = combos[c].dt;
            blk.f = combos[c].f;
            blk.n = n;
            int mode = (n + c) % 4;
            blk.ne = (size_t)(n <= 8 ? 61 : n <= 64 ? 33 : 17) + (size_t)(n & 1);
            fill(mode);
            run_flat();
        }
    }
    printf("bound, N = 1..256: %llu elements checked, worst |error| / bound %.3f\n", bound_checks,
           worst_ratio);
}

/* Trees: two levels, the children's partial sums rounded to 16 bits. */
static void test_tree(void)
{
    rng_state = 0x7EE5u;
    unsigned long long before = bound_checks;
    for (int t = 0; t < 160; t++) {
        int c = t % 4;
        blk.dt = combos[c].dt;
        blk.f = combos[c].f;
        blk.n = t < 40 ? rng_int(2, 16) : rng_int(2, MAXN);
        blk.ne = (size_t)rng_int(1, 40);
        fill(t % 4);
        run_tree(rng_int(1, blk.n < 8 ? blk.n : 8));
    }
    printf("tree: %llu elements checked within the two-level bound\n", bound_checks - before);
}

/* Large blocks (many SIMD iterations and a tail) at a few N. */
static void test_large_blocks(void)
{
    rng_state = 0x1A26Eu;
    const int ns[] = {2, 3, 8, 37};
    for (size_t j = 0; j < sizeof(ns) / sizeof(ns[0]); j++)
        for (int c = 0; c < 4; c++) {
            blk.dt = combos[c].dt;
            blk.f = combos[c].f;
            blk.n = ns[j];
            blk.ne = MAXE - (size_t)(c & 1);
            fill(c);
            run_flat();
        }
}

/* ---- Rounding at the switch: every tie, every pattern ----------------------------------- */

/* For FLOAT16 and BFLOAT16 in their own format, when every binary32 add is
 * exact (small integers of the grid), the result is the exact sum rounded
 * once to the type: ties to even. Values chosen so the sum is a midpoint,
 * just above, just below, split over N ranks, for every N. */
static void test_ties_every_n(void)
{
    rng_state = 0x7135u;
    int bad = 0;
    for (int f = 0; f < 2; f++) {
        blk.dt = f ? INA_BFLOAT16 : INA_FLOAT16;
        blk.f = f ? INA_H16_BF16 : INA_H16_F16;
        const int p = f ? 8 : 11; /* significant bits */
        for (int n = 2; n <= MAXN; n++) {
            blk.n = n;
            blk.ne = 6;
            /* element i: a value of the grid at 2^e (rank 0) and small pieces that add
             * up to half an ulp (a tie), or a quarter more or less, over the ranks */
            for (size_t i = 0; i < blk.ne; i++) {
                int e = rng_int(-10, 10);
                double ulp = ldexp(1.0, e - (p - 1)), q = ulp / 4;
                double base = ldexp(1.0, e) + (double)rng_int(0, 40) * ulp;
                double offset = 2 * q + (i % 3 == 0 ? 0.0 : i % 3 == 1 ? q : -q), run = 0;
                if (rng_u64() & 1) {
                    base = -base;
                    offset = -offset;
                }
                for (int r = 1; r < n - 1; r++) { /* a walk of quarter ulps that stays small */
                    int step = run >= 3 * q ? -1 : run <= -3 * q ? 1 : rng_int(-1, 1);
                    put_val(blk.dt, blk.x[r], i, step * q);
                    run += step * q;
                }
                put_val(blk.dt, blk.x[n - 1], i, offset - run);
                put_val(blk.dt, blk.x[0], i, base);
                /* every piece is a value of the type: the sum is what was meant */
                if (val(blk.dt, blk.x[0], i) != base || val(blk.dt, blk.x[n - 1], i) != offset - run)
                    bad++;
            }
            static uint8_t res[64];
            static uint8_t out[64];
            int order[MAXN];
            for (int r = 0; r < n; r++)
                order[r] = r;
            shuffle(order, n);
            encode_all();
            for (int k = 0; k < nimpl; k++) {
                int16_t s = switch_sum(impl[k], pkt, pexp, order, n, ina__h16_words(blk.ne), res);
                ina__w16_decode(blk.dt, blk.f, INA_SUM, res, blk.ne, s, n, out);
                for (size_t i = 0; i < blk.ne; i++) {
                    double sum = 0;
                    for (int r = 0; r < n; r++)
                        sum += val(blk.dt, blk.x[r], i); /* exact: few bits */
                    if (val(blk.dt, out, i) != round_fmt(blk.f, sum))
                        bad++;
                }
            }
        }
    }
    CHECK_EQ_INT(bad, 0);
}

/* The switch's store against ref_round on the binary32 lane times 2^-s: lanes
 * over a stride of all patterns, every midpoint between neighbours of both
 * formats and the binary32 numbers next to it, at s = 0 and other s. */
static void test_store_rounding(void)
{
    static int32_t lanes[4096];
    static uint8_t outb[8192];
    size_t nl = 0;
    unsigned long long bad = 0, tried = 0;
    const int svals[] = {0, 1, -3, 126, -126};
    for (int f = 0; f < 2; f++) {
        for (int phase = 0; phase < 3; phase++) {
            uint64_t total = phase == 0 ? (1ull << 32) / 16411 : phase == 1 ? 0x7C00 : 0x7F80;
            for (uint64_t j = 0; j <= total; j++) {
                uint32_t b;
                if (phase == 0) {
                    b = (uint32_t)(j * 16411);
                } else { /* the midpoint above pattern j of format phase-1, and neighbours */
                    double lo = phase == 1 ? f16_value((uint16_t)j) : bf16_value((uint16_t)j);
                    double hi = phase == 1 ? f16_value((uint16_t)(j + 1)) : bf16_value((uint16_t)(j + 1));
                    float mid = (float)((lo + hi) / 2); /* exact: a few more bits */
                    uint32_t mb = float_bits(mid);
                    b = mb + (uint32_t)((int)(j % 3) - 1);
                }
                memcpy(&lanes[nl++], &b, 4);
                if (nl == 4096 || j == total) {
                    for (size_t si = 0; si < sizeof(svals) / sizeof(svals[0]); si++) {
                        int s = svals[si];
                        for (int k = 0; k < nimpl; k++) {
                            memset(outb, 0, sizeof(outb));
                            impl[k]->store(outb, lanes, nl / 2, (int16_t)s, (enum ina_h16_fmt)f);
                            for (size_t i = 0; i < (nl & ~(size_t)1); i++) {
                                float lv;
                                memcpy(&lv, &lanes[i], 4);
                                float scaled = (float)((double)lv * ldexp(1.0, -s)); /* fl32 */
                                uint16_t w = be16(outb + 2 * i);
                                tried++;
                                if (isnan(lv)) {
                                    bad += w != (f ? INA_H16_BF16_QNAN : INA_H16_F16_QNAN);
                                    continue;
                                }
                                double want = round_fmt((enum ina_h16_fmt)f, scaled);
                                double got = wval((enum ina_h16_fmt)f, w);
                                if (!(got == want && signbit(got) == signbit(want)) && bad++ < 5)
                                    fprintf(stderr, "store fmt %d s %d lane %08x: got %04x (%g) want %g\n",
                                            f, s, (unsigned)lanes[i], w, got, want);
                            }
                        }
                    }
                    nl = 0;
                }
            }
        }
    }
    printf("store: %llu roundings checked\n", tried);
    CHECK_EQ_INT(bad, 0);
}

/* Every 16-bit pattern: load (exp 0) then store (s 0) gives it back, a NaN as
 * the canonical NaN; load with exp e is the value times 2^e in binary32; get
 * and the decode paths agree with the definitions. */
static void test_all_patterns(void)
{
    static uint8_t wire[2 * 65536];
    static int32_t lanes[65536];
    static uint8_t back[2 * 65536];
    static uint16_t got16[65536];
    static float f32[65536];
    static double f64[65536];
    unsigned long long bad = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        wire[2 * i] = (uint8_t)(i >> 8);
        wire[2 * i + 1] = (uint8_t)i;
    }
    const int exps[] = {0, 3, -7, 126, -126, 127, -127, 32767, -32768};
    for (int f = 0; f < 2; f++) {
        const uint16_t qnan = f ? INA_H16_BF16_QNAN : INA_H16_F16_QNAN;
        for (int k = 0; k < nimpl; k++) {
            for (size_t ei = 0; ei < sizeof(exps) / sizeof(exps[0]); ei++) {
                int e = exps[ei], ec = e < -126 ? -126 : e > 126 ? 126 : e;
                impl[k]->load(lanes, wire, 32768, (int16_t)e, (enum ina_h16_fmt)f);
                for (uint32_t i = 0; i < 65536; i++) {
                    double v = wval((enum ina_h16_fmt)f, (uint16_t)i);
                    float lv;
                    memcpy(&lv, &lanes[i], 4);
                    float want = (float)(v * ldexp(1.0, ec)); /* fl32 of the exact product */
                    if (isnan(v) ? !isnan(lv) : float_bits(lv) != float_bits(want))
                        bad++;
                }
            }
            impl[k]->load(lanes, wire, 32768, 0, (enum ina_h16_fmt)f);
            impl[k]->store(back, lanes, 32768, 0, (enum ina_h16_fmt)f);
            impl[k]->get(wire, 65536, (enum ina_h16_fmt)f, got16);
            for (uint32_t i = 0; i < 65536; i++) {
                int nan = isnan(wval((enum ina_h16_fmt)f, (uint16_t)i));
                uint16_t want = nan ? qnan : (uint16_t)i;
                bad += be16(back + 2 * i) != want;
                bad += got16[i] != want;
            }
            for (int s = -140; s <= 140; s += 13) {
                impl[k]->to_f32(wire, 65536, (int16_t)s, (enum ina_h16_fmt)f, f32);
                impl[k]->to_f64(wire, 65536, (int16_t)s, s & 1 ? 3 : 1, (enum ina_h16_fmt)f, f64);
                for (uint32_t i = 0; i < 65536; i++) {
                    double v = wval((enum ina_h16_fmt)f, (uint16_t)i);
                    if (isnan(v)) {
                        bad += float_bits(f32[i]) != 0x7FC00000u;
                        uint64_t db;
                        memcpy(&db, &f64[i], 8);
                        bad += db != 0x7FF8000000000000ull;
                        continue;
                    }
                    float w32 = (float)ldexp(v, s);
                    double w64 = ldexp(v / (s & 1 ? 3 : 1), s);
                    bad += float_bits(f32[i]) != float_bits(w32);
                    bad += memcmp(&f64[i], &w64, 8) != 0;
                }
            }
        }
    }
    CHECK_EQ_INT(bad, 0);
}

/* The RESULT's exp: the smallest s >= the round's exp at which no finite lane
 * overflows binary16 (bfloat16: the round's exp), by trying s upward. */
static void test_result_exp(void)
{
    rng_state = 0x5E5u;
    static int32_t lanes[300];
    static uint8_t outb[600];
    int bad = 0;
    for (int t = 0; t < 3000; t++) {
        size_t words = (size_t)rng_int(0, 150);
        int big_e = rng_int(-140, 130);
        for (size_t i = 0; i < 2 * words; i++) {
            uint32_t b;
            switch (rng_int(0, 5)) {
            case 0: b = (uint32_t)rng_u64(); break; /* anything: NaN, Inf, subnormal */
            case 1: b = 0x7F800000u | (uint32_t)(rng_u64() & 0x807FFFFFu); break;
            default: b = float_bits((float)rand_exp_value(big_e - 30, big_e + 1)); break;
            }
            memcpy(&lanes[i], &b, 4);
        }
        int16_t sexp = (int16_t)rng_int(-300, 300);
        for (int f = 0; f < 2; f++) {
            int16_t got = impl[0]->result_exp(lanes, words, sexp, (enum ina_h16_fmt)f);
            for (int k = 1; k < nimpl; k++)
                bad += impl[k]->result_exp(lanes, words, sexp, (enum ina_h16_fmt)f) != got;
            int lo = sexp < -126 ? -126 : sexp > 126 ? 126 : sexp, want = lo;
            if (f == 0) {
                for (want = lo;; want++) { /* the first s at which every finite lane fits */
                    int fits = 1;
                    for (size_t i = 0; i < 2 * words && fits; i++) {
                        float lv;
                        memcpy(&lv, &lanes[i], 4);
                        fits = !isfinite(lv) || fabs((double)lv * ldexp(1.0, -want)) < 65520.0;
                    }
                    if (fits)
                        break;
                }
            }
            if (got != want && bad++ < 5)
                fprintf(stderr, "result_exp fmt %d words %zu sexp %d: got %d want %d\n", f, words,
                        sexp, got, want);
            /* and at that s the store overflows nothing that was finite */
            impl[0]->store(outb, lanes, words, got, (enum ina_h16_fmt)f);
            for (size_t i = 0; i < 2 * words; i++) {
                float lv;
                memcpy(&lv, &lanes[i], 4);
                double w = wval((enum ina_h16_fmt)f, be16(outb + 2 * i));
                if (f == 0 && isfinite(lv) && !isfinite(w))
                    bad++;
            }
        }
    }
    CHECK_EQ_INT(bad, 0);
}

/* ---- Special values, overflow, subnormals, the exp clamp, padding ----------------------- */

/* One element per rank, given as doubles (rounded to the dtype), summed; the
 * decoded SUM and AVG of element 0. */
static int16_t sum1(ina_dtype dt, enum ina_h16_fmt f, int n, const double *v, double *sum,
                    double *avg, uint16_t *wire_res)
{
    static uint8_t res[8];
    static uint8_t out[8];
    int order[MAXN];
    blk.dt = dt;
    blk.f = f;
    blk.n = n;
    blk.ne = 1;
    for (int r = 0; r < n; r++) {
        put_val(dt, blk.x[r], 0, v[r]);
        order[r] = r;
    }
    encode_all();
    int16_t s = switch_sum(ina__h16_active(), pkt, pexp, order, n, 1, res);
    if (wire_res)
        *wire_res = be16(res);
    ina__w16_decode(dt, f, INA_SUM, res, 1, s, n, out);
    *sum = val(dt, out, 0);
    ina__w16_decode(dt, f, INA_AVG, res, 1, s, n, out);
    *avg = val(dt, out, 0);
    return s;
}

static int same(double a, double b) { return (isnan(a) && isnan(b)) || (a == b && signbit(a) == signbit(b)); }

static void test_specials(void)
{
    double s, a;
    uint16_t w;
    for (int c = 0; c < 4; c++) {
        ina_dtype dt = combos[c].dt;
        enum ina_h16_fmt f = combos[c].f;
        const double in1[3] = {1.5, NAN, -2.0};
        sum1(dt, f, 3, in1, &s, &a, &w);
        CHECK(isnan(s) && isnan(a));
        CHECK_EQ_INT(w, f == INA_H16_F16 ? INA_H16_F16_QNAN : INA_H16_BF16_QNAN);
        const double in2[3] = {INFINITY, 5.0, -7.0};
        sum1(dt, f, 3, in2, &s, &a, NULL);
        CHECK(s == INFINITY && a == INFINITY);
        const double in3[2] = {-INFINITY, 1.0};
        sum1(dt, f, 2, in3, &s, &a, NULL);
        CHECK(s == -INFINITY && a == -INFINITY);
        const double in4[4] = {INFINITY, 1.0, -INFINITY, 2.0}; /* +Inf meets -Inf */
        sum1(dt, f, 4, in4, &s, &a, &w);
        CHECK(isnan(s) && isnan(a));
        CHECK_EQ_INT(w, f == INA_H16_F16 ? INA_H16_F16_QNAN : INA_H16_BF16_QNAN);
        /* a finite element beside a non-finite one keeps its value (no block codes) */
        blk.dt = dt;
        blk.f = f;
        const double in5[2] = {-0.0, -0.0}; /* signed zeros: IEEE */
        sum1(dt, f, 2, in5, &s, &a, NULL);
        CHECK(same(s, -0.0) && same(a, -0.0));
        const double in6[2] = {0.0, -0.0};
        sum1(dt, f, 2, in6, &s, &a, NULL);
        CHECK(same(s, 0.0));
    }
    /* one block with NaN, Inf and finite elements side by side */
    static uint8_t res[16], out[32];
    int order[2] = {1, 0};
    blk.dt = INA_FLOAT16;
    blk.f = INA_H16_F16;
    blk.n = 2;
    blk.ne = 4;
    const double r0[4] = {NAN, 1.0, INFINITY, 3.0}, r1[4] = {2.0, 0.25, 1.0, -3.0};
    for (int i = 0; i < 4; i++) {
        put_val(INA_FLOAT16, blk.x[0], (size_t)i, r0[i]);
        put_val(INA_FLOAT16, blk.x[1], (size_t)i, r1[i]);
    }
    encode_all();
    int16_t e = switch_sum(ina__h16_active(), pkt, pexp, order, 2, 2, res);
    ina__w16_decode(INA_FLOAT16, INA_H16_F16, INA_SUM, res, 4, e, 2, out);
    CHECK(isnan(val(INA_FLOAT16, out, 0)));
    CHECK(val(INA_FLOAT16, out, 1) == 1.25);
    CHECK(val(INA_FLOAT16, out, 2) == INFINITY);
    CHECK(same(val(INA_FLOAT16, out, 3), 0.0));
}

static void test_overflow(void)
{
    double s, a;
    uint16_t w;
    /* FLOAT16: 65504 + 15 rounds down (s = 0); 65504 + 16 = 65520 is the
     * overflow threshold: Inf; the AVG of sums beyond 65504 stays finite. */
    const double t1[2] = {65504.0, 16.0};
    sum1(INA_FLOAT16, INA_H16_F16, 2, t1, &s, &a, &w);
    CHECK(s == INFINITY);
    CHECK(a == 32768.0); /* 65520 / 2 = 32760 is a tie between 32752 and 32768: even */
    const double t2[3] = {65504.0, 8.0, 7.0}; /* 65519: the largest sum that rounds to 65504 */
    sum1(INA_FLOAT16, INA_H16_F16, 3, t2, &s, &a, &w);
    CHECK(s == 65504.0);
    CHECK_EQ_INT(w, 0x7BFF); /* s = 0: the wire holds FLOAT16's own value */
    const double t3[4] = {30000.0, 30000.0, 30000.0, 30000.0}; /* §8.4's example */
    sum1(INA_FLOAT16, INA_H16_F16, 4, t3, &s, &a, NULL);
    CHECK(s == INFINITY && a == 30000.0);
    const double t4[2] = {-65504.0, -65504.0};
    sum1(INA_FLOAT16, INA_H16_F16, 2, t4, &s, &a, NULL);
    CHECK(s == -INFINITY && a == -65504.0);
    /* BFLOAT16 and FLOAT32 on bfloat16: the binary32 sum overflows (as op 4's) */
    const double t5[2] = {BF16_MAX, BF16_MAX};
    sum1(INA_BFLOAT16, INA_H16_BF16, 2, t5, &s, &a, NULL);
    CHECK(s == INFINITY && a == INFINITY);
    /* a sum just below BFLOAT16's threshold 2^128 (1 - 2^-9) rounds to its largest */
    const double t6[2] = {0x1.FEp127, 0x1p118}; /* 0x1.FE8p127, below 0x1.FFp127 */
    sum1(INA_BFLOAT16, INA_H16_BF16, 2, t6, &s, &a, NULL);
    CHECK(s == BF16_MAX);
    /* FLOAT32 on binary16: the block scale keeps binary32's range */
    const double t7[3] = {3e38, -2e38, 1e38}; /* in this order no binary32 partial sum overflows */
    int16_t e7 = sum1(INA_FLOAT32, INA_H16_F16, 3, t7, &s, &a, NULL);
    double x7 = (double)(float)3e38 - (double)(float)2e38 + (double)(float)1e38; /* exact */
    double ab7 = (double)(float)3e38 + (double)(float)2e38 + (double)(float)1e38;
    CHECK_EQ_INT(e7, 128 - 15); /* the ranks' largest scale (3e38 < 2^128) */
    CHECK(fabs(s - x7) <= ina__w16_error_bound(INA_FLOAT32, INA_H16_F16, INA_SUM, 3, ab7, x7, e7));
    /* FLOAT32 on bfloat16: a value that rounds past bfloat16's largest is Inf */
    const double t8[2] = {0x1.FFp127, 1.0};
    sum1(INA_FLOAT32, INA_H16_BF16, 2, t8, &s, &a, NULL);
    CHECK(s == INFINITY);
}

static void test_subnormals(void)
{
    double s, a;
    const double t1[2] = {0x1p-24, 0x1p-24}; /* FLOAT16's smallest, twice: exact */
    sum1(INA_FLOAT16, INA_H16_F16, 2, t1, &s, &a, NULL);
    CHECK(s == 0x1p-23 && a == 0x1p-24);
    const double t2[3] = {0x1p-24, 0x1p-24, 0x1p-24}; /* AVG 2^-24 of three, exact */
    sum1(INA_FLOAT16, INA_H16_F16, 3, t2, &s, &a, NULL);
    CHECK(s == 3 * 0x1p-24 && a == 0x1p-24);
    const double t3[2] = {0x1p-24, -0x1p-24};
    sum1(INA_FLOAT16, INA_H16_F16, 2, t3, &s, &a, NULL);
    CHECK(same(s, 0.0));
    const double t4[2] = {0x1p-133, 0x1p-133}; /* BFLOAT16's smallest */
    sum1(INA_BFLOAT16, INA_H16_BF16, 2, t4, &s, &a, NULL);
    CHECK(s == 0x1p-132 && a == 0x1p-133);
    const double t5[2] = {0x1p-14, -0x1p-24}; /* normal minus subnormal: a subnormal sum */
    sum1(INA_FLOAT16, INA_H16_F16, 2, t5, &s, &a, NULL);
    CHECK(s == 0x1p-14 - 0x1p-24);
    /* FLOAT32 on binary16, a tiny block: the scale floors at -126 */
    const double t6[2] = {0x1p-140, 0x1.8p-141};
    sum1(INA_FLOAT32, INA_H16_F16, 2, t6, &s, &a, NULL);
    CHECK(s == 0x1.Cp-140); /* 2^-140 + 1.5 * 2^-141: exact on both grids */
}

/* The binary32 sum follows arrival order: 32768 + 2^-24 - 32768 loses the
 * 2^-24 that another order keeps. Both results are within the bound, and the
 * first only thanks to its accumulation term (N-1) 2^-24 X. */
static void test_arrival_order(void)
{
    static uint8_t res[8], out[8];
    const int orders[2][3] = {{0, 1, 2}, {0, 2, 1}};
    const double want[2] = {0.0, 0x1p-24};
    blk.dt = INA_FLOAT16;
    blk.f = INA_H16_F16;
    blk.n = 3;
    blk.ne = 1;
    put_val(INA_FLOAT16, blk.x[0], 0, 32768.0);
    put_val(INA_FLOAT16, blk.x[1], 0, 0x1p-24);
    put_val(INA_FLOAT16, blk.x[2], 0, -32768.0);
    encode_all();
    for (int o = 0; o < 2; o++)
        for (int k = 0; k < nimpl; k++) {
            int16_t s = switch_sum(impl[k], pkt, pexp, orders[o], 3, 1, res);
            ina__w16_decode(INA_FLOAT16, INA_H16_F16, INA_SUM, res, 1, s, 3, out);
            double r = val(INA_FLOAT16, out, 0);
            CHECK(same(r, want[o]));
            double b = ina__w16_error_bound(INA_FLOAT16, INA_H16_F16, INA_SUM, 3, 65536.0 + 0x1p-24,
                                            0x1p-24, s);
            CHECK_LE_DBL(fabs(r - 0x1p-24), b);
        }
    CHECK(0x1p-24 > 0x1p-11 * 0x1p-24 + 0x1p-25 + 0x1p-150); /* rho |S*| + tau alone would not do */
}

/* The block scale of FLOAT32 on binary16: the largest finite value decides;
 * the value just below 2^E (which rounds up to 2^15 on the wire) and the
 * clamp at -126. */
static void test_f32_scale(void)
{
    float x[5] = {1.0f, -3.0f, NAN, INFINITY, 0.5f};
    for (int k = 0; k < nimpl; k++) {
        CHECK_EQ_INT(impl[k]->f32_scale(x, 5), 2 - 15);              /* 3 < 2^2 */
        CHECK_EQ_INT(impl[k]->f32_scale(x + 2, 2), 0);               /* nothing finite */
        float z[3] = {0.0f, -0.0f, 0.0f};
        CHECK_EQ_INT(impl[k]->f32_scale(z, 3), 0);
        float t[1] = {0x1p-149f};
        CHECK_EQ_INT(impl[k]->f32_scale(t, 1), -126);
        float m[1] = {0x1.FFFFFEp127f};
        CHECK_EQ_INT(impl[k]->f32_scale(m, 1), 128 - 15);
        /* just below 2^4: scale -11, RNE(x * 2^11) = 2^15 exactly on the wire */
        float y[1] = {0x1.FFFFFEp3f};
        uint8_t o[4];
        CHECK_EQ_INT(impl[k]->f32_scale(y, 1), 4 - 15);
        impl[k]->encode_f32(y, 1, (int16_t)(4 - 15), INA_H16_F16, o);
        CHECK_EQ_INT(be16(o), 0x7800); /* 32768 */
        CHECK_EQ_INT(be16(o + 2), 0);  /* the pad */
    }
    /* against frexp on random blocks */
    rng_state = 0x5CA1Eu;
    int bad = 0;
    for (int t = 0; t < 2000; t++) {
        float b[40];
        size_t n = (size_t)rng_int(0, 40);
        double mx = 0;
        for (size_t i = 0; i < n; i++) {
            b[i] = rng_int(0, 9) == 0 ? (rng_u64() & 1 ? NAN : -INFINITY)
                                      : (float)rand_exp_value(-148, 129);
            if (isfinite(b[i]) && fabs(b[i]) > mx)
                mx = fabs(b[i]);
        }
        int want = 0;
        if (mx > 0) {
            int e;
            (void)frexp(mx, &e);
            want = e - 15 < -126 ? -126 : e - 15;
        }
        for (int k = 0; k < nimpl; k++)
            bad += impl[k]->f32_scale(b, n) != want;
    }
    CHECK_EQ_INT(bad, 0);
}

/* Encode of FLOAT32 against ref_round of fl32(x * 2^-e), ties included. */
static void test_encode_f32(void)
{
    rng_state = 0xE4C0u;
    static float x[1000];
    static uint8_t o[2][2002];
    unsigned long long bad = 0;
    for (int t = 0; t < 400; t++) {
        size_t n = (size_t)rng_int(1, 1000);
        int f = t & 1;
        int e = t % 5 == 0 ? 0 : rng_int(-140, 140); /* the kernel clamps */
        int ec = e < -126 ? -126 : e > 126 ? 126 : e;
        for (size_t i = 0; i < n; i++) {
            int kind = rng_int(0, 9);
            if (kind == 0) { /* a tie of the format at the scale */
                double q = f ? 0x1p-8 : 0x1p-11;
                x[i] = (float)ldexp((1.0 + (double)rng_int(0, 100) * 2 * q + q) *
                                        (rng_u64() & 1 ? 1 : -1),
                                    rng_int(-10, 10) + ec);
            } else if (kind == 1) {
                x[i] = bits_float((uint32_t)rng_u64());
            } else {
                x[i] = (float)rand_exp_value(ec - 30, ec + 16);
            }
        }
        for (int k = 0; k < nimpl; k++) {
            memset(o[k], 0xEE, sizeof(o[k]));
            impl[k]->encode_f32(x, n, (int16_t)e, (enum ina_h16_fmt)f, o[k]);
        }
        if (nimpl == 2 && memcmp(o[0], o[1], 2 * (n + (n & 1))) != 0)
            bad++;
        for (size_t i = 0; i < n; i++) {
            float p = (float)((double)x[i] * ldexp(1.0, -ec));
            double w = wval((enum ina_h16_fmt)f, be16(o[0] + 2 * i));
            if (isnan(x[i]) ? !isnan(w) : !same(w, round_fmt((enum ina_h16_fmt)f, p)))
                bad++;
        }
        if (n & 1)
            bad += be16(o[0] + 2 * n) != 0;
        bad += o[0][2 * (n + (n & 1))] != 0xEE; /* nothing written past the payload */
    }
    CHECK_EQ_INT(bad, 0);
}

/* ---- AVX2 = scalar on anything: random lanes, NaN payloads, every length, unaligned ---- */

static void test_simd_identity(void)
{
    if (nimpl < 2) {
        printf("simd identity: no AVX2 + F16C here, scalar only\n");
        return;
    }
    rng_state = 0x51D0u;
    static uint8_t wire[2 * 260 + 8];
    static int32_t va[260], vb[260];
    static uint8_t oa[600], ob[600];
    static uint16_t ga[260], gb[260];
    static float fa[260], fb[260];
    static double da[260], db[260];
    unsigned long long bad = 0;
    for (int t = 0; t < 4000; t++) {
        size_t words = (size_t)rng_int(0, 128), n = 2 * words - (words && (t & 1));
        size_t off = (size_t)rng_int(0, 3);
        uint8_t *p = wire + off;
        for (size_t i = 0; i < 4 * words; i++)
            p[i] = (uint8_t)rng_u64();
        enum ina_h16_fmt f = (enum ina_h16_fmt)(t & 1);
        int16_t e1 = (int16_t)(t % 3 == 0 ? 0 : rng_int(-200, 200));
        int16_t e2 = (int16_t)(t % 4 == 0 ? 0 : rng_int(-200, 200));
        impl[0]->load(va, p, words, e1, f);
        impl[1]->load(vb, p, words, e1, f);
        bad += memcmp(va, vb, 8 * words) != 0;
        for (size_t i = 0; i < 4 * words; i++)
            p[i] = (uint8_t)rng_u64();
        impl[0]->add(va, p, words, e2, f);
        impl[1]->add(vb, p, words, e2, f);
        bad += memcmp(va, vb, 8 * words) != 0;
        int16_t sexp = (int16_t)rng_int(-300, 300);
        int16_t s0 = impl[0]->result_exp(va, words, sexp, f), s1 = impl[1]->result_exp(va, words, sexp, f);
        bad += s0 != s1;
        impl[0]->store(oa + off, va, words, s0, f);
        impl[1]->store(ob + off, va, words, s0, f);
        bad += memcmp(oa + off, ob + off, 4 * words) != 0;
        impl[0]->get(p, n, f, ga);
        impl[1]->get(p, n, f, gb);
        bad += memcmp(ga, gb, 2 * n) != 0;
        impl[0]->put(ga, n, oa);
        impl[1]->put(ga, n, ob);
        bad += memcmp(oa, ob, 2 * n + 2 * (n & 1)) != 0;
        int16_t s = (int16_t)(t % 5 == 0 ? 0 : rng_int(-1000, 1000));
        int div = t % 3 == 0 ? 1 : rng_int(1, 256);
        impl[0]->to_f32(p, n, s, f, fa);
        impl[1]->to_f32(p, n, s, f, fb);
        bad += memcmp(fa, fb, 4 * n) != 0;
        impl[0]->to_f64(p, n, s, div, f, da);
        impl[1]->to_f64(p, n, s, div, f, db);
        bad += memcmp(da, db, 8 * n) != 0;
        float *xf = (float *)(void *)va; /* random patterns as floats */
        bad += impl[0]->f32_scale(xf, n) != impl[1]->f32_scale(xf, n);
        impl[0]->encode_f32(xf, n, e1, f, oa);
        impl[1]->encode_f32(xf, n, e1, f, ob);
        bad += memcmp(oa, ob, 2 * n + 2 * (n & 1)) != 0;
    }
    printf("simd identity: %s\n", bad ? "MISMATCH" : "the same bits");
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(ident_fails, 0);
}

/* The switch clamps a packet's exp to -126..126: exps beyond load like the edges. */
static void test_exp_clamp(void)
{
    uint8_t p[4] = {0x3C, 0x00, 0xBC, 0x00}; /* 1.0, -1.0 as binary16 */
    int32_t a[2], b[2];
    const int16_t pairs[][2] = {{127, 126}, {32767, 126}, {-127, -126}, {INT16_MIN, -126}};
    for (int k = 0; k < nimpl; k++)
        for (int j = 0; j < 4; j++) {
            impl[k]->load(a, p, 1, pairs[j][0], INA_H16_F16);
            impl[k]->load(b, p, 1, pairs[j][1], INA_H16_F16);
            CHECK(memcmp(a, b, 8) == 0);
            CHECK_EQ_INT(impl[k]->result_exp(a, 1, pairs[j][0], INA_H16_BF16), pairs[j][1]);
        }
}

int main(void)
{
    impl[nimpl++] = &ina__h16_scalar;
    if (ina__h16_simd())
        impl[nimpl++] = ina__h16_simd();
    printf("16-bit wire kernels: active %s, avx2+f16c %s\n",
           ina__h16_active() == &ina__h16_scalar ? "scalar" : "avx2+f16c",
           nimpl == 2 ? "available (both tested)" : "not available");
    test_all_patterns();
    test_store_rounding();
    test_result_exp();
    test_f32_scale();
    test_encode_f32();
    test_exp_clamp();
    test_simd_identity();
    test_specials();
    test_overflow();
    test_subnormals();
    test_arrival_order();
    test_ties_every_n();
    test_bound_every_n();
    test_large_blocks();
    test_tree();
    printf("bound: %llu elements in all, worst |error| / bound %.3f\n", bound_checks, worst_ratio);
    CHECK_EQ_INT(bound_fails, 0);
    CHECK_EQ_INT(ident_fails, 0);
    CHECK_EQ_INT(big_inexact, 0);
    return check_report("test_h16");
}
