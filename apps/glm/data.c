/* data.c: datasets in memory: freeing, scaling, the column partition and each worker's block. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "glm.h"

void glm_csr_free(struct glm_csr *m)
{
    free(m->rowptr);
    free(m->col);
    free(m->val);
    memset(m, 0, sizeof(*m));
}

void glm_dataset_free(struct glm_dataset *d)
{
    glm_csr_free(&d->x);
    free(d->y);
    free(d->planted);
    d->y = NULL;
    d->planted = NULL;
}

void glm_block_free(struct glm_block *b)
{
    free(b->d);
    glm_csr_free(&b->s);
    memset(b, 0, sizeof(*b));
}

int glm_scale(struct glm_dataset *d, enum glm_scale how, char *err, size_t errlen)
{
    struct glm_csr *m = &d->x;
    if (how == GLM_SCALE_NONE)
        return 0;
    double *lo = calloc(m->ncols, sizeof(double)), *hi = calloc(m->ncols, sizeof(double));
    size_t *cnt = calloc(m->ncols, sizeof(size_t));
    if (!lo || !hi || !cnt) {
        free(lo), free(hi), free(cnt);
        snprintf(err, errlen, "out of memory scaling %zu columns", m->ncols);
        return -1;
    }
    for (size_t k = 0; k < m->nnz; k++) {
        size_t j = m->col[k];
        double v = m->val[k];
        if (cnt[j]++ == 0 || v < lo[j])
            lo[j] = v;
        if (cnt[j] == 1 || v > hi[j])
            hi[j] = v;
    }
    int rc = 0;
    for (size_t j = 0; j < m->ncols && rc == 0; j++) {
        if (cnt[j] < m->nrows) { /* some rows leave it out: they hold 0 */
            if (how == GLM_SCALE_MINMAX && lo[j] < 0) {
                snprintf(err, errlen, "--scale minmax: column %zu has negative values and "
                         "implicit zeros, which would all become stored values (use --scale "
                         "maxabs)", j + 1);
                rc = -1;
            }
            lo[j] = lo[j] < 0 ? lo[j] : 0;
            hi[j] = hi[j] > 0 ? hi[j] : 0;
        }
        if (how == GLM_SCALE_MAXABS) {
            hi[j] = fmax(fabs(lo[j]), fabs(hi[j]));
            lo[j] = 0;
        }
    }
    for (size_t k = 0; k < m->nnz && rc == 0; k++) {
        size_t j = m->col[k];
        double span = hi[j] - lo[j];
        m->val[k] = span > 0 ? (float)((m->val[k] - lo[j]) / span) : 0.0f;
    }
    free(lo), free(hi), free(cnt);
    return rc;
}

void glm_partition(size_t ncols, int r, int n, size_t *c0, size_t *c1)
{
    /* floor(F r / N): blocks differ by at most one column, as the authors' code cuts them */
    *c0 = (size_t)((uint64_t)ncols * (uint64_t)r / (uint64_t)n); /* ncols < 2^31, r <= 256 */
    *c1 = (size_t)((uint64_t)ncols * (uint64_t)(r + 1) / (uint64_t)n);
}

/* First entry of row i at or past column c (columns increase within a row). */
static size_t lower(const struct glm_csr *x, size_t i, size_t c)
{
    size_t a = x->rowptr[i], b = x->rowptr[i + 1];
    while (a < b) {
        size_t mid = a + (b - a) / 2;
        if (x->col[mid] < c)
            a = mid + 1;
        else
            b = mid;
    }
    return a;
}

int glm_block_make(const struct glm_csr *x, size_t r0, size_t r1, size_t c0, size_t c1,
                   double dense_min, struct glm_block *b)
{
    memset(b, 0, sizeof(*b));
    b->n = r1 - r0;
    b->f = c1 - c0;
    b->c0 = c0;
    size_t nnz = 0;
    for (size_t i = r0; i < r1; i++)
        nnz += lower(x, i, c1) - lower(x, i, c0);
    double cells = (double)b->n * (double)b->f;
    if (cells > 0 && (double)nnz >= dense_min * cells && cells * sizeof(float) < 8e9) {
        b->dense = 1;
        b->d = calloc(b->n * b->f > 0 ? b->n * b->f : 1, sizeof(float));
        if (!b->d)
            return -1;
        for (size_t i = r0; i < r1; i++)
            for (size_t k = lower(x, i, c0), e = lower(x, i, c1); k < e; k++)
                b->d[(i - r0) * b->f + (x->col[k] - c0)] = x->val[k];
        return 0;
    }
    struct glm_csr *s = &b->s;
    s->nrows = b->n;
    s->ncols = b->f;
    s->nnz = nnz;
    s->rowptr = malloc((b->n + 1) * sizeof(size_t));
    s->col = malloc((nnz ? nnz : 1) * sizeof(uint32_t));
    s->val = malloc((nnz ? nnz : 1) * sizeof(float));
    if (!s->rowptr || !s->col || !s->val) {
        glm_block_free(b);
        return -1;
    }
    size_t o = 0;
    s->rowptr[0] = 0;
    for (size_t i = r0; i < r1; i++) {
        for (size_t k = lower(x, i, c0), e = lower(x, i, c1); k < e; k++, o++) {
            s->col[o] = (uint32_t)(x->col[k] - c0);
            s->val[o] = x->val[k];
        }
        s->rowptr[i - r0 + 1] = o;
    }
    return 0;
}

double glm_block_dot(const struct glm_block *b, size_t i, const double *x)
{
    /* Four sums: one chain of dependent additions would wait out the adder's
     * latency on every element (the compiler may not reorder them). */
    double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    if (b->dense) {
        const float *row = b->d + i * b->f;
        size_t j = 0;
        for (; j + 4 <= b->f; j += 4) {
            a0 += row[j] * x[j];
            a1 += row[j + 1] * x[j + 1];
            a2 += row[j + 2] * x[j + 2];
            a3 += row[j + 3] * x[j + 3];
        }
        for (; j < b->f; j++)
            a0 += row[j] * x[j];
        return (a0 + a1) + (a2 + a3);
    }
    const struct glm_csr *s = &b->s;
    const uint32_t *col = s->col;
    const float *val = s->val;
    size_t k = s->rowptr[i], e = s->rowptr[i + 1];
    for (; k + 4 <= e; k += 4) {
        a0 += val[k] * x[col[k]];
        a1 += val[k + 1] * x[col[k + 1]];
        a2 += val[k + 2] * x[col[k + 2]];
        a3 += val[k + 3] * x[col[k + 3]];
    }
    for (; k < e; k++)
        a0 += val[k] * x[col[k]];
    return (a0 + a1) + (a2 + a3);
}

void glm_block_axpy(const struct glm_block *b, size_t i, double a, double *g)
{
    if (b->dense) {
        const float *row = b->d + i * b->f;
        for (size_t j = 0; j < b->f; j++)
            g[j] += a * row[j];
        return;
    }
    const struct glm_csr *s = &b->s;
    for (size_t k = s->rowptr[i]; k < s->rowptr[i + 1]; k++)
        g[s->col[k]] += a * s->val[k];
}

int glm_add_bias(struct glm_dataset *d)
{
    struct glm_csr *m = &d->x;
    uint32_t *col = malloc((m->nnz + m->nrows) * sizeof(uint32_t));
    float *val = malloc((m->nnz + m->nrows) * sizeof(float));
    double *planted = d->planted ? realloc(d->planted, (m->ncols + 1) * sizeof(double)) : NULL;
    if (!col || !val || (d->planted && !planted)) {
        free(col);
        free(val);
        return -1;
    }
    if (planted) {
        d->planted = planted;
        d->planted[m->ncols] = 0; /* the generator plants no intercept */
    }
    /* Each row gets one more entry, at the new last column: row i moves by i. */
    for (size_t i = 0; i < m->nrows; i++) {
        size_t from = m->rowptr[i], to = m->rowptr[i + 1], o = from + i;
        memcpy(col + o, m->col + from, (to - from) * sizeof(uint32_t));
        memcpy(val + o, m->val + from, (to - from) * sizeof(float));
        col[o + (to - from)] = (uint32_t)m->ncols;
        val[o + (to - from)] = 1.0f;
    }
    for (size_t i = 1; i <= m->nrows; i++)
        m->rowptr[i] += i;
    free(m->col);
    free(m->val);
    m->col = col;
    m->val = val;
    m->nnz += m->nrows;
    m->ncols++;
    return 0;
}
