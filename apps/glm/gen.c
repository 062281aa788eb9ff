/* gen.c: sparse (or dense) data with a planted model, in the shapes of P4SGD's datasets. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "glm.h"

/*
 * P4SGD's sets cannot be downloaded here, so ina-glm generates data of the
 * same shapes (rows, features, nonzeros per row) with a model planted in the
 * labels, which also lets a test check that training recovers it. The
 * nonzeros per row are the published sets' averages (rcv1: 1,498,952 / 20,242
 * = 74; real-sim: 3,709,083 / 72,309 = 51; avazu: one field value per
 * categorical field, about 15 of 22; Amazon Fashion: a guess, 40). What is
 * imitated is the cost of training (the shape and the sparsity), not the
 * statistics of the text: a generated rcv1 is neither harder nor easier to
 * learn than the real one for any reason that can be stated.
 */
const struct glm_shape glm_shapes[] = {
    {"rcv1", 20242, 47236, 74, 1, "rcv1_train (LIBSVM binary): 20,242 x 47,236"},
    {"real-sim", 72309, 20958, 51, 1, "real-sim (LIBSVM binary): 72,309 x 20,958"},
    {"avazu", 2048, 1000000, 15, 0, "a 2,048-sample slice of avazu-app: 1,000,000 features, one-hot"},
    {"amazon", 4096, 332710, 40, 1, "Amazon Fashion as P4SGD's scripts cut it: 4,096 x 332,710"},
    {NULL, 0, 0, 0, 0, NULL},
};

int glm_shape_parse(const char *spec, struct glm_shape *out, char *err, size_t errlen)
{
    for (const struct glm_shape *s = glm_shapes; s->name; s++)
        if (strcmp(spec, s->name) == 0) {
            *out = *s;
            return 0;
        }
    unsigned long long r, c, k;
    char tail;
    if (sscanf(spec, "%llux%llu:%llu%c", &r, &c, &k, &tail) == 3 && r >= 1 && c >= 1 &&
        k >= 1 && k <= c && r <= 100000000ull && c <= 0x7FFFFFFFull &&
        (double)r * (double)k <= 2e9) {
        static char name[64];
        snprintf(name, sizeof(name), "%llux%llu:%llu", r, c, k);
        *out = (struct glm_shape){name, (size_t)r, (size_t)c, (size_t)k, 1, "a custom shape"};
        return 0;
    }
    snprintf(err, errlen, "unknown shape '%s': want rcv1, real-sim, avazu, amazon, or "
             "ROWSxCOLS:NNZ (NNZ per row, 1..COLS; NNZ = COLS is dense in [-1, 1]; at most "
             "2e9 nonzeros)", spec);
    return -1;
}

static double gauss(uint64_t *s)
{
    double u = glm_rand01(s), v = glm_rand01(s);
    return sqrt(-2.0 * log(1.0 - u)) * cos(2 * M_PI * v);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* A popular-first column: rank ~ F u^2.5 (a heavy head, as words in text),
 * spread over the index range by a multiplicative hash so that every
 * worker's block gets popular and rare columns alike. */
static uint32_t popular_col(uint64_t *s, size_t lo, size_t n)
{
    size_t rank = (size_t)((double)n * pow(glm_rand01(s), 2.5));
    if (rank >= n)
        rank = n - 1;
    return (uint32_t)(lo + (uint64_t)rank * 2654435761ull % n);
}

/* cols[0..k) sorted, duplicates dropped. @return how many are left. bits,
 * when given, is a zeroed bitmap of every column (left zeroed): a row of
 * thousands of nonzeros is then sorted by marking and one pass over the
 * bitmap, instead of a comparison sort that took most of the generation
 * time; the result is the same. */
static size_t sort_distinct(uint32_t *cols, size_t k, uint64_t *bits, size_t ncols)
{
    size_t m = 0;
    if (bits) {
        for (size_t i = 0; i < k; i++)
            bits[cols[i] >> 6] |= 1ull << (cols[i] & 63);
        for (size_t w = 0; w < (ncols + 63) / 64; w++)
            for (uint64_t b = bits[w]; b; b &= b - 1)
                cols[m++] = (uint32_t)(w * 64 + (size_t)__builtin_ctzll(b));
        for (size_t i = 0; i < m; i++)
            bits[cols[i] >> 6] = 0;
        return m;
    }
    qsort(cols, k, sizeof(uint32_t), cmp_u32);
    for (size_t i = 0; i < k; i++)
        if (m == 0 || cols[i] != cols[m - 1])
            cols[m++] = cols[i];
    return m;
}

/* Columns of one sparse row into cols (sorted, distinct). @return how many. */
static size_t sparse_row(const struct glm_shape *sh, uint64_t *s, uint32_t *cols, uint64_t *bits)
{
    size_t k = 0;
    if (sh->text) {
        /* 0.5..1.5 times the average, distinct after sorting */
        size_t want = (size_t)llround((double)sh->nnz_per_row * (0.5 + glm_rand01(s)));
        want = want < 1 ? 1 : want > sh->cols ? sh->cols : want;
        for (size_t i = 0; i < want; i++)
            cols[k++] = popular_col(s, 0, sh->cols);
    } else {
        /* one-hot: field f owns columns [F f / K, F (f + 1) / K) */
        for (size_t f = 0; f < sh->nnz_per_row; f++) {
            size_t lo = sh->cols * f / sh->nnz_per_row, hi = sh->cols * (f + 1) / sh->nnz_per_row;
            if (hi > lo)
                cols[k++] = popular_col(s, lo, hi - lo);
        }
    }
    return sort_distinct(cols, k, bits, sh->cols);
}

int glm_generate(const struct glm_shape *sh, uint64_t seed, int classify, double noise,
                 struct glm_dataset *d, char *err, size_t errlen)
{
    memset(d, 0, sizeof(*d));
    const int dense = sh->nnz_per_row >= sh->cols;
    const size_t cap = sh->rows * (size_t)((double)sh->nnz_per_row * (dense ? 1.0 : 1.5) + 1);
    struct glm_csr *m = &d->x;
    m->nrows = sh->rows;
    m->ncols = sh->cols;
    m->rowptr = malloc((sh->rows + 1) * sizeof(size_t));
    m->col = malloc(cap * sizeof(uint32_t));
    m->val = malloc(cap * sizeof(float));
    d->y = malloc(sh->rows * sizeof(double));
    d->planted = malloc(sh->cols * sizeof(double));
    uint32_t *cols = malloc((sh->nnz_per_row * 2 + 2) * sizeof(uint32_t));
    /* The bitmap sort pays when a pass over every column's bit (cols / 64
     * words) costs less than sorting a row (about nnz log nnz). */
    uint64_t *bits = NULL;
    if (!dense && sh->cols / 64 < sh->nnz_per_row * 4)
        bits = calloc((sh->cols + 63) / 64, sizeof(uint64_t));
    if (!m->rowptr || !m->col || !m->val || !d->y || !d->planted || !cols ||
        (!dense && sh->cols / 64 < sh->nnz_per_row * 4 && !bits)) {
        free(cols);
        free(bits);
        glm_dataset_free(d);
        snprintf(err, errlen, "out of memory for %zu x %zu with %zu nonzeros per row", sh->rows,
                 sh->cols, sh->nnz_per_row);
        return -1;
    }
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 0x1234567u;
    /* x*: Gaussian, scaled so that a.x* is about N(0, 1) for every kind of row */
    const double wscale = dense ? sqrt(3.0 / (double)sh->cols)
                          : sh->text ? 1.0 : 1.0 / sqrt((double)sh->nnz_per_row);
    for (size_t j = 0; j < sh->cols; j++)
        d->planted[j] = gauss(&s) * wscale;
    m->rowptr[0] = 0;
    size_t o = 0;
    for (size_t i = 0; i < sh->rows; i++) {
        size_t k0 = o;
        if (dense) {
            for (size_t j = 0; j < sh->cols; j++, o++) {
                m->col[o] = (uint32_t)j;
                m->val[o] = (float)(2.0 * glm_rand01(&s) - 1.0);
            }
        } else {
            size_t k = sparse_row(sh, &s, cols, bits);
            double norm = 0;
            for (size_t t = 0; t < k; t++, o++) {
                m->col[o] = cols[t];
                m->val[o] = sh->text ? (float)(0.2 + 0.8 * glm_rand01(&s)) : 1.0f;
                norm += (double)m->val[o] * m->val[o];
            }
            if (sh->text) /* tf-idf rows have unit length */
                for (size_t t = k0; t < o; t++)
                    m->val[t] = (float)(m->val[t] / sqrt(norm));
        }
        double z = 0;
        for (size_t t = k0; t < o; t++)
            z += (double)m->val[t] * d->planted[m->col[t]];
        z += noise * gauss(&s);
        d->y[i] = classify ? (z >= 0 ? 1.0 : -1.0) : z;
        m->rowptr[i + 1] = o;
    }
    m->nnz = o;
    free(cols);
    free(bits);
    snprintf(d->name, sizeof(d->name), "generated %s (seed %llu)", sh->name,
             (unsigned long long)seed);
    return 0;
}
