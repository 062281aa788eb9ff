/* test_dtype.c: every dtype and op through a simulated switch (src/lib/dtype.c), against ina_error_bound() and, for floats added as floats, ina_float_add_error_bound(). */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "common/be32.h"
#include "common/wire.h"
#include "dtypes.h"
#include "ina.h"
#include "lib/dtype.h"
#include "lib/half.h"
#include "lib/quant.h"
#include "rng.h"

#define MAXW 256
#define MAXB 600

/* ---- Random elements ------------------------------------------------------------- */

/* A finite random value of dtype dt whose binade is drawn from [elo, ehi], stored at x[i]. */
static void put_random(ina_dtype dt, void *x, size_t i, int elo, int ehi)
{
    double v = ldexp((double)(rng_u64() >> 11) * 0x1p-53, rng_int(elo, ehi));
    v = rng_u64() & 1 ? -v : v;
    switch (dt) {
    case INA_INT32: ((int32_t *)x)[i] = (int32_t)(uint32_t)rng_u64(); break;
    case INA_FLOAT32: ((float *)x)[i] = (float)v; break;
    case INA_FLOAT16: ina__f64_to_f16(&v, 1, (uint16_t *)x + i); break;
    case INA_BFLOAT16: ina__f64_to_bf16(&v, 1, (uint16_t *)x + i); break;
    case INA_FLOAT64: ((double *)x)[i] = v; break;
    }
}

/* ---- The switch, simulated -------------------------------------------------------- */

/* One block of nw ranks (x[r]: rank r's n elements) through exponent agreement,
 * encode, the switch's combine of the wire op, and decode into out. */
static void pipeline(ina_dtype dt, ina_op op, int nw, void *const *x, size_t n, void *out)
{
    int16_t e = INA_EXP_ZERO;
    for (int r = 0; r < nw; r++) {
        int16_t er = ina__block_exp(dt, x[r], n);
        e = er > e ? er : e;
    }
    uint8_t wire[4 * MAXB + 1];
    uint32_t acc[MAXB];
    const uint8_t wop = ina__wire_op(op);
    for (int r = 0; r < nw; r++) {
        ina__block_encode(dt, x[r], n, e, nw, wire + 1); /* unaligned on purpose */
        for (size_t i = 0; i < n; i++) {
            uint32_t u = ina__get32(wire + 1 + 4 * i);
            int32_t v = (int32_t)u, a = (int32_t)acc[i];
            if (r == 0 || wop == INA_OP_ADD_I32)
                acc[i] = r == 0 ? u : acc[i] + u;
            else if (wop == INA_OP_MAX_I32)
                acc[i] = (uint32_t)(v > a ? v : a);
            else
                acc[i] = (uint32_t)(v < a ? v : a);
        }
    }
    for (size_t i = 0; i < n; i++)
        ina__put32(wire + 1 + 4 * i, acc[i]);
    ina__block_decode(dt, op, wire + 1, n, e, nw, out);
}

/* The documented bound for element i: SUM from ina_error_bound(), AVG from ina.h's ina_op. */
static double bound_of(ina_dtype dt, ina_op op, int nw, double amax, double exact_sum)
{
    return op == INA_AVG ? avg_error_bound(dt, nw, amax, exact_sum)
                         : ina_error_bound(dt, nw, amax, exact_sum);
}

/* ---- Random blocks, every dtype and op ----------------------------------------------- */

static const char *dname(ina_dtype dt)
{
    static const char *names[] = {"int32", "float32", "float16", "bfloat16", "float64"};
    return (unsigned)dt < 5 ? names[dt] : "?";
}

static long long bad_elems;

static void check_block(ina_dtype dt, ina_op op, int nw, void *const *x, size_t n, const void *out)
{
    double amax = 0; /* the block's largest |x| over all ranks */
    for (int r = 0; r < nw && dt != INA_INT32; r++)
        for (size_t j = 0; j < n; j++)
            amax = fmax(amax, fabs(value_at(dt, x[r], j)));
    for (size_t i = 0; i < n; i++) {
        double got = value_at(dt, out, i);
        if (dt == INA_INT32) {
            int32_t want = 0;
            uint32_t sum = 0;
            for (int r = 0; r < nw; r++) {
                int32_t v = ((const int32_t *)x[r])[i];
                sum += (uint32_t)v;
                if (op == INA_MAX)
                    want = r == 0 || v > want ? v : want;
                else if (op == INA_MIN)
                    want = r == 0 || v < want ? v : want;
            }
            if (op == INA_SUM)
                want = (int32_t)sum;
            else if (op == INA_AVG)
                want = (int32_t)sum / nw;
            if (((const int32_t *)out)[i] != want && bad_elems++ < 10)
                fprintf(stderr, "int32 op %d N=%d i=%zu: got %d want %d\n", op, nw, i,
                        ((const int32_t *)out)[i], want);
            continue;
        }
        double hi = 0, lo = 0;
        for (int r = 0; r < nw; r++)
            two_sum(&hi, &lo, value_at(dt, x[r], i));
        double b = bound_of(dt, op, nw, amax, hi + lo);
        double want = op == INA_AVG ? (hi + lo) / nw : hi + lo;
        double wlo = op == INA_AVG ? lo / nw : lo;
        double err = fabs((got - (op == INA_AVG ? hi / nw : hi)) - wlo);
        if (!(err <= b) && bad_elems++ < 10)
            fprintf(stderr, "%s op %d N=%d n=%zu i=%zu: got %.17g want %.17g err %.3g bound %.3g\n",
                    dname(dt), op, nw, n, i, got, want, err, b);
    }
}

static uint8_t bufs[MAXW][8 * MAXB];
static uint8_t outb[8 * MAXB];

static void test_random_blocks(void)
{
    static const int nws[] = {1, 2, 3, 4, 7, 64, 256};
    static const struct {
        ina_dtype dt;
        int elo, ehi; /* binades of the data */
    } types[] = {
        {INA_INT32, 0, 0},        {INA_FLOAT32, -130, 100}, {INA_FLOAT32, -3, 3},
        {INA_FLOAT16, -26, 8},    {INA_FLOAT16, -3, 3},     {INA_BFLOAT16, -135, 100},
        {INA_BFLOAT16, -3, 3},    {INA_FLOAT64, -1000, 1000}, {INA_FLOAT64, -3, 3},
        {INA_FLOAT64, -1074, -1000},
    };
    void *x[MAXW];
    for (int r = 0; r < MAXW; r++)
        x[r] = bufs[r];
    int blocks = 0;
    for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++)
        for (size_t w = 0; w < sizeof(nws) / sizeof(nws[0]); w++)
            for (int op = INA_SUM; op <= INA_AVG; op++) {
                ina_dtype dt = types[t].dt;
                if ((op == INA_MAX || op == INA_MIN) && dt != INA_INT32)
                    continue;
                for (int rep = 0; rep < 4; rep++) {
                    size_t n = rep == 0 ? (size_t)rng_int(1, 8) : (size_t)rng_int(1, MAXB);
                    /* The binade span of one block: narrow (similar values) or wide. */
                    int lo = rng_int(types[t].elo, types[t].ehi), hi = rng_int(lo, types[t].ehi);
                    for (int r = 0; r < nws[w]; r++)
                        for (size_t i = 0; i < n; i++)
                            put_random(dt, x[r], i, lo, hi);
                    pipeline(dt, (ina_op)op, nws[w], x, n, outb);
                    check_block(dt, (ina_op)op, nws[w], x, n, outb);
                    blocks++;
                }
            }
    printf("random blocks: %d, elements out of bound: %lld\n", blocks, bad_elems);
    CHECK_EQ_INT(bad_elems, 0);
}

/* ---- Named cases ------------------------------------------------------------------------ */

/* FLOAT16: a sum beyond 65504 is Inf (IEEE overflow), its average is exact and finite. */
static void test_f16_overflow_avg(void)
{
    uint16_t a[4][3], out[3];
    void *x[4] = {a[0], a[1], a[2], a[3]};
    const double v[3] = {30000.0, -30000.0, 1.5};
    for (int r = 0; r < 4; r++)
        ina__f64_to_f16(v, 3, a[r]);
    pipeline(INA_FLOAT16, INA_SUM, 4, x, 3, out);
    CHECK_EQ_INT(out[0], 0x7C00); /* +Inf */
    CHECK_EQ_INT(out[1], 0xFC00); /* -Inf */
    CHECK(f16_value(out[2]) == 6.0);
    pipeline(INA_FLOAT16, INA_AVG, 4, x, 3, out);
    CHECK(f16_value(out[0]) == 30000.0);
    CHECK(f16_value(out[1]) == -30000.0);
    CHECK(f16_value(out[2]) == 1.5);
    /* bfloat16 near its top: the average of 3e38 over 2 ranks is back in range */
    uint16_t b[2][1], bo[1];
    void *y[2] = {b[0], b[1]};
    const double big = 3e38;
    ina__f64_to_bf16(&big, 1, b[0]);
    ina__f64_to_bf16(&big, 1, b[1]);
    pipeline(INA_BFLOAT16, INA_SUM, 2, y, 1, bo);
    CHECK_EQ_INT(bo[0], 0x7F80);
    pipeline(INA_BFLOAT16, INA_AVG, 2, y, 1, bo);
    CHECK(fabs(bf16_value(bo[0]) - bf16_value(b[0][0])) <= 0x1p-8 * 3e38);
}

/* NaN/Inf in the 16-bit types and FLOAT64: IEEE per element, the block's finite ones NaN. */
static void test_nonfinite(void)
{
    uint16_t a[2][3] = {{0x7C00, 0x3C00, 0x7E00}, {0x3C00, 0x3C00, 0x3C00}}, out[3];
    void *x[2] = {a[0], a[1]};
    pipeline(INA_FLOAT16, INA_SUM, 2, x, 3, out);
    CHECK_EQ_INT(out[0], 0x7C00);                /* +Inf + 1 = +Inf */
    CHECK((out[1] & 0x7C00) == 0x7C00 && (out[1] & 0x3FF)); /* finite, in a non-finite block: NaN */
    CHECK((out[2] & 0x7C00) == 0x7C00 && (out[2] & 0x3FF)); /* NaN */
    pipeline(INA_FLOAT16, INA_AVG, 2, x, 3, out);
    CHECK_EQ_INT(out[0], 0x7C00);
    uint16_t b[2][2] = {{0xFF80, 0x3F80}, {0x7F80, 0x3F80}}, bo[2];
    void *y[2] = {b[0], b[1]};
    pipeline(INA_BFLOAT16, INA_SUM, 2, y, 2, bo);
    CHECK((bo[0] & 0x7F80) == 0x7F80 && (bo[0] & 0x7F)); /* -Inf + Inf = NaN */
    double d[2][2] = {{-INFINITY, 1.0}, {-INFINITY, 2.0}}, dout[2];
    void *z[2] = {d[0], d[1]};
    pipeline(INA_FLOAT64, INA_SUM, 2, z, 2, dout);
    CHECK(dout[0] == -INFINITY && isnan(dout[1]));
}

/* FLOAT64 at the ends of its range: the exponent floor, and overflow. */
static void test_f64_range(void)
{
    double a[3][2] = {{1e-300, -3e-310}, {2e-300, 0.0}, {-1e-300, 4.9e-324}}, out[2];
    void *x[3] = {a[0], a[1], a[2]};
    CHECK_EQ_INT(ina__quant_block_exp_f64(a[0], 2), INA_QUANT_F64_EXP_MIN);
    double tiny = 1e-300;
    CHECK_EQ_INT(ina__quant_block_exp_f64(&tiny, 1), INA_QUANT_F64_EXP_MIN);
    double one = 1.0, big = 1.5e308;
    CHECK_EQ_INT(ina__quant_block_exp_f64(&one, 1), 1);
    CHECK_EQ_INT(ina__quant_block_exp_f64(&big, 1), 1024);
    pipeline(INA_FLOAT64, INA_SUM, 3, x, 2, out);
    /* Below 2^-961 everything sits on one grid of 2^(-960+2-31): tiny sums are 0. */
    CHECK(fabs(out[0] - 2e-300) <= ina_error_bound(INA_FLOAT64, 3, 2e-300, 2e-300));
    CHECK(out[1] == 0.0);
    double b[2][1] = {{1.5e308}, {1.5e308}}, bo[1];
    void *y[2] = {b[0], b[1]};
    pipeline(INA_FLOAT64, INA_SUM, 2, y, 1, bo);
    CHECK(bo[0] == INFINITY);
    pipeline(INA_FLOAT64, INA_AVG, 2, y, 1, bo);
    CHECK(fabs(bo[0] - 1.5e308) <= ina_error_bound(INA_FLOAT64, 2, 1.5e308, 0) / 2 + 0x1p-52 * 1.5e308);
    /* More bits than float: FLOAT64 keeps 31 - L bits of the block's scale. */
    double c[1][2] = {{1.0 + 0x1p-28, 1.0}}, co[2];
    void *z[1] = {c[0]};
    pipeline(INA_FLOAT64, INA_SUM, 1, z, 2, co);
    CHECK(co[0] == 1.0 + 0x1p-28);
}

/* INT32: AVG truncates toward zero; MAX/MIN are exact at the extremes. */
static void test_int32(void)
{
    int32_t a[2][5] = {{-7, 7, INT32_MIN, INT32_MAX, -1}, {0, 0, INT32_MAX, INT32_MAX, 0}};
    int32_t out[5];
    void *x[2] = {a[0], a[1]};
    pipeline(INA_INT32, INA_AVG, 2, x, 5, out);
    CHECK_EQ_INT(out[0], -3);
    CHECK_EQ_INT(out[1], 3);
    CHECK_EQ_INT(out[2], 0);   /* (MIN + MAX) / 2 = -1 / 2 = 0 */
    CHECK_EQ_INT(out[3], -1);  /* the sum wraps to -2: documented */
    CHECK_EQ_INT(out[4], 0);
    pipeline(INA_INT32, INA_MAX, 2, x, 5, out);
    CHECK_EQ_INT(out[0], 0);
    CHECK_EQ_INT(out[2], INT32_MAX);
    CHECK_EQ_INT(out[4], 0);
    pipeline(INA_INT32, INA_MIN, 2, x, 5, out);
    CHECK_EQ_INT(out[0], -7);
    CHECK_EQ_INT(out[2], INT32_MIN);
    CHECK_EQ_INT(out[4], -1);
}

static void test_tables(void)
{
    CHECK_EQ_INT(ina__dtype_size(INA_INT32), 4);
    CHECK_EQ_INT(ina__dtype_size(INA_FLOAT32), 4);
    CHECK_EQ_INT(ina__dtype_size(INA_FLOAT16), 2);
    CHECK_EQ_INT(ina__dtype_size(INA_BFLOAT16), 2);
    CHECK_EQ_INT(ina__dtype_size(INA_FLOAT64), 8);
    CHECK_EQ_INT(ina__dtype_size((ina_dtype)5), 0);
    CHECK_EQ_INT(ina__wire_op(INA_SUM), INA_OP_ADD_I32);
    CHECK_EQ_INT(ina__wire_op(INA_AVG), INA_OP_ADD_I32);
    CHECK_EQ_INT(ina__wire_op(INA_MAX), INA_OP_MAX_I32);
    CHECK_EQ_INT(ina__wire_op(INA_MIN), INA_OP_MIN_I32);
    /* The bound: FLOAT32 is ina_float_error_bound; the others by their table row. */
    CHECK(ina_error_bound(INA_FLOAT32, 3, 1.5, 2.0) == ina_float_error_bound(3, 1.5, 2.0));
    CHECK(ina_error_bound(INA_FLOAT16, 4, 1.5, 2.0) == 4 * 0x1p-28 + 2 * 0x1p-11 + 0x1p-25);
    CHECK(ina_error_bound(INA_BFLOAT16, 1, 0.75, 0.5) == 0x1p-31 + 0.5 * 0x1p-8 + 0x1p-134);
    CHECK(ina_error_bound(INA_FLOAT64, 2, 1.5, 3.0) == 2 * 0x1p-29);
    CHECK(ina_error_bound(INA_FLOAT64, 2, 1e-300, 0) == 2 * ldexp(1, -960 + 1 - 31));
    CHECK(ina_error_bound(INA_FLOAT16, 2, 0.0, 0.0) == 0x1p-25);
    CHECK(ina_error_bound(INA_INT32, 4, 5.0, 7.0) == 0.0);
    CHECK(isnan(ina_error_bound((ina_dtype)9, 4, 5.0, 7.0)));
    CHECK(ina_error_bound(INA_FLOAT64, 2, NAN, 1.0) == INFINITY);
    CHECK(ina_error_bound(INA_FLOAT16, 2, 1.0, INFINITY) == INFINITY);
}

/* ---- Floats added as floats (INA_OP_ADD_F32, PROTOCOL.md §8.8) ------------------------ */

/* Encode every rank, add at a simulated switch in a random arrival order
 * (first load, then binary32 adds), decode; every element within
 * ina_float_add_error_bound() (AVG: / N, plus the division's and the
 * final rounding's terms, as in ina.h). */
static void test_float_wire(void)
{
    static const int nws[] = {1, 2, 3, 5, 64, 256};
    static const struct {
        ina_dtype dt;
        int elo, ehi;
    } types[] = {{INA_FLOAT32, -140, 120}, {INA_FLOAT32, -3, 3}, {INA_FLOAT16, -26, 14},
                 {INA_BFLOAT16, -135, 120}, {INA_BFLOAT16, -3, 3}};
    static uint8_t wire[MAXW][4 * MAXB], acc_be[4 * MAXB];
    static int32_t acc[MAXB];
    void *x[MAXW];
    int order[MAXW];
    for (int r = 0; r < MAXW; r++)
        x[r] = bufs[r];
    long long bad = 0, checked = 0;
    double worst = 0;
    CHECK(ina__dtype_float_wire(INA_FLOAT32) && ina__dtype_float_wire(INA_BFLOAT16) &&
          !ina__dtype_float_wire(INA_FLOAT64) && !ina__dtype_float_wire(INA_INT32));
    for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++)
        for (size_t w = 0; w < sizeof(nws) / sizeof(nws[0]); w++)
            for (int op = INA_SUM; op <= INA_AVG; op += INA_AVG - INA_SUM)
                for (int rep = 0; rep < 4; rep++) {
                    ina_dtype dt = types[t].dt;
                    int nw = nws[w];
                    size_t n = (size_t)rng_int(1, MAXB);
                    int lo = rng_int(types[t].elo, types[t].ehi), hi = rng_int(lo, types[t].ehi);
                    for (int r = 0; r < nw; r++) {
                        for (size_t i = 0; i < n; i++)
                            put_random(dt, x[r], i, lo, hi);
                        ina__block_encode_f32wire(dt, x[r], n, wire[r]);
                        order[r] = r;
                    }
                    for (int r = nw - 1; r > 0; r--) { /* arrival order */
                        int k = rng_int(0, r), tmp = order[r];
                        order[r] = order[k];
                        order[k] = tmp;
                    }
                    ina__be32_load(acc, wire[order[0]], n);
                    for (int r = 1; r < nw; r++)
                        ina__be32_fadd(acc, wire[order[r]], n);
                    ina__be32_store(acc_be, acc, n);
                    ina__block_decode_f32wire(dt, (ina_op)op, acc_be, n, nw, outb);
                    for (size_t i = 0; i < n; i++) {
                        double shi = 0, slo = 0, abs_sum = 0;
                        for (int r = 0; r < nw; r++) {
                            double v = value_at(dt, x[r], i);
                            two_sum(&shi, &slo, v);
                            abs_sum += fabs(v);
                        }
                        double b = ina_float_add_error_bound(dt, nw, abs_sum, shi + slo);
                        double got = value_at(dt, outb, i), err;
                        if (op == INA_AVG) {
                            b = b / nw + 0x1p-52 * fabs((shi + slo) / nw) +
                                avg_error_bound(dt, 1, 0, 0);
                            err = fabs((got - shi / nw) - slo / nw);
                        } else {
                            err = fabs((got - shi) - slo);
                        }
                        if (isinf(got) && isfinite(shi)) /* a partial sum passed the top */
                            continue;
                        checked++;
                        if (b > 0 && err / b > worst)
                            worst = err / b;
                        if (!(err <= b) && bad++ < 10)
                            fprintf(stderr, "float wire %s op %d N=%d i=%zu: got %.17g exact "
                                    "%.17g err %.3g bound %.3g\n", dname(dt), op, nw, i, got,
                                    shi + slo, err, b);
                    }
                }
    printf("float wire: %lld elements, worst error/bound %.3f, out of bound %lld\n", checked,
           worst, bad);
    CHECK_EQ_INT(bad, 0);
    CHECK(checked > 10000);
    /* Non-finite values affect only their own element. */
    float a[2][3] = {{INFINITY, 1.0f, NAN}, {1.0f, 2.0f, 1.0f}}, out[3];
    ina__block_encode_f32wire(INA_FLOAT32, a[0], 3, wire[0]);
    ina__block_encode_f32wire(INA_FLOAT32, a[1], 3, wire[1]);
    ina__be32_load(acc, wire[0], 3);
    ina__be32_fadd(acc, wire[1], 3);
    ina__be32_store(acc_be, acc, 3);
    ina__block_decode_f32wire(INA_FLOAT32, INA_SUM, acc_be, 3, 2, out);
    CHECK(out[0] == INFINITY && out[1] == 3.0f && isnan(out[2]));
    /* The bound function's edges. */
    CHECK(ina_float_add_error_bound(INA_INT32, 4, 1.0, 1.0) == 0.0);
    CHECK(isnan(ina_float_add_error_bound(INA_FLOAT64, 4, 1.0, 1.0)));
    CHECK(ina_float_add_error_bound(INA_FLOAT32, 4, INFINITY, 1.0) == INFINITY);
    CHECK(ina_float_add_error_bound(INA_FLOAT32, 4, 1.0, NAN) == INFINITY);
    CHECK(ina_float_add_error_bound(INA_FLOAT32, 1, 8.0, 8.0) == 0x1p-24 * 8.0 + 0x1p-149);
}

/* ---- Float MAX and MIN (order keys, PROTOCOL.md §8.9) ---------------------------------- */

static float f32_of(uint32_t bits)
{
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* A random float32 of any class: finite of any binade, subnormal, ±0, ±Inf, or (nan_ok) a NaN. */
static float any_f32(int nan_ok)
{
    uint32_t sign = (uint32_t)(rng_u64() & 1) << 31;
    switch (rng_int(0, 9)) {
    case 0: return f32_of(sign);                                        /* ±0 */
    case 1: return f32_of(sign | 0x7F800000u);                          /* ±Inf */
    case 2: return f32_of(sign | ((uint32_t)rng_u64() & 0x007FFFFFu)); /* subnormal */
    case 3:
        if (nan_ok)
            return f32_of(sign | 0x7F800000u | (((uint32_t)rng_u64() & 0x007FFFFFu) | 1u));
        return 1.0f;
    case 4: return f32_of(sign | ((uint32_t)rng_int(126, 128) << 23)); /* ±0.5, ±1, ±2: ties */
    default: {
        uint32_t bits = (uint32_t)rng_u64() & 0x7FFFFFFFu;
        return bits > 0x7F800000u ? 1.0f : f32_of(sign | bits);
    }
    }
}

/* max/min by the floats' order, -0 below +0, NaN if any. */
static float want_ext(const float *v, int nw, ina_op op)
{
    float w = v[0];
    for (int r = 0; r < nw; r++) {
        if (isnan(v[r]))
            return NAN;
        /* ±0 compare equal: the one with the sign is the smaller */
        int less = v[r] < w || (v[r] == w && signbit(v[r]) && !signbit(w));
        int more = v[r] > w || (v[r] == w && !signbit(v[r]) && signbit(w));
        if (op == INA_MAX ? more : less)
            w = v[r];
    }
    return w;
}

static void test_float_order(void)
{
    /* The key map: its own inverse, and the floats' order (with -0 < +0). */
    long long bad = 0;
    for (int i = 0; i < 200000; i++) {
        uint32_t bits = (uint32_t)rng_u64();
        bad += ina__f32_order_key(ina__f32_order_key(bits)) != bits;
        float a = any_f32(0), b = any_f32(0);
        uint32_t ua, ub;
        memcpy(&ua, &a, 4);
        memcpy(&ub, &b, 4);
        int32_t ka = (int32_t)ina__f32_order_key(ua), kb = (int32_t)ina__f32_order_key(ub);
        if (a < b)
            bad += !(ka < kb);
        else if (a > b)
            bad += !(ka > kb);
        else
            bad += ua == ub ? ka != kb : (ka < kb) != (signbit(a) != 0); /* ±0 */
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT((int32_t)ina__f32_order_key(0x80000000u), -1); /* -0 just below +0 */
    CHECK((int32_t)ina__f32_order_key(0xFF800000u) < (int32_t)ina__f32_order_key(0xFF7FFFFFu));

    /* Blocks through the switch's int32 max/min, every float dtype: exact, NaN if any. */
    static const int nws[] = {1, 2, 3, 5, 64};
    static const ina_dtype dts[] = {INA_FLOAT32, INA_FLOAT16, INA_BFLOAT16};
    static float vals[64][MAXB];
    static uint8_t wire[4 * MAXB + 1];
    static int32_t acc[MAXB];
    long long checked = 0, nans = 0;
    bad = 0;
    for (size_t t = 0; t < 3; t++)
        for (size_t w = 0; w < sizeof(nws) / sizeof(nws[0]); w++)
            for (int op = INA_MAX; op <= INA_MIN; op++)
                for (int rep = 0; rep < 4; rep++) {
                    ina_dtype dt = dts[t];
                    int nw = nws[w];
                    size_t n = (size_t)rng_int(1, MAXB);
                    int nan_ok = rep == 3;
                    for (int r = 0; r < nw; r++) {
                        for (size_t i = 0; i < n; i++) {
                            double v = any_f32(nan_ok && rng_int(0, 15) == 0);
                            if (dt == INA_FLOAT32)
                                ((float *)bufs[r])[i] = (float)v;
                            else if (dt == INA_FLOAT16)
                                ina__f64_to_f16(&v, 1, (uint16_t *)bufs[r] + i);
                            else
                                ina__f64_to_bf16(&v, 1, (uint16_t *)bufs[r] + i);
                            vals[r][i] = (float)value_at(dt, bufs[r], i);
                        }
                        ina__block_encode_order(dt, (ina_op)op, bufs[r], n, wire + 1);
                        for (size_t i = 0; i < n; i++) {
                            int32_t k = (int32_t)ina__get32(wire + 1 + 4 * i);
                            if (r == 0 || (op == INA_MAX ? k > acc[i] : k < acc[i]))
                                acc[i] = k;
                        }
                    }
                    for (size_t i = 0; i < n; i++)
                        ina__put32(wire + 1 + 4 * i, (uint32_t)acc[i]);
                    ina__block_decode_order(dt, wire + 1, n, outb);
                    for (size_t i = 0; i < n; i++) {
                        float col[64] = {0};
                        for (int r = 0; r < nw; r++)
                            col[r] = vals[r][i];
                        float want = want_ext(col, nw, (ina_op)op);
                        float got = (float)value_at(dt, outb, i);
                        int ok = isnan(want) ? isnan(got)
                                             : got == want && signbit(got) == signbit(want);
                        nans += isnan(want) != 0;
                        checked++;
                        if (!ok && bad++ < 10)
                            fprintf(stderr, "float order %s op %d N=%d i=%zu: got %a want %a\n",
                                    dname(dt), op, nw, i, got, want);
                    }
                }
    printf("float max/min: %lld elements (%lld NaN), wrong %lld\n", checked, nans, bad);
    CHECK_EQ_INT(bad, 0);
    CHECK(checked > 10000 && nans > 100);
}

int main(void)
{
    rng_state = 0xD7E5ull;
    test_float_wire();
    test_float_order();
    test_tables();
    test_int32();
    test_f16_overflow_avg();
    test_nonfinite();
    test_f64_range();
    test_random_blocks();
    return check_report("test_dtype");
}
