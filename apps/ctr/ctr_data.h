/* ctr_data.h: synthetic click logs with a planted logistic model: 26 categorical fields, Zipf-skewed values hashed into K keys. */
#ifndef INA_CTR_DATA_H
#define INA_CTR_DATA_H

/*
 * A sample has 26 categorical fields (like Criteo's C1..C26). Fields 0..19
 * hold one value each, fields 20..25 between 1 and 6 values (3.5 on
 * average), so a sample has about 41 features. The value of a field is a
 * rank r >= 1 drawn from Zipf(alpha) over the field's vocabulary (K / 26
 * values), and the feature's key is a hash of (field, r) modulo K. Key K
 * itself is the bias, present in every sample.
 *
 * Labels come from a planted model: P(click) = sigmoid(b* + sum of w*(key)
 * over the sample's features), with w*(key) ~ N(0, 0.3^2) from a hash of
 * the key and b* = -1.4 (about 30% clicks). A model that learns w* reaches
 * the Bayes log-loss, so AUC and log-loss mean something.
 *
 * Every sample is a pure function of (seed, stream, index): worker r's
 * batch at step t is samples [t*B, (t+1)*B) of stream r, the evaluation set
 * is stream 0xE7A1. Nothing is stored; any process regenerates any batch.
 */
#include <stddef.h>
#include <stdint.h>

#define CTR_FIELDS 26
#define CTR_MAX_FEATURES (20 + 6 * 6 + 1) /* + the bias */
#define CTR_EVAL_STREAM 0xE7A1u

/* Walker's alias table of Zipf(alpha) over 1..n: one draw is one random number and
 * one lookup. */
struct ctr_zipf {
    uint32_t n;
    float *prob;    /* acceptance probability of column i */
    uint32_t *alias; /* the other rank of column i */
};

struct ctr_gen {
    uint64_t keys;  /* K: feature keys 0..K-1; the bias is key K */
    double alpha;
    uint64_t seed;
    uint64_t vocab; /* values per field */
    struct ctr_zipf zipf;
    /* Samples from this index on (of every stream) draw their keys from another hash: the
     * same Zipf ranks land on other keys, so the hot keys change (UINT64_MAX: never). */
    uint64_t drift_index;
    /* The last rank_fields fields map each stream's values to keys of its own: ranks that
     * see different keys (a job a rank's profile alone would serve badly). 0: none. */
    int rank_fields;
};

struct ctr_sample {
    int nf;
    uint64_t key[CTR_MAX_FEATURES];
    int label;
    double p; /* the planted model's click probability */
};

/* splitmix64's finalizer after adding its constant: the generator's hash. */
uint64_t ctr_mix(uint64_t x);

/* @return 0, or -1 if keys < 26, alpha <= 0 or no memory. */
int ctr_gen_init(struct ctr_gen *g, uint64_t keys, double alpha, uint64_t seed);
void ctr_gen_free(struct ctr_gen *g);
void ctr_sample(const struct ctr_gen *g, uint32_t stream, uint64_t index, struct ctr_sample *s);
/* The Zipf rank (1..vocab) at u in [0, 1): one draw of the fields' distribution. */
uint64_t ctr_zipf_at(const struct ctr_gen *g, double u);
/* The planted weight of a key (the bias key: b*). */
double ctr_planted_weight(const struct ctr_gen *g, uint64_t key);

/* The log-loss of predicting click probability p for label y, p clamped to [1e-12, 1 - 1e-12]. */
double ctr_logloss(double p, int y);

/* Area under the ROC curve of n (score, label) pairs (sorts scores; ties count half). */
double ctr_auc(const double *score, const int *label, size_t n);

#endif
