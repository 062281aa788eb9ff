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

static void dense_fill(int dtype, uint64_t seed, size_t start, size_t n, void *out)
{
    if (dtype == BD_INT32)
        fill_i32(seed, start, n, out);
    else
        fill_f32(seed, start, n, out);
}

/* Elements [start, start + n) of rank's input. */
static void fill_part(int dtype, void *out, size_t start, size_t n, int rank, uint64_t bytes,
                      int iter)
{
    sparse_fill(&pat, dtype, 4, out, start, n, rank, bytes, iter, dense_fill);
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
            const float *got = (const float *)recv + b0;
            memset(acc, 0, n * sizeof *acc);
            memset(mag, 0, n * sizeof *mag);
            for (int r = 0; r < world; r++) {
                fill_part(BD_FLOAT32, fs, b0, n, r, bytes, iter);
                for (size_t j = 0; j < n; j++) {
                    acc[j] += fs[j];
                    mag[j] += fabs((double)fs[j]);
                }
            }
            for (size_t j = 0; j < n; j++) {
                double e = fabs((double)got[j] - acc[j]);
                double tol = world * u * mag[j];
                double ratio = tol > 0 ? e / tol : (e > 0 ? INFINITY : 0.0);
                if (!(e <= tol)) {
                    if (failures < 5)
                        fprintf(stderr, "%s: size %llu iteration %d element %zu: got %.9g, "
                                "exact %.9g, error %.3g > tolerance %.3g\n", tag,
                                (unsigned long long)bytes, iter, b0 + j, (double)got[j], acc[j],
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
