/* mlf_mlp.c: the MLP classifier of ina-mlf --model mlp (mlf_mlp.h). */
#include <math.h>
#include <string.h>

#include "mlf_mlp.h"
#include "mlf_rng.h"

#define W1_OFF 0
#define B1_OFF (W1_OFF + (size_t)MLF_MLP_HIDDEN * MLF_MLP_IN)
#define W2_OFF (B1_OFF + MLF_MLP_HIDDEN)
#define B2_OFF (W2_OFF + (size_t)MLF_MLP_OUT * MLF_MLP_HIDDEN)

int mlf_mlp_sample(const struct mlf_mlp *m, uint64_t *rng, float *x)
{
    const float sq3 = 1.7320508f;
    float t[MLF_MLP_TEACHER];
    for (int i = 0; i < MLF_MLP_IN; i++)
        x[i] = mlf_unif(rng) * sq3;
    for (int k = 0; k < MLF_MLP_TEACHER; k++) {
        float a = 0;
        for (int i = 0; i < MLF_MLP_IN; i++)
            a += m->teacher1[k * MLF_MLP_IN + i] * x[i];
        t[k] = tanhf(a);
    }
    int best = 0;
    float bestv = -INFINITY;
    for (int c = 0; c < MLF_MLP_OUT; c++) {
        float a = 0;
        for (int k = 0; k < MLF_MLP_TEACHER; k++)
            a += m->teacher2[c * MLF_MLP_TEACHER + k] * t[k];
        if (a > bestv) {
            bestv = a;
            best = c;
        }
    }
    return best;
}

void mlf_mlp_init(struct mlf_mlp *m)
{
    uint64_t s = 0x7EAC4E5ull;
    /* Weights of scale ~ 2/sqrt(fan-in): the teacher's hidden units are far from linear, so
     * the classes are not linearly separable and the student needs its hidden layer. */
    for (size_t i = 0; i < sizeof(m->teacher1) / sizeof(float); i++)
        m->teacher1[i] = mlf_unif(&s) * 2.0f * 1.7320508f / sqrtf((float)MLF_MLP_IN);
    for (size_t i = 0; i < sizeof(m->teacher2) / sizeof(float); i++)
        m->teacher2[i] = mlf_unif(&s) * 1.7320508f;
    uint64_t e = 0xE7A1ull;
    for (int n = 0; n < MLF_MLP_EVAL; n++)
        m->eval_y[n] = (uint8_t)mlf_mlp_sample(m, &e, m->eval_x + (size_t)n * MLF_MLP_IN);
}

/* The forward pass of one sample x (m->h, m->p: softmax). @return -log p[label]. */
static double forward(struct mlf_mlp *m, const float *w, const float *x, int label)
{
    for (int k = 0; k < MLF_MLP_HIDDEN; k++) {
        float a = w[B1_OFF + k];
        const float *row = w + W1_OFF + (size_t)k * MLF_MLP_IN;
        for (int i = 0; i < MLF_MLP_IN; i++)
            a += row[i] * x[i];
        m->h[k] = a > 0 ? a : 0;
    }
    float mx = -INFINITY;
    for (int c = 0; c < MLF_MLP_OUT; c++) {
        float a = w[B2_OFF + c];
        const float *row = w + W2_OFF + (size_t)c * MLF_MLP_HIDDEN;
        for (int k = 0; k < MLF_MLP_HIDDEN; k++)
            a += row[k] * m->h[k];
        m->p[c] = a;
        if (a > mx)
            mx = a;
    }
    double z = 0;
    for (int c = 0; c < MLF_MLP_OUT; c++)
        z += exp((double)(m->p[c] - mx));
    for (int c = 0; c < MLF_MLP_OUT; c++)
        m->p[c] = (float)(exp((double)(m->p[c] - mx)) / z);
    double pl = m->p[label];
    return pl > 1e-30 ? -log(pl) : 69.0; /* -log(1e-30): a finite ceiling */
}

void mlf_mlp_grad(struct mlf_mlp *m, const float *w, int batch, uint64_t *rng, float *g)
{
    memset(g, 0, MLF_MLP_PARAMS * sizeof(float));
    const float inv = 1.0f / (float)batch;
    for (int n = 0; n < batch; n++) {
        int y = mlf_mlp_sample(m, rng, m->x);
        forward(m, w, m->x, y);
        memset(m->dh, 0, sizeof(m->dh));
        for (int c = 0; c < MLF_MLP_OUT; c++) {
            float d = (m->p[c] - (c == y ? 1.0f : 0.0f)) * inv; /* d loss / d logit c */
            g[B2_OFF + c] += d;
            float *grow = g + W2_OFF + (size_t)c * MLF_MLP_HIDDEN;
            const float *wrow = w + W2_OFF + (size_t)c * MLF_MLP_HIDDEN;
            for (int k = 0; k < MLF_MLP_HIDDEN; k++) {
                grow[k] += d * m->h[k];
                m->dh[k] += d * wrow[k];
            }
        }
        for (int k = 0; k < MLF_MLP_HIDDEN; k++) {
            if (m->h[k] <= 0)
                continue; /* ReLU: no gradient through an inactive unit */
            float d = m->dh[k];
            g[B1_OFF + k] += d;
            float *grow = g + W1_OFF + (size_t)k * MLF_MLP_IN;
            for (int i = 0; i < MLF_MLP_IN; i++)
                grow[i] += d * m->x[i];
        }
    }
}

double mlf_mlp_eval(struct mlf_mlp *m, const float *w, double *accuracy)
{
    double loss = 0;
    int right = 0;
    for (int n = 0; n < MLF_MLP_EVAL; n++) {
        int y = m->eval_y[n];
        loss += forward(m, w, m->eval_x + (size_t)n * MLF_MLP_IN, y);
        int best = 0;
        for (int c = 1; c < MLF_MLP_OUT; c++)
            if (m->p[c] > m->p[best])
                best = c;
        right += best == y;
    }
    if (accuracy)
        *accuracy = (double)right / MLF_MLP_EVAL;
    return loss / MLF_MLP_EVAL;
}
