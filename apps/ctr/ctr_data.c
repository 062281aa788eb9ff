/* ctr_data.c: the synthetic click-log generator (Zipf by rejection-inversion, planted model) and AUC. */
#include "ctr_data.h"

#include <math.h>
#include <stdlib.h>

uint64_t ctr_mix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

struct rng {
    uint64_t s;
};
static double rnd(struct rng *r) /* [0, 1) */
{
    r->s += 0x9E3779B97F4A7C15ull;
    return (double)(ctr_mix(r->s) >> 11) / 9007199254740992.0;
}

/* Zipf(s) over 1..n as Walker's alias table (Vose's construction): O(n) once, O(1) a draw. */
static int zipf_init(struct ctr_zipf *z, double s, uint32_t n)
{
    z->n = n;
    z->prob = malloc(n * sizeof(float));
    z->alias = malloc(n * sizeof(uint32_t));
    double *p = malloc(n * sizeof(double));
    uint32_t *small = malloc(n * sizeof(uint32_t)), *large = malloc(n * sizeof(uint32_t));
    if (!z->prob || !z->alias || !p || !small || !large) {
        free(p);
        free(small);
        free(large);
        return -1;
    }
    double sum = 0;
    for (uint32_t i = 0; i < n; i++)
        sum += p[i] = pow((double)(i + 1), -s);
    uint32_t ns = 0, nl = 0;
    for (uint32_t i = 0; i < n; i++) {
        p[i] *= n / sum;
        if (p[i] < 1)
            small[ns++] = i;
        else
            large[nl++] = i;
    }
    while (ns && nl) {
        uint32_t l = small[--ns], g = large[--nl];
        z->prob[l] = (float)p[l];
        z->alias[l] = g;
        p[g] = p[g] + p[l] - 1;
        if (p[g] < 1)
            small[ns++] = g;
        else
            large[nl++] = g;
    }
    while (nl) {
        uint32_t g = large[--nl];
        z->prob[g] = 1;
        z->alias[g] = g;
    }
    while (ns) {
        uint32_t l = small[--ns];
        z->prob[l] = 1;
        z->alias[l] = l;
    }
    free(p);
    free(small);
    free(large);
    return 0;
}

uint64_t ctr_zipf_at(const struct ctr_gen *g, double u01)
{
    const struct ctr_zipf *z = &g->zipf;
    double u = u01 * z->n;
    uint32_t i = (uint32_t)u;
    if (i >= z->n)
        i = z->n - 1;
    return 1 + (u - i < z->prob[i] ? i : z->alias[i]);
}

int ctr_gen_init(struct ctr_gen *g, uint64_t keys, double alpha, uint64_t seed)
{
    if (keys < CTR_FIELDS || !(alpha > 0))
        return -1;
    g->keys = keys;
    g->alpha = alpha;
    g->seed = seed;
    g->vocab = keys / CTR_FIELDS;
    g->drift_index = UINT64_MAX;
    g->rank_fields = 0;
    return zipf_init(&g->zipf, alpha, (uint32_t)g->vocab);
}

void ctr_gen_free(struct ctr_gen *g)
{
    free(g->zipf.prob);
    free(g->zipf.alias);
    g->zipf.prob = NULL;
    g->zipf.alias = NULL;
}

double ctr_planted_weight(const struct ctr_gen *g, uint64_t key)
{
    if (key == g->keys)
        return -1.4;
    uint64_t h = ctr_mix(key ^ g->seed ^ 0x5151);
    /* the sum of three uniforms on [-1, 1): mean 0, variance 1 */
    double u = 0;
    for (int i = 0; i < 3; i++) {
        h = ctr_mix(h);
        u += (double)(h >> 11) / 4503599627370496.0 - 1.0;
    }
    return 0.3 * u;
}

void ctr_sample(const struct ctr_gen *g, uint32_t stream, uint64_t index, struct ctr_sample *s)
{
    struct rng r = {ctr_mix(g->seed ^ ((uint64_t)stream << 40) ^ index)};
    double logit = 0;
    uint64_t salt = g->seed * 31 ^ (index >= g->drift_index ? 0xD21F7ull << 24 : 0);
    s->nf = 0;
    for (int f = 0; f < CTR_FIELDS; f++) {
        int nv = f < 20 ? 1 : 1 + (int)(rnd(&r) * 6);
        for (int v = 0; v < nv; v++) {
            uint64_t rank = ctr_zipf_at(g, rnd(&r));
            uint64_t own = f >= CTR_FIELDS - g->rank_fields ? (uint64_t)(stream + 1) << 32 : 0;
            uint64_t key = ctr_mix(((uint64_t)f << 48) ^ rank ^ salt ^ own) % g->keys;
            s->key[s->nf++] = key;
            logit += ctr_planted_weight(g, key);
        }
    }
    s->key[s->nf++] = g->keys; /* bias */
    logit += ctr_planted_weight(g, g->keys);
    s->p = 1.0 / (1.0 + exp(-logit));
    s->label = rnd(&r) < s->p;
}

struct sl {
    double s;
    int l;
};
static int sl_cmp(const void *a, const void *b)
{
    double x = ((const struct sl *)a)->s, y = ((const struct sl *)b)->s;
    return x < y ? -1 : x > y;
}

double ctr_logloss(double p, int y)
{
    const double e = 1e-12;
    p = p < e ? e : p > 1 - e ? 1 - e : p;
    return -(y ? log(p) : log(1 - p));
}

double ctr_auc(const double *score, const int *label, size_t n)
{
    struct sl *v = malloc(n * sizeof(*v));
    if (!v)
        return NAN;
    for (size_t i = 0; i < n; i++)
        v[i] = (struct sl){score[i], label[i]};
    qsort(v, n, sizeof(*v), sl_cmp);
    double rank_sum = 0, npos = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && v[j].s == v[i].s)
            j++;
        double avg = (double)(i + j + 1) / 2.0; /* ranks i+1..j */
        for (size_t k = i; k < j; k++)
            if (v[k].l) {
                rank_sum += avg;
                npos++;
            }
        i = j;
    }
    double nneg = (double)n - npos;
    free(v);
    return npos && nneg ? (rank_sum - npos * (npos + 1) / 2) / (npos * nneg) : NAN;
}
