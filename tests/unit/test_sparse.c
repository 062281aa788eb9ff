/* test_sparse.c: the zero test (scalar and AVX2 agree, known answers), the block map, and the sparse payload checks. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/sparse_wire.h"
#include "lib/quant_simd.h"
#include "lib/sparse_scan.h"
#include "rng.h"

static uint64_t next_rand(void) { return rng_u64(); }

static const size_t esz[] = {4, 4, 2, 2, 8}; /* by ina_dtype */

/* Put a value of kind k into element i of a block of dtype dt:
 * 0 +0, 1 -0, 2 tiny (below 1e-3), 3 one, 4 NaN, 5 -Inf, 6 smallest subnormal. */
static void put(ina_dtype dt, void *x, size_t i, int k)
{
    static const float f32[] = {0.0f, -0.0f, 1e-4f, 1.0f, NAN, -INFINITY, 0x1p-149f};
    static const uint16_t f16[] = {0x0000, 0x8000, 0x068D, 0x3C00, 0x7E00, 0xFC00, 0x0001};
    static const uint16_t bf16[] = {0x0000, 0x8000, 0x38D2, 0x3F80, 0x7FC0, 0xFF80, 0x0001};
    static const double f64[] = {0.0, -0.0, 1e-4, 1.0, NAN, -INFINITY, 0x1p-1074};
    static const int32_t i32[] = {0, 0, 1, 7, -1, INT32_MIN, 1};
    switch (dt) {
    case INA_INT32: ((int32_t *)x)[i] = i32[k]; break;
    case INA_FLOAT32: ((float *)x)[i] = f32[k]; break;
    case INA_FLOAT16: ((uint16_t *)x)[i] = f16[k]; break;
    case INA_BFLOAT16: ((uint16_t *)x)[i] = bf16[k]; break;
    case INA_FLOAT64: ((double *)x)[i] = f64[k]; break;
    }
}

/* What a block holding kinds {0, 1} plus one element of kind k means, at threshold t. */
static int expect_nonzero(ina_dtype dt, int k, double t)
{
    if (k <= 1)
        return 0; /* +-0 */
    if (dt == INA_INT32)
        return 1; /* every non-zero integer; the threshold does not apply */
    if (k == 2 || k == 6)
        return !(t >= 1e-3); /* tiny and subnormal values: zero only under a threshold */
    return 1;                /* 1, NaN, -Inf */
}

static void test_known_answers(void)
{
    uint8_t buf[300 * 8];
    const double thresholds[] = {0.0, 1e-3};
    for (int dt = 0; dt <= INA_FLOAT64; dt++)
        for (size_t n = 1; n <= 300; n += (n < 40 ? 1 : 37))
            for (int k = 0; k <= 6; k++)
                for (size_t ti = 0; ti < 2; ti++) {
                    double t = thresholds[ti];
                    memset(buf, 0, sizeof(buf));
                    for (size_t i = 0; i < n; i++)
                        put((ina_dtype)dt, buf, i, (int)(i & 1)); /* +0, -0, +0, ... */
                    size_t at = (size_t)(next_rand() % n);
                    put((ina_dtype)dt, buf, at, k);
                    int want = expect_nonzero((ina_dtype)dt, k, t);
                    int s = ina__block_nonzero_scalar((ina_dtype)dt, buf, n, t);
                    int v = ina__block_nonzero_avx2((ina_dtype)dt, buf, n, t);
                    if (s != want || v != want)
                        fprintf(stderr, "dtype %d n %zu kind %d at %zu threshold %g: scalar %d "
                                "avx2 %d, want %d\n", dt, n, k, at, t, s, v, want);
                    CHECK_EQ_INT(s, want);
                    CHECK_EQ_INT(v, want);
                }
}

/* Random blocks with random sparse contents: the two implementations agree. */
static void test_agree_random(void)
{
    uint8_t buf[1024 * 8 + 64];
    for (int rep = 0; rep < 4000; rep++) {
        ina_dtype dt = (ina_dtype)(next_rand() % 5);
        size_t n = 1 + next_rand() % 1024, off = (next_rand() % 8) * esz[dt];
        uint8_t *x = buf + off; /* misaligned for the vectors, aligned to the element */
        memset(x, 0, n * esz[dt]);
        int planted = (int)(next_rand() % 3);
        for (int j = 0; j < planted; j++)
            put(dt, x, (size_t)(next_rand() % n), (int)(next_rand() % 7));
        double t = next_rand() % 2 ? 0.0 : 1e-3;
        CHECK_EQ_INT(ina__block_nonzero_scalar(dt, x, n, t), ina__block_nonzero_avx2(dt, x, n, t));
    }
}

static void test_map(void)
{
    enum { N = 1000, B = 32 };
    static float x[N];
    uint64_t map[(N / B + 1 + 63) / 64];
    int want[N / B + 1];
    memset(x, 0, sizeof(x));
    size_t nb = (N + B - 1) / B;
    uint64_t nnz = 0;
    for (size_t b = 0; b < nb; b++) {
        want[b] = next_rand() % 4 == 0 || b == nb - 1;
        if (want[b])
            x[b * B + next_rand() % (b == nb - 1 ? N - b * B : B)] = -2.5f;
        nnz += (uint64_t)want[b];
    }
    CHECK_EQ_INT(ina__sparse_scan(INA_FLOAT32, x, N, B, 0, 0.0, map), nnz);
    for (size_t b = 0; b < nb; b++)
        CHECK_EQ_INT(ina__map_test(map, b), want[b]);
    /* map_next: the first set bit in [from, to), or to. */
    for (size_t from = 0; from < nb; from += 3)
        for (size_t to = from; to <= nb; to += 5) {
            size_t w = from;
            while (w < to && !want[w])
                w++;
            CHECK_EQ_INT(ina__map_next(map, from, to), w);
        }
    /* A threshold above every value: nothing is left. */
    CHECK_EQ_INT(ina__sparse_scan(INA_FLOAT32, x, N, B, 0, 3.0, map), 0);
    CHECK_EQ_INT(ina__map_next(map, 0, nb), nb);
}

/* A part that starts inside a block of its operation (lanes.c cuts at packet
 * boundaries): block 0 is short, the others lie on the operation's grid. */
static void test_map_phase(void)
{
    enum { N = 1000, B = 100, PHASE = 40 };
    static float x[N];
    const size_t nb = (PHASE + N + B - 1) / B; /* 11: 60, 100 x 9, 40 elements */
    uint64_t map[1];
    for (size_t b = 0; b < nb; b++) {
        size_t start = b ? b * B - PHASE : 0, end = (b + 1) * B - PHASE < N ? (b + 1) * B - PHASE : N;
        memset(x, 0, sizeof(x));
        x[start + next_rand() % (end - start)] = 1.5f; /* block b alone */
        CHECK_EQ_INT(ina__sparse_scan(INA_FLOAT32, x, N, B, PHASE, 0.0, map), 1);
        CHECK_EQ_INT(ina__map_next(map, 0, nb), b);
        /* Its neighbours' edges belong to them. */
        memset(x, 0, sizeof(x));
        x[start] = x[end - 1] = 2.0f;
        CHECK_EQ_INT(ina__sparse_scan(INA_FLOAT32, x, N, B, PHASE, 0.0, map), 1);
        CHECK_EQ_INT(map[0], 1ull << b);
    }
}

/* ---- The payload checks (sparse_wire.h) ---------------------------------------- */

static size_t put_desc(uint8_t *p, unsigned j, uint32_t pos, uint32_t next, uint32_t info)
{
    uint8_t *d = p + 4 * (1 + 3 * (size_t)j);
    ina__put32(d, pos);
    ina__put32(d + 4, next);
    ina__put32(d + 8, info);
    return 0;
}

static void test_wire_check(void)
{
    uint8_t p[4 * 64];
    const unsigned B = 4;
    /* 3 places: a first round, a block with a next, a block at the column's end. */
    memset(p, 0, sizeof(p));
    ina__put32(p, ina__sparse_layout(B, 3));
    put_desc(p, 0, 10, 10, ina__sparse_info(0, 1, -5));
    put_desc(p, 1, 20, 22, ina__sparse_info(1, 0, 3));
    put_desc(p, 2, 30, INA_SPARSE_END, ina__sparse_info(1, 0, INA_EXP_ZERO));
    size_t count = ina__sparse_words(B, 3, 2); /* 1 + 9 + 8 */
    CHECK_EQ_INT(count, 18);
    CHECK_EQ_INT(ina__sparse_check(p, count, 64, 0), 0);
    CHECK_EQ_INT(ina__sparse_info_exp(ina__get32(p + 4 * 3)), -5);
    /* Every malformation is refused. */
    CHECK_EQ_INT(ina__sparse_check(p, count - 1, 64, 0), -1);     /* count disagrees with HAS */
    CHECK_EQ_INT(ina__sparse_check(p, count + B, 64, 0), -1);
    CHECK_EQ_INT(ina__sparse_check(p, 0, 64, 0), -1);             /* no layout word */
    CHECK_EQ_INT(ina__sparse_check(p, count, 3 * (3 + B), 0), -1); /* three full places do not fit */
    CHECK_EQ_INT(ina__sparse_check(p, count, 1 + 3 * (3 + B), 0), 0);
    uint8_t q[sizeof(p)];
#define MUTATE(off, val)                                   \
    do {                                                   \
        memcpy(q, p, sizeof(q));                           \
        ina__put32(q + 4 * (off), (val));                   \
        CHECK_EQ_INT(ina__sparse_check(q, count, 64, 0), -1); \
    } while (0)
    MUTATE(0, ina__sparse_layout(B, 3) | 1);                   /* reserved layout bits */
    MUTATE(0, ina__sparse_layout(0, 3));                       /* B = 0 */
    MUTATE(0, ina__sparse_layout(B, 4));                       /* more places than words */
    MUTATE(3, ina__sparse_info(1, 1, 0));                      /* FIRST with a block */
    MUTATE(3, ina__sparse_info(0, 1, 0) | 0x10000);            /* reserved info bits */
    MUTATE(2, 9);                                             /* FIRST: next before pos */
    MUTATE(5, 20);                                            /* next == pos */
    MUTATE(5, 19);                                            /* next before pos */
    MUTATE(1, INA_SPARSE_END);                                /* pos = END */
#undef MUTATE
    /* An empty packet (a placeholder) is its layout word alone. */
    ina__put32(p, ina__sparse_layout(B, 0));
    CHECK_EQ_INT(ina__sparse_check(p, 1, 1, 0), 0);
    CHECK_EQ_INT(ina__sparse_places(256, 2048), 7);
    CHECK_EQ_INT(ina__sparse_places(32, 256), 7);
    CHECK_EQ_INT(ina__sparse_places(256, 259), 0);
    CHECK_EQ_INT(ina__sparse_places(256, 260), 1);
    CHECK_EQ_INT(ina__sparse_places(1, 16360), 255);
}

int main(void)
{
    rng_state = 17;
    printf("zero test: avx2 %s\n", ina__quant_avx2_supported() ? "available" : "not available "
           "(both paths are the scalar code)");
    test_known_answers();
    test_agree_random();
    test_map();
    test_map_phase();
    test_wire_check();
    return check_report("test_sparse");
}
