/* benchdata.c: deterministic all-reduce inputs (the generator of tools/ina-bench.c) and their
 * verification, for the peers of the comparison benchmark. */
#include "benchdata.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* The generator itself is ina-bench's, shared: */
#include "../tools/bench_data.h"

static struct sparse_pat pat = {1, SPARSE_RANDOM, 256, 1};

void bd_set_sparse(double density, int pattern, size_t block, int world)
{
    pat.density = density;
    pat.pattern = pattern;
    pat.block = block ? block : 256;
    pat.world = world > 0 ? world : 1;
}

static const char *const names[] = {"float32", "int32", "float16", "bfloat16"};

size_t bd_esize(int dtype)
{
    return dtype == BD_FLOAT16 || dtype == BD_BFLOAT16 ? 2 : 4;
}

const char *bd_name(int dtype)
{
    return dtype >= 0 && dtype < 4 ? names[dtype] : "?";
}

int bd_dtype(const char *name)
{
    for (int i = 0; i < 4; i++)
        if (!strcmp(name, names[i]))
            return i;
    return -1;
}

static void dense_fill(int dtype, uint64_t seed, size_t start, size_t n, void *out)
{
    switch (dtype) {
    case BD_INT32: fill_i32(seed, start, n, out); break;
    case BD_FLOAT16: fill_f16(seed, start, n, out); break;
    case BD_BFLOAT16: fill_bf16(seed, start, n, out); break;
    default: fill_f32(seed, start, n, out); break;
    }
}

/* Elements [start, start + n) of rank's input. */
static void fill_part(int dtype, void *out, size_t start, size_t n, int rank, uint64_t bytes,
                      int iter)
{
    sparse_fill(&pat, dtype, bd_esize(dtype), out, start, n, rank, bytes, iter, dense_fill);
}

static double half_value(int dtype, uint16_t h)
{
    return dtype == BD_FLOAT16 ? f16_value(h) : bf16_value(h);
}

/* v rounded to float16 (nearest, ties to even; beyond the largest finite value: Inf). */
static uint16_t f16_round(double v)
{
    uint16_t sign = signbit(v) ? 0x8000u : 0u;
    double a = fabs(v);
    if (isnan(v))
        return 0x7e00;
    if (a >= 65520.0) /* 65504 + half an ulp: ties to even go up, to Inf */
        return sign | 0x7c00u;
    if (a < 0x1p-14) /* subnormal: units of 2^-24 (1024 of them is the smallest normal) */
        return (uint16_t)(sign | (unsigned)nearbyint(a * 0x1p24));
    int e = ilogb(a);
    double m = nearbyint(ldexp(a, 10 - e)); /* 1024..2048 */
    if (m >= 2048) {
        m = 1024;
        e++;
    }
    return (uint16_t)(sign | (unsigned)(e + 15) << 10 | ((unsigned)m - 1024u));
}

/* v rounded to bfloat16 (nearest, ties to even). v is a sum of two bfloat16 values, exact in
 * double; rounding it to float first changes nothing bfloat16 can tell: where float rounds,
 * the smaller term is below 2^-16 of the larger, far under bfloat16's half ulp, and float's
 * rounding moves the value by one float ulp, never onto a bfloat16 tie. */
static uint16_t bf16_round(double v)
{
    float f = (float)v;
    uint32_t b;
    memcpy(&b, &f, 4);
    if (isnan(f))
        return (uint16_t)((b >> 16) | 0x40u);
    b += 0x7fffu + ((b >> 16) & 1u);
    return (uint16_t)(b >> 16);
}

void bd_sum16(int dtype, const void *in, void *inout, size_t n)
{
    const uint16_t *a = in;
    uint16_t *b = inout;
#if defined(__FLT16_MAX__)
    /* The compiler's _Float16 (gcc 12, clang 15 on x86-64): the same rounding, much faster
     * than f16_round (the peer's reduction must not be slowed by the benchmark's own code). */
    if (dtype == BD_FLOAT16) {
        for (size_t i = 0; i < n; i++) {
            _Float16 x, y;
            memcpy(&x, &a[i], 2);
            memcpy(&y, &b[i], 2);
            x = (_Float16)((float)x + (float)y); /* see bf16_round: float's rounding is harmless */
            memcpy(&b[i], &x, 2);
        }
        return;
    }
#endif
    for (size_t i = 0; i < n; i++) {
        double s = half_value(dtype, a[i]) + half_value(dtype, b[i]);
        b[i] = dtype == BD_FLOAT16 ? f16_round(s) : bf16_round(s);
    }
}

void bd_fill(int dtype, void *out, size_t count, int rank, uint64_t bytes, int iter)
{
    fill_part(dtype, out, 0, count, rank, bytes, iter);
}

#define CHUNK 4096

int64_t bd_verify(int dtype, const void *recv, size_t count, int world, uint64_t bytes, int iter,
                  double *max_abs_err, double *max_err_over_tol, const char *tag)
{
    float fs[CHUNK];
    int32_t is[CHUNK];
    uint16_t hs[CHUNK];
    double acc[CHUNK], mag[CHUNK];
    uint32_t iacc[CHUNK];
    int64_t failures = 0;
    const double u = ldexp(1.0, -24);

    for (size_t b0 = 0; b0 < count; b0 += CHUNK) {
        size_t n = count - b0 < CHUNK ? count - b0 : CHUNK;
        if (dtype == BD_INT32) {
            const int32_t *got = (const int32_t *)recv + b0;
            memset(iacc, 0, n * sizeof *iacc);
            for (int r = 0; r < world; r++) {
                fill_part(BD_INT32, is, b0, n, r, bytes, iter);
                for (size_t j = 0; j < n; j++)
                    iacc[j] += (uint32_t)is[j];
            }
            for (size_t j = 0; j < n; j++) {
                if ((uint32_t)got[j] != iacc[j]) {
                    int64_t d = (int64_t)(int32_t)((uint32_t)got[j] - iacc[j]);
                    double e = (double)(d < 0 ? -d : d);
                    if (failures < 5)
                        fprintf(stderr, "%s: size %llu iteration %d element %zu: got %d, "
                                "expected %d\n", tag, (unsigned long long)bytes, iter, b0 + j,
                                (int)got[j], (int)(int32_t)iacc[j]);
                    failures++;
                    if (e > *max_abs_err)
                        *max_abs_err = e;
                    *max_err_over_tol = INFINITY;
                }
            }
        } else {
            const int half = dtype == BD_FLOAT16 || dtype == BD_BFLOAT16;
            const double unit = dtype == BD_FLOAT16 ? ldexp(1.0, -11)
                                : dtype == BD_BFLOAT16 ? ldexp(1.0, -8) : u;
            const double floor = dtype == BD_FLOAT16 ? world * ldexp(1.0, -25) : 0.0;
            memset(acc, 0, n * sizeof *acc);
            memset(mag, 0, n * sizeof *mag);
            for (int r = 0; r < world; r++) {
                fill_part(dtype, half ? (void *)hs : (void *)fs, b0, n, r, bytes, iter);
                for (size_t j = 0; j < n; j++) {
                    double x = half ? half_value(dtype, hs[j]) : fs[j];
                    acc[j] += x;
                    mag[j] += fabs(x);
                }
            }
            for (size_t j = 0; j < n; j++) {
                double gotj = half ? half_value(dtype, ((const uint16_t *)recv)[b0 + j])
                                   : ((const float *)recv)[b0 + j];
                double e = fabs(gotj - acc[j]);
                double tol = world * unit * mag[j] + floor;
                double ratio = tol > 0 ? e / tol : (e > 0 ? INFINITY : 0.0);
                if (!(e <= tol)) {
                    if (failures < 5)
                        fprintf(stderr, "%s: size %llu iteration %d element %zu: got %.9g, "
                                "exact %.9g, error %.3g > tolerance %.3g\n", tag,
                                (unsigned long long)bytes, iter, b0 + j, gotj, acc[j],
                                e, tol);
                    failures++;
                }
                if (!(e <= *max_abs_err))
                    *max_abs_err = e;
                if (!(ratio <= *max_err_over_tol))
                    *max_err_over_tol = ratio;
            }
        }
    }
    return failures;
}
