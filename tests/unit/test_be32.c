/* test_be32.c: the switch's big-endian int32 kernels (load, add, max, min, float add, store; SIMD when available) against a plain reference. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "dtypes.h"
#include "common/be32.h"

static uint32_t rng = 0x12345678;
static uint32_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng;
}

/* ina__be32_fadd against the compiler's binary32 add: random bit patterns (every
 * class: NaN, Inf, subnormal, signed zero), every length 0..99 (SIMD body and
 * tail), unaligned input. NaN results need only be NaN (payloads may differ). */
static void test_fadd(void)
{
    uint8_t wire[4 * 100 + 4];
    int32_t v[100];
    uint32_t a[100], b[100];
    int bad = 0;
    for (size_t n = 0; n < 100; n++) {
        for (size_t off = 0; off < 4; off += 3) {
            for (size_t i = 0; i < n; i++) {
                /* mostly ordinary magnitudes, so that sums round; some raw patterns */
                a[i] = next() % 4 ? float_bits((float)(int32_t)next() * 0x1p-20f) : next();
                b[i] = next() % 4 ? float_bits((float)(int32_t)next() * 0x1p-27f) : next();
                v[i] = (int32_t)a[i];
                uint8_t *p = wire + off + 4 * i;
                p[0] = (uint8_t)(b[i] >> 24), p[1] = (uint8_t)(b[i] >> 16);
                p[2] = (uint8_t)(b[i] >> 8), p[3] = (uint8_t)b[i];
            }
            ina__be32_fadd(v, wire + off, n);
            for (size_t i = 0; i < n; i++) {
                volatile float want = bits_float(a[i]) + bits_float(b[i]);
                float got = bits_float((uint32_t)v[i]);
                if (isnan(want) ? !isnan(got) : float_bits(got) != float_bits(want))
                    bad++;
            }
        }
    }
    CHECK_EQ_INT(bad, 0);
    /* Exact cases: cancellation to +0, -0 + -0, overflow, subnormals. */
    const float x[5] = {1e8f, -0.0f, 3e38f, 0x1p-149f, 1.0f};
    const float y[5] = {-1e8f, -0.0f, 3e38f, 0x1p-149f, 0x1p-24f};
    uint8_t yb[20];
    for (int i = 0; i < 5; i++) {
        uint32_t u = float_bits(y[i]);
        yb[4 * i] = (uint8_t)(u >> 24), yb[4 * i + 1] = (uint8_t)(u >> 16);
        yb[4 * i + 2] = (uint8_t)(u >> 8), yb[4 * i + 3] = (uint8_t)u;
        v[i] = (int32_t)float_bits(x[i]);
    }
    ina__be32_fadd(v, yb, 5);
    CHECK(float_bits(bits_float((uint32_t)v[0])) == float_bits(0.0f));
    CHECK(float_bits(bits_float((uint32_t)v[1])) == float_bits(-0.0f));
    CHECK(bits_float((uint32_t)v[2]) == INFINITY);
    CHECK(bits_float((uint32_t)v[3]) == 0x1p-148f);
    CHECK(bits_float((uint32_t)v[4]) == 1.0f); /* a tie: to even */
}

int main(void)
{
    test_fadd();
    uint8_t wire[4 * 100 + 8], out[4 * 100 + 8];
    int32_t v[100 + 2], ref[100 + 2];
    for (size_t n = 0; n < 100; n++) {
        for (size_t off = 0; off < 4; off++) { /* unaligned wire data */
            uint8_t *p = wire + off;
            for (size_t i = 0; i < 4 * n; i++)
                p[i] = (uint8_t)next();
            /* load */
            ina__be32_load(v, p, n);
            for (size_t i = 0; i < n; i++)
                ref[i] = (int32_t)((uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
                                   (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3]);
            CHECK(memcmp(v, ref, n * 4) == 0);
            /* add, with wraparound: add the same data again */
            ina__be32_add(v, p, n);
            for (size_t i = 0; i < n; i++)
                ref[i] = (int32_t)((uint32_t)ref[i] * 2u);
            CHECK(memcmp(v, ref, n * 4) == 0);
            /* store, unaligned output; bytes past n untouched */
            memset(out, 0xA5, sizeof(out));
            ina__be32_store(out + off, v, n);
            int ok = 1;
            for (size_t i = 0; i < n; i++) {
                uint32_t x = (uint32_t)v[i];
                ok &= out[off + 4 * i] == (uint8_t)(x >> 24) && out[off + 4 * i + 3] == (uint8_t)x;
            }
            CHECK(ok);
            CHECK(out[off + 4 * n] == 0xA5);
            /* max and min (signed) of the loaded values and new data; every
             * 5th value equal, and sign-boundary patterns, to catch unsigned
             * compares and strictness */
            uint8_t *q = out + off;
            for (size_t i = 0; i < 4 * n; i++)
                q[i] = (i / 4) % 5 == 0 ? p[i] : (uint8_t)next();
            for (size_t i = 0; i + 3 < 4 * n; i += 28)
                q[i] ^= 0x80;
            for (int op = 0; op < 2; op++) {
                ina__be32_load(v, p, n);
                ina__be32_minmax(v, q, n, !op);
                ok = 1;
                for (size_t i = 0; i < n; i++) {
                    int32_t a = (int32_t)((uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
                                          (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3]);
                    int32_t b = (int32_t)((uint32_t)q[4 * i] << 24 | (uint32_t)q[4 * i + 1] << 16 |
                                          (uint32_t)q[4 * i + 2] << 8 | q[4 * i + 3]);
                    ok &= v[i] == (op ? (a < b ? a : b) : (a > b ? a : b));
                }
                CHECK(ok);
            }
        }
    }
    /* extremes: max/min across the sign boundary */
    int32_t ext[2] = {INT32_MIN, INT32_MAX};
    uint8_t ext_be[8] = {0x7F, 0xFF, 0xFF, 0xFF, 0x80, 0, 0, 0}; /* MAX, MIN */
    ina__be32_minmax(ext, ext_be, 2, 1);
    CHECK_EQ_INT(ext[0], INT32_MAX);
    CHECK_EQ_INT(ext[1], INT32_MAX);
    ina__be32_minmax(ext, ext_be, 2, 0);
    CHECK_EQ_INT(ext[0], INT32_MAX);
    CHECK_EQ_INT(ext[1], INT32_MIN);
    /* extremes wrap: INT32_MAX + 1 */
    uint8_t one[4] = {0, 0, 0, 1};
    int32_t big[1] = {INT32_MAX};
    ina__be32_add(big, one, 1);
    CHECK_EQ_INT(big[0], INT32_MIN);
    return check_report("test_be32");
}
