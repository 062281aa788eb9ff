/* h16_rate.c: single-core cost of the 16-bit wire's kernels (common/h16.h) per element, against the switch's int32 kernels (be32.h). */
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/be32.h"
#include "common/h16.h"
#include "lib/wire16.h"

/*
 * One packet's block (--elems, default 2048 elements), called over and over
 * on the same L1-resident buffers, as the switch does per packet: the median
 * over --runs runs of about --ms milliseconds, in ns per element. Rows:
 *   be32 load/add/store   the int32 slot kernels (op 0: 4 bytes per element)
 *   h16 load/add          a 16-bit contribution into binary32 lanes (exp 0, and exp 5)
 *   h16 emit              ina__h16_result_exp + ina__h16_store (a RESULT, 2 bytes per element)
 *   put, get              a worker's FLOAT16/BFLOAT16 encode and SUM decode (byte swaps)
 *   f32->bf16, f32->f16   a worker's FLOAT32 encode (block scale included for binary16)
 *   avg->f16              a worker's FLOAT16 AVG decode (through doubles, one rounding;
 *                         libina's dispatch, in the simd column)
 * for the scalar reference and the AVX2 + F16C kernels.
 */

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

enum row { BE_LOAD, BE_ADD, BE_STORE, H_LOAD, H_ADD, H_ADD_E, H_EMIT, PUT, GET, ENC_BF16, ENC_F16,
           AVG_F16, NROWS };
static const char *row_name[NROWS] = {
    "be32 load", "be32 add", "be32 store", "h16 load", "h16 add", "h16 add exp 5",
    "h16 emit", "put (encode 16)", "get (decode 16)", "f32->bf16", "f32->f16 scaled",
    "avg->f16 decode"};

static size_t n; /* elements */
static uint8_t *wire, *wire16;
static int32_t *lanes;
static uint16_t *h;
static float *f;
static volatile int sink;

static void once(enum row r, const struct ina_h16_kernels *k, enum ina_h16_fmt fmt)
{
    size_t words = ina__h16_words(n);
    switch (r) {
    case BE_LOAD: ina__be32_load(lanes, wire, n); break;
    case BE_ADD: ina__be32_add(lanes, wire, n); break;
    case BE_STORE: ina__be32_store(wire, lanes, n); break;
    case H_LOAD: k->load(lanes, wire16, words, 0, fmt); break;
    case H_ADD: k->add(lanes, wire16, words, 0, fmt); break;
    case H_ADD_E: k->add(lanes, wire16, words, 5, fmt); break;
    case H_EMIT: k->store(wire16, lanes, words, k->result_exp(lanes, words, 0, fmt), fmt); break;
    case PUT: k->put(h, n, wire16); break;
    case GET: k->get(wire16, n, fmt, h); break;
    case ENC_BF16: k->encode_f32(f, n, 0, INA_H16_BF16, wire16); break;
    case ENC_F16: k->encode_f32(f, n, k->f32_scale(f, n), INA_H16_F16, wire16); break;
    case AVG_F16: ina__w16_decode(INA_FLOAT16, INA_H16_F16, INA_AVG, wire16, n, 0, 3, h); break;
    case NROWS: break;
    }
    sink += lanes[0];
}

/* Refill the inputs so that every kernel sees ordinary values (no NaN, sums in range). */
static void refill(void)
{
    for (size_t i = 0; i < n; i++) {
        f[i] = (float)((int)(i * 2654435761u % 2001) - 1000) / 37.0f;
        uint32_t b;
        memcpy(&b, &f[i], 4);
        h[i] = (uint16_t)(b >> 16);
    }
    ina__h16_scalar.put(h, n, wire16);
    for (size_t i = 0; i < n; i++)
        memcpy(wire + 4 * i, &f[i], 4);
    ina__be32_load(lanes, wire, n);
}

int main(int argc, char **argv)
{
    int runs = 11, ms = 20, c;
    n = 2048;
    while ((c = getopt(argc, argv, "n:r:m:h")) != -1) {
        switch (c) {
        case 'n': n = (size_t)strtoul(optarg, NULL, 10); break;
        case 'r': runs = atoi(optarg); break;
        case 'm': ms = atoi(optarg); break;
        default:
            fprintf(stderr, "usage: h16_rate [-n elements] [-r runs] [-m ms per run]\n");
            return c == 'h' ? 0 : 2;
        }
    }
    if (n < 2 || n > 65536 || runs < 1 || runs > 101 || ms < 1) {
        fprintf(stderr, "h16_rate: bad arguments\n");
        return 2;
    }
    wire = malloc(4 * n + 64);
    wire16 = malloc(2 * n + 64);
    lanes = malloc(4 * n + 64);
    h = malloc(2 * n + 64);
    f = malloc(4 * n + 64);
    double *t = malloc(sizeof(double) * (size_t)runs);
    if (!wire || !wire16 || !lanes || !h || !f || !t)
        return 1;
    const struct ina_h16_kernels *impls[2] = {&ina__h16_scalar, ina__h16_simd()};
    printf("# %zu elements per call, median of %d runs of ~%d ms, ns per element\n", n, runs, ms);
    printf("%-18s %10s %10s %10s %10s\n", "kernel", "f16 scalar", "f16 simd", "bf16 scalar",
           "bf16 simd");
    for (int r = 0; r < NROWS; r++) {
        printf("%-18s", row_name[r]);
        for (int fmt = 0; fmt < 2; fmt++)
            for (int k = 0; k < 2; k++) {
                /* be32 has its own dispatch (INA_NO_SIMD): one number, in the simd column */
                if (!impls[k] || ((r <= BE_STORE || r == AVG_F16) && (fmt || !k)) ||
                    (fmt && (r == ENC_BF16 || r == ENC_F16 || r == AVG_F16))) {
                    printf(" %10s", "-");
                    continue;
                }
                for (int i = 0; i < runs; i++) {
                    refill();
                    long iters = 0;
                    double t0 = (double)ina__clock_ns(), t1;
                    do {
                        for (int j = 0; j < 64; j++)
                            once((enum row)r, impls[k], (enum ina_h16_fmt)fmt);
                        iters += 64;
                        t1 = (double)ina__clock_ns();
                    } while (t1 - t0 < ms * 1e6);
                    t[i] = (t1 - t0) / ((double)iters * (double)n);
                }
                qsort(t, (size_t)runs, sizeof(double), cmp_d);
                printf(" %10.3f", t[runs / 2]);
            }
        printf("\n");
    }
    free(wire), free(wire16), free(lanes), free(h), free(f), free(t);
    return sink == 12345 ? 1 : 0;
}
