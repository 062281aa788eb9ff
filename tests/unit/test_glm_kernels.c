/* test_glm_kernels.c: ina-glm's inner loops (apps/glm): the block dot product with four sums against a plain one, for every length's remainder, dense and sparse; the step into the model; and the generator's two ways of sorting a row's columns (a bitmap for long rows, qsort for short ones) giving the same columns. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
/* ina-glm's sources, compiled into the test (they are ina-glm's, not libina's). */
#include "../../apps/glm/data.c"
#include "../../apps/glm/gen.c"

/* Row i of b against x, one product at a time in long double: the reference. */
static long double plain_dot(const struct glm_block *b, size_t i, const double *x)
{
    long double acc = 0;
    if (b->dense) {
        for (size_t j = 0; j < b->f; j++)
            acc += (long double)b->d[i * b->f + j] * x[j];
        return acc;
    }
    for (size_t k = b->s.rowptr[i]; k < b->s.rowptr[i + 1]; k++)
        acc += (long double)b->s.val[k] * x[b->s.col[k]];
    return acc;
}

/* A random CSR of n rows over f >= 13 * 13 columns: row i has i % 13 nonzeros (0..12, every
 * remainder of the four-way loop), at increasing columns. */
static void random_csr(struct glm_csr *m, size_t n, size_t f, uint64_t *s)
{
    m->nrows = n;
    m->ncols = f;
    m->rowptr = malloc((n + 1) * sizeof(size_t));
    m->col = malloc(n * 12 * sizeof(uint32_t));
    m->val = malloc(n * 12 * sizeof(float));
    size_t o = 0;
    m->rowptr[0] = 0;
    for (size_t i = 0; i < n; i++) {
        size_t k = i % 13, c = 0;
        for (size_t t = 0; t < k; t++) {
            c += 1 + (size_t)(glm_rand64(s) % (f / 13 - 1)); /* at most 12 (f / 13 - 1) < f */
            m->col[o] = (uint32_t)c;
            m->val[o++] = (float)(2 * glm_rand01(s) - 1);
        }
        m->rowptr[i + 1] = o;
    }
    m->nnz = o;
}

static void test_dot_and_step(void)
{
    uint64_t s = 42;
    struct glm_csr m;
    random_csr(&m, 130, 400, &s);
    double x[400], g[400], want[400];
    for (int dense = 0; dense <= 1; dense++) {
        struct glm_block b;
        /* a column range that cuts rows, dense (every cell) or sparse */
        CHECK_EQ_INT(glm_block_make(&m, 0, m.nrows, 7, 391, dense ? 0.0 : 2.0, &b), 0);
        CHECK_EQ_INT(b.dense, dense);
        for (size_t j = 0; j < b.f; j++)
            x[j] = 2 * glm_rand01(&s) - 1;
        double worst = 0;
        for (size_t i = 0; i < b.n; i++) {
            long double ref = plain_dot(&b, i, x);
            double got = glm_block_dot(&b, i, x);
            /* four double sums of at most 384 products of a float and a double in [-1, 1] */
            worst = fmax(worst, fabs((double)(got - ref)));
        }
        CHECK_LE_DBL(worst, 1e-12);
        /* the step: g += a row_i, only at the row's columns */
        for (size_t j = 0; j < b.f; j++)
            g[j] = want[j] = (double)j;
        glm_block_axpy(&b, 5, -0.5, g);
        if (dense)
            for (size_t j = 0; j < b.f; j++)
                want[j] += -0.5 * b.d[5 * b.f + j];
        else
            for (size_t k = b.s.rowptr[5]; k < b.s.rowptr[5 + 1]; k++)
                want[b.s.col[k]] += -0.5 * b.s.val[k];
        CHECK(memcmp(g, want, b.f * sizeof(double)) == 0);
        glm_block_free(&b);
    }
    glm_csr_free(&m);
}

static void test_sort_distinct(void)
{
    uint64_t s = 7;
    const size_t ncols = 1000;
    uint64_t *bits = calloc((ncols + 63) / 64, sizeof(uint64_t));
    uint32_t a[600], b[600];
    for (int trial = 0; trial < 200; trial++) {
        size_t k = (size_t)(glm_rand64(&s) % 600);
        for (size_t i = 0; i < k; i++) /* duplicates likely, and the first and last columns */
            a[i] = b[i] = (uint32_t)(trial % 3 == 0 ? glm_rand64(&s) % 2 * (ncols - 1)
                                                    : glm_rand64(&s) % ncols);
        size_t na = sort_distinct(a, k, NULL, ncols), nb = sort_distinct(b, k, bits, ncols);
        CHECK_EQ_INT(na, nb);
        CHECK(memcmp(a, b, na * sizeof(uint32_t)) == 0);
        for (size_t i = 1; i < na; i++)
            CHECK(a[i - 1] < a[i]);
    }
    for (size_t w = 0; w < (ncols + 63) / 64; w++) /* left as it was found: zero */
        CHECK_EQ_INT(bits[w], 0);
    free(bits);
}

int main(void)
{
    test_dot_and_step();
    test_sort_distinct();
    return check_report("test_glm_kernels");
}
