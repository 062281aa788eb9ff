/* mlf_ctr.c: the CTR model of ina-mlf --model ctr (mlf_ctr.h). */
#include <math.h>
#include <string.h>

#include "common/kmap.h"
#include "mlf_ctr.h"

/* The weight a feature key hashes to (the bias key has the last one). */
static size_t bucket(const struct mlf_ctr *m, uint64_t key)
{
    if (key == m->gen.keys)
        return m->p - 1;
    return (size_t)(ina__key_mix(key ^ 0xC7A5u) % (uint64_t)(m->p - 1));
}

static double score_of(const struct mlf_ctr *m, const float *w, const struct ctr_sample *s)
{
    double z = 0;
    for (int f = 0; f < s->nf; f++)
        z += w[bucket(m, s->key[f])];
    return 1.0 / (1.0 + exp(-z));
}

int mlf_ctr_init(struct mlf_ctr *m, size_t p, uint32_t stream)
{
    if (p < 2 || ctr_gen_init(&m->gen, MLF_CTR_KEYS, 1.0, 1) != 0)
        return -1;
    m->p = p;
    m->next = 0;
    m->stream = stream;
    double b = 0;
    for (int n = 0; n < MLF_CTR_EVAL; n++) {
        ctr_sample(&m->gen, CTR_EVAL_STREAM, (uint64_t)n, &m->eval[n]);
        m->label[n] = m->eval[n].label;
        b += ctr_logloss(m->eval[n].p, m->eval[n].label);
    }
    m->bayes = b / MLF_CTR_EVAL;
    return 0;
}

void mlf_ctr_free(struct mlf_ctr *m) { ctr_gen_free(&m->gen); }

void mlf_ctr_grad(struct mlf_ctr *m, const float *w, int batch, float *g)
{
    memset(g, 0, m->p * sizeof(float));
    struct ctr_sample s;
    for (int n = 0; n < batch; n++) {
        ctr_sample(&m->gen, m->stream, m->next++, &s);
        float d = (float)((score_of(m, w, &s) - s.label) / batch);
        for (int f = 0; f < s.nf; f++)
            g[bucket(m, s.key[f])] += d;
    }
}

double mlf_ctr_eval(struct mlf_ctr *m, const float *w, double *auc)
{
    double l = 0;
    for (int n = 0; n < MLF_CTR_EVAL; n++) {
        m->score[n] = score_of(m, w, &m->eval[n]);
        l += ctr_logloss(m->score[n], m->label[n]);
    }
    if (auc)
        *auc = ctr_auc(m->score, m->label, MLF_CTR_EVAL);
    return l / MLF_CTR_EVAL;
}
