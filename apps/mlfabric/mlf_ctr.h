/* mlf_ctr.h: ina-mlf's CTR model: the CTR application's click logs (apps/ctr/ctr_data.h) and
 * logistic regression over hashed features (the hashing trick), so that one update of the
 * whole model fits the one datagram an MLfabric update is here. */
#ifndef INA_MLF_CTR_H
#define INA_MLF_CTR_H

#include <stddef.h>
#include <stdint.h>

#include "ctr_data.h"

#define MLF_CTR_KEYS 20000 /* the generator's feature keys (Zipf alpha 1.0) */
#define MLF_CTR_EVAL 2000  /* held-out samples (the generator's evaluation stream) */

/* The model: p floats; the last is the bias, the others buckets that features hash into. */
struct mlf_ctr {
    struct ctr_gen gen;
    size_t p;
    uint64_t next;  /* the next sample index of this worker's stream */
    uint32_t stream;
    struct ctr_sample eval[MLF_CTR_EVAL];
    double score[MLF_CTR_EVAL];
    int label[MLF_CTR_EVAL];
    double bayes;   /* the planted model's log-loss on the held-out samples */
};

/* @return 0, or -1 (no memory, or p < 2). stream: this worker's sample stream (its rank). */
int mlf_ctr_init(struct mlf_ctr *m, size_t p, uint32_t stream);
void mlf_ctr_free(struct mlf_ctr *m);

/* g (p floats) = the gradient of the mean log-loss of w over the worker's next batch samples. */
void mlf_ctr_grad(struct mlf_ctr *m, const float *w, int batch, float *g);

/* The mean log-loss of w on the held-out samples; their AUC into *auc if not NULL. */
double mlf_ctr_eval(struct mlf_ctr *m, const float *w, double *auc);

#endif
