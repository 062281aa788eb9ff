/* test_types.c: end to end on loopback: every dtype x op, N = 1..4, awkward counts, within each type's documented bound, with floats quantized and added as floats by the switch; disagreeing ops abort. */
#include <math.h>

#include "check.h"
#include "dtypes.h"
#include "e2e/harness.h"

static struct sw_proc sw;

/* The run's float mode: asked for (cfg.float_add), and what ina_get_info()
 * must then report (INA_FLOAT_ADD_QUANTIZED from a switch without float ops). */
static int float_add_asked, float_add_expect;

#define K 64      /* elements per packet */
#define WINDOW 2  /* smaller than the blocks of the larger counts: exponents run ahead */

static const char *const dnames[] = {"int32", "float32", "float16", "bfloat16", "float64"};
static const char *const onames[] = {"sum", "max", "min", "avg"};
static const size_t esize[] = {4, 4, 2, 2, 8};

/* ---- Data ------------------------------------------------------------------------ */

/*
 * Input element i of rank r in operation `op`, written at dst (a pure
 * function, so every rank can compute every rank's data): mixed signs,
 * magnitudes varying by block over a few binades, every pattern exact in its
 * type. With special set (16-bit and FLOAT64 only), rank 0's element 1 is
 * +Inf and rank 1's element K + 2 is NaN.
 */
static void gen(ina_dtype dt, int r, uint64_t op, size_t i, int special, void *dst)
{
    uint64_t h = h_mix(((uint64_t)r << 56) ^ (op << 40) ^ i ^ 0x7E57);
    int binade = (int)((i / K) % 5) - 2 + (int)(h >> 60) % 3; /* -2..4 */
    uint16_t u16 = 0;
    int inf = special && r == 0 && i == 1, nan = special && r == 1 && i == K + 2;
    switch (dt) {
    case INA_INT32: {
        int32_t v = (int32_t)(uint32_t)h;
        memcpy(dst, &v, 4);
        return;
    }
    case INA_FLOAT32: {
        float f = (float)ldexp((double)(h >> 40) - 0x800000, binade - 23);
        memcpy(dst, &f, 4);
        return;
    }
    case INA_FLOAT16: /* exponent field 13..19: 2^-2..2^4 */
        u16 = inf ? 0x7C00 : nan ? 0x7E00
                : (uint16_t)((h & 0x8000) | (uint64_t)(15 + binade) << 10 | (h >> 20 & 0x3FF));
        break;
    case INA_BFLOAT16:
        u16 = inf ? 0x7F80 : nan ? 0x7FC0
                : (uint16_t)((h & 0x8000) | (uint64_t)(127 + binade) << 7 | (h >> 20 & 0x7F));
        break;
    case INA_FLOAT64: {
        double d = inf ? INFINITY : nan ? NAN : ldexp((double)(h >> 11) - 0x1p52, binade - 52);
        memcpy(dst, &d, 8);
        return;
    }
    }
    memcpy(dst, &u16, 2);
}

/* The same element as a double. */
static double gen_value(ina_dtype dt, int r, uint64_t op, size_t i, int special)
{
    uint8_t one[8];
    gen(dt, r, op, i, special, one);
    return value_at(dt, one, 0);
}

/* ---- Verification ---------------------------------------------------------------- */

static int check_int(int n, ina_op opk, uint64_t op, size_t count, const int32_t *out)
{
    int bad = 0;
    for (size_t i = 0; i < count; i++) {
        uint32_t sum = 0;
        int32_t mx = INT32_MIN, mn = INT32_MAX;
        for (int r = 0; r < n; r++) {
            int32_t v = (int32_t)gen_value(INA_INT32, r, op, i, 0);
            sum += (uint32_t)v;
            mx = v > mx ? v : mx;
            mn = v < mn ? v : mn;
        }
        int32_t want = opk == INA_SUM ? (int32_t)sum
                       : opk == INA_MAX ? mx
                       : opk == INA_MIN ? mn
                                        : (int32_t)sum / n; /* AVG: truncation toward zero */
        if (out[i] != want && bad++ < 5)
            fprintf(stderr, "int32 %s n=%d count=%zu i=%zu: got %d want %d\n", onames[opk], n,
                    count, i, out[i], want);
    }
    return bad;
}

static int check_float(ina_dtype dt, int n, ina_op opk, uint64_t op, size_t count, int special,
                       const void *out)
{
    int bad = 0;
    for (size_t b0 = 0; b0 < count; b0 += K) {
        size_t len = count - b0 < K ? count - b0 : K;
        double amax = 0;
        int nonfinite = 0;
        for (int r = 0; r < n; r++)
            for (size_t j = 0; j < len; j++) {
                double x = gen_value(dt, r, op, b0 + j, special);
                nonfinite |= !isfinite(x);
                amax = fmax(amax, fabs(x));
            }
        for (size_t j = 0; j < len; j++) {
            size_t i = b0 + j;
            double hi = 0, lo = 0, got = value_at(dt, out, i);
            int has_inf = 0, has_nan = 0;
            for (int r = 0; r < n; r++) {
                double x = gen_value(dt, r, op, i, special);
                has_inf |= isinf(x);
                has_nan |= isnan(x);
                two_sum(&hi, &lo, x);
            }
            int ok;
            if (opk == INA_MAX || opk == INA_MIN) {
                /* exact (PROTOCOL.md §8.9): one of the inputs, NaN if any rank has one */
                double want = gen_value(dt, 0, op, i, special);
                for (int r = 1; r < n; r++) {
                    double x = gen_value(dt, r, op, i, special);
                    want = opk == INA_MAX ? fmax(want, x) : fmin(want, x);
                }
                ok = has_nan ? isnan(got) : got == want;
            } else if (float_add_expect && dt != INA_FLOAT64) {
                /* Floats added as floats: IEEE per element (the data has
                 * only +Inf, so an Inf sum is +Inf); the bound of ina.h. */
                double abs_sum = 0;
                for (int r = 0; r < n; r++)
                    abs_sum += fabs(gen_value(dt, r, op, i, special));
                double b = ina_float_add_error_bound(dt, n, abs_sum, hi + lo);
                if (has_nan)
                    ok = isnan(got);
                else if (has_inf)
                    ok = got == INFINITY;
                else if (opk == INA_AVG)
                    ok = fabs((got - hi / n) - lo / n) <=
                         b / n + 0x1p-52 * fabs((hi + lo) / n) + avg_error_bound(dt, 1, 0, 0);
                else
                    ok = fabs((got - hi) - lo) <= b;
            } else if (nonfinite) /* PROTOCOL.md §8: IEEE for the non-finite, NaN for the rest */
                ok = has_inf && !has_nan ? got == INFINITY : isnan(got);
            else if (opk == INA_AVG)
                ok = fabs((got - hi / n) - lo / n) <= avg_error_bound(dt, n, amax, hi + lo);
            else
                ok = fabs((got - hi) - lo) <= ina_error_bound(dt, n, amax, hi + lo);
            if (!ok && bad++ < 5)
                fprintf(stderr, "%s %s n=%d count=%zu i=%zu: got %.17g, exact sum %.17g, amax %g\n",
                        dnames[dt], onames[opk], n, count, i, got, hi + lo, amax);
        }
    }
    return bad;
}

/* ---- Workers ------------------------------------------------------------------------ */

static int join(int rank, int n, const char *job, ina_ctx **ctx)
{
    char addr[64];
    ina_config cfg;
    worker_config(&cfg, &sw, job, rank, n, addr, sizeof(addr));
    cfg.elems_per_packet = K;
    cfg.window = WINDOW;
    cfg.float_add = float_add_asked;
    int rc = ina_init(ctx, &cfg);
    if (rc) {
        fprintf(stderr, "rank %d: ina_init: %s\n", rank, ina_strerror(rc));
        return rc;
    }
    ina_info info;
    if (ina_get_info(*ctx, &info) != 0 || info.float_add != float_add_expect) {
        fprintf(stderr, "rank %d: ina_info.float_add %d, want %d\n", rank, info.float_add,
                float_add_expect);
        ina_finalize(*ctx);
        return 1;
    }
    return 0;
}

static long long ops_checked[2]; /* (ops, elements) of rank 0, for the summary; set in the child */

/* Every dtype x op, every count, once from a separate buffer and once in place. */
static int worker(int rank, int n, void *arg)
{
    (void)arg;
    char job[32];
    snprintf(job, sizeof(job), "types-n%d-f%d", n, float_add_asked);
    ina_ctx *ctx;
    if (join(rank, n, job, &ctx))
        return 1;
    const size_t counts[] = {0, 1, K - 1, K, K + 1, 3 * K + 5};
    uint8_t *in = malloc(8 * (3 * K + 5)), *out = malloc(8 * (3 * K + 5));
    int fails = 0;
    uint64_t op = 0;
    for (int dt = INA_INT32; dt <= INA_FLOAT64; dt++) {
        for (int opk = INA_SUM; opk <= INA_AVG; opk++) {
            /* MAX and MIN: every type but FLOAT64 (§8.9) */
            int supported = dt != INA_FLOAT64 || opk == INA_SUM || opk == INA_AVG;
            if (!supported) { /* refused up front; the context stays usable */
                int rc = ina_allreduce(ctx, in, out, 4, (ina_dtype)dt, (ina_op)opk);
                if (rc != INA_ERR_NOTSUP) {
                    fprintf(stderr, "rank %d: %s %s: %s, want INA_ERR_NOTSUP\n", rank,
                            dnames[dt], onames[opk], ina_err_name(rc));
                    fails++;
                }
                continue;
            }
            for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
                for (int inplace = 0; inplace < 2; inplace++) {
                    size_t count = counts[c];
                    /* Non-finite values in one pass of the float types at the largest count. */
                    int special = dt != INA_INT32 && dt != INA_FLOAT32 && inplace && c == 5;
                    op++;
                    for (size_t i = 0; i < count; i++)
                        gen((ina_dtype)dt, rank, op, i, special, in + i * esize[dt]);
                    memset(out, 0xA5, 8 * (3 * K + 5));
                    void *dst = inplace ? in : out;
                    int rc = ina_allreduce(ctx, in, dst, count, (ina_dtype)dt, (ina_op)opk);
                    int bad = rc ? 1
                              : dt == INA_INT32
                                  ? check_int(n, (ina_op)opk, op, count, dst)
                                  : check_float((ina_dtype)dt, n, (ina_op)opk, op, count, special, dst);
                    if (bad) {
                        fprintf(stderr, "rank %d: %s %s count %zu%s: rc %s, %d bad\n", rank,
                                dnames[dt], onames[opk], count, inplace ? " in place" : "",
                                ina_err_name(rc), bad);
                        fails++;
                    }
                    ops_checked[0]++;
                    ops_checked[1] += (long long)count;
                }
            }
        }
    }
    if (rank == 0)
        printf("N=%d rank 0: %lld all-reduces, %lld elements verified\n", n, ops_checked[0],
               ops_checked[1]);
    free(in);
    free(out);
    ina_finalize(ctx);
    return fails;
}

/* ---- Disagreeing ranks: abort, never a hang or a wrong result ----------------------- */

struct disagree {
    const char *name;
    ina_dtype dt[2];
    ina_op op[2];
    int float_add[2];
};
static const struct disagree *cur;

static int worker_disagree(int rank, int n, void *arg)
{
    (void)arg;
    char job[32];
    snprintf(job, sizeof(job), "mismatch-%s", cur->name);
    ina_ctx *ctx;
    float_add_asked = float_add_expect = cur->float_add[rank];
    if (join(rank, n, job, &ctx))
        return 1;
    double in[3 * K + 5] = {0}, out[3 * K + 5];
    for (size_t i = 0; i < 3 * K + 5; i++)
        gen(INA_INT32, rank, 1, i, 0, (int32_t *)in + i);
    double t0 = h_now();
    int rc = ina_allreduce(ctx, in, out, 3 * K + 5, cur->dt[rank], cur->op[rank]);
    double s = h_now() - t0;
    ina_finalize(ctx);
    if ((rc != INA_ERR_MISMATCH && rc != INA_ERR_ABORTED) || s > 5) {
        fprintf(stderr, "rank %d: %s: rc %s after %.2f s, want MISMATCH or ABORTED at once\n",
                rank, cur->name, ina_err_name(rc), s);
        return 1;
    }
    return 0;
}

/* Every dtype x op at N = 1..4, with floats added as asked; expect: what the switch grants. */
static void all_types(int asked, int expect)
{
    float_add_asked = asked;
    float_add_expect = expect;
    for (int n = 1; n <= 4; n++) {
        double t0 = h_now();
        int failed = run_workers(n, worker, NULL, 240);
        printf("float add %s%s, N=%d: %d workers failed (%.2f s)\n",
               asked ? "switch" : "quantized", asked != expect ? " (not offered)" : "", n, failed,
               h_now() - t0);
        CHECK_EQ_INT(failed, 0);
    }
}

int main(void)
{
    const char *const args[] = {"--max-elems", "16000", "--slots", "256", NULL};
    CHECK_EQ_INT(switch_start(&sw, args), 0);
    all_types(INA_FLOAT_ADD_QUANTIZED, INA_FLOAT_ADD_QUANTIZED);
    all_types(INA_FLOAT_ADD_SWITCH, INA_FLOAT_ADD_SWITCH);
    static const struct disagree cases[] = {
        {"max-min", {INA_INT32, INA_INT32}, {INA_MAX, INA_MIN}, {0, 0}}, /* wire ops differ */
        {"sum-max", {INA_INT32, INA_INT32}, {INA_SUM, INA_MAX}, {0, 0}},
        {"sum-avg", {INA_FLOAT32, INA_FLOAT32}, {INA_SUM, INA_AVG}, {0, 0}}, /* same wire op, tag differs */
        {"f16-bf16", {INA_FLOAT16, INA_BFLOAT16}, {INA_SUM, INA_SUM}, {0, 0}},
        /* one rank adds floats at the switch, the other quantizes: wire ops differ */
        {"float-add", {INA_FLOAT32, INA_FLOAT32}, {INA_SUM, INA_SUM}, {1, 0}},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        cur = &cases[c];
        int failed = run_workers(2, worker_disagree, NULL, 60);
        printf("disagreeing ranks (%s): %d workers failed\n", cur->name, failed);
        CHECK_EQ_INT(failed, 0);
    }
    CHECK_EQ_INT(switch_stop(&sw), 0);

    /* A switch without float ops (as hardware or eBPF): asked-for float
     * adds fall back to quantized sums, within the quantized bound. */
    const char *const int_args[] = {"--max-elems", "16000", "--slots", "256", "--int-ops-only",
                                    NULL};
    CHECK_EQ_INT(switch_start(&sw, int_args), 0);
    all_types(INA_FLOAT_ADD_SWITCH, INA_FLOAT_ADD_QUANTIZED);
    CHECK_EQ_INT(switch_stop(&sw), 0);
    return check_report("test_types");
}
