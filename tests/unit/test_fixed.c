/* test_fixed.c: fixed-point sums (wire op 5, PROTOCOL.md §13): encode rounding and range, the switch's sticky invalid add, decode with SUM and AVG, and the stated error bound. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "common/be32.h"
#include "common/wire.h"
#include "lib/fixed.h"

static int32_t q_at(const uint8_t *p, size_t i) { return (int32_t)ina__get32(p + 4 * i); }

/* Rounding to nearest, ties to even; out of range, NaN and Inf invalid (INT32_MIN). */
static void test_encode(void)
{
    const float x[] = {0.0f, 1.0f, -1.0f, 0x1p-24f, 0x3p-24f, -0x3p-24f, 0x1p-30f,
                       255.99999f, 256.0f, -256.0f, NAN, INFINITY, -INFINITY, 0x1.fffffep+7f};
    const int32_t want[] = {0, 1 << 23, -(1 << 23), 0 /* 0.5 ties to 0 */, 2 /* 1.5 -> 2 */,
                            -2, 0, (int32_t)nearbyint((double)255.99999f * 8388608.0),
                            INA_FIX_INVALID /* 2^31: one past */, INA_FIX_INVALID,
                            INA_FIX_INVALID, INA_FIX_INVALID, INA_FIX_INVALID, 0x7fffff80};
    const size_t n = sizeof(x) / sizeof(x[0]);
    uint8_t out[4 * 16];
    CHECK_EQ_INT(ina__fixed_encode(INA_FLOAT32, x, n, 23, out), 5);
    for (size_t i = 0; i < n; i++)
        if (q_at(out, i) != want[i]) {
            fprintf(stderr, "encode %zu: %.9g -> %d, want %d\n", i, (double)x[i], q_at(out, i),
                    want[i]);
            CHECK(0);
        }
    /* float64, and the widest scale: |x| < 2 */
    const double d[] = {1.9999999990686774, -2.0, 0.5};
    CHECK_EQ_INT(ina__fixed_encode(INA_FLOAT64, d, 3, 30, out), 1);
    CHECK_EQ_INT(q_at(out, 0), INT32_MAX);
    CHECK_EQ_INT(q_at(out, 1), INA_FIX_INVALID);
    CHECK_EQ_INT(q_at(out, 2), 1 << 29);
}

/* The switch's add: exact in range, invalid past +-(2^31 - 1) and sticky after. */
static void test_switch_add(void)
{
    int32_t v[4] = {1000, INT32_MAX - 5, -INT32_MAX + 1, INA_FIX_INVALID};
    uint8_t p[16];
    const int32_t add[4] = {-2500, 6, -1, 7};
    for (int i = 0; i < 4; i++)
        ina__put32(p + 4 * i, (uint32_t)add[i]);
    ina__be32_fixadd(v, p, 4);
    CHECK_EQ_INT(v[0], -1500);
    CHECK_EQ_INT(v[1], INA_FIX_INVALID); /* 2^31 overflows */
    CHECK_EQ_INT(v[2], -INT32_MAX);      /* -(2^31 - 1) is still valid */
    CHECK_EQ_INT(v[3], INA_FIX_INVALID); /* stays invalid whatever is added */
    /* an invalid contribution makes the sum invalid */
    int32_t w = 5;
    ina__put32(p, (uint32_t)INA_FIX_INVALID);
    ina__be32_fixadd(&w, p, 1);
    CHECK_EQ_INT(w, INA_FIX_INVALID);
}

/* Decode: SUM exact then one rounding, AVG divided first; invalid -> NaN, counted. */
static void test_decode(void)
{
    uint8_t in[16];
    const int32_t q[4] = {3 << 20 /* 0.375 at 23 bits */, -(1 << 23), INA_FIX_INVALID, 7};
    for (int i = 0; i < 4; i++)
        ina__put32(in + 4 * i, (uint32_t)q[i]);
    float f[4];
    CHECK_EQ_INT(ina__fixed_decode(INA_FLOAT32, INA_SUM, in, 4, 23, 4, f), 1);
    CHECK(f[0] == 0.375f && f[1] == -1.0f && isnan(f[2]) && f[3] == 0x7p-23f);
    double a[4];
    CHECK_EQ_INT(ina__fixed_decode(INA_FLOAT64, INA_AVG, in, 4, 23, 4, a), 1);
    CHECK(a[0] == 0.375 / 4 && a[1] == -0.25 && isnan(a[2]) && a[3] == 7.0 / 4 * 0x1p-23);
}

/* Random sums of N = 1..8 ranks through encode, the switch's add and decode
 * stay within ina_fixed_error_bound of the exact sum, for every scale. */
static void test_bound(void)
{
    uint64_t s = 99;
    int bad = 0;
    for (int bits = 1; bits <= 30; bits++)
        for (int n = 1; n <= 8; n++) {
            float x[8][32];
            int32_t acc[32];
            uint8_t wire[4 * 32];
            const double lim = ldexp(1.0, 30 - bits) / n; /* |sum| within range */
            for (int r = 0; r < n; r++) {
                for (int j = 0; j < 32; j++) {
                    s = s * 6364136223846793005ull + 1442695040888963407ull;
                    x[r][j] = (float)(((double)(s >> 11) * 0x1p-53 * 2 - 1) * lim);
                }
                CHECK_EQ_INT(ina__fixed_encode(INA_FLOAT32, x[r], 32, bits, wire), 0);
                if (r == 0)
                    ina__be32_load(acc, wire, 32);
                else
                    ina__be32_fixadd(acc, wire, 32);
            }
            uint8_t sum[4 * 32];
            for (int j = 0; j < 32; j++)
                ina__put32(sum + 4 * j, (uint32_t)acc[j]);
            float out[32];
            CHECK_EQ_INT(ina__fixed_decode(INA_FLOAT32, INA_SUM, sum, 32, bits, n, out), 0);
            for (int j = 0; j < 32; j++) {
                double exact = 0;
                for (int r = 0; r < n; r++)
                    exact += x[r][j];
                bad += !(fabs(out[j] - exact) <= ina_fixed_error_bound(INA_FLOAT32, n, bits, exact));
            }
        }
    CHECK_EQ_INT(bad, 0);
    CHECK(isnan(ina_fixed_error_bound(INA_FLOAT32, 4, 0, 1.0)));
    CHECK(isnan(ina_fixed_error_bound(INA_FLOAT32, 4, 31, 1.0)));
    CHECK(ina_fixed_error_bound(INA_INT32, 4, 23, 1.0) == 0.0);
    CHECK(isinf(ina_fixed_error_bound(INA_FLOAT32, 4, 23, NAN)));
}

int main(void)
{
    test_encode();
    test_switch_add();
    test_decode();
    test_bound();
    return check_report("test_fixed");
}
