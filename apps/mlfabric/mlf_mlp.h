/* mlf_mlp.h: ina-mlf's small dense model: a one-hidden-layer MLP classifier (ReLU, softmax
 * cross-entropy) trained on a teacher-student task, so that loss and accuracy mean something
 * without a dataset to download. */
#ifndef INA_MLF_MLP_H
#define INA_MLF_MLP_H

#include <stddef.h>
#include <stdint.h>

#define MLF_MLP_IN 32      /* input features */
#define MLF_MLP_HIDDEN 64  /* the student's hidden units */
#define MLF_MLP_OUT 10     /* classes */
#define MLF_MLP_TEACHER 16 /* the teacher's hidden units (tanh) */
#define MLF_MLP_EVAL 512   /* held-out samples, the same on every rank */

/*
 * The student's parameters, flat, in this order: W1[HIDDEN][IN], b1[HIDDEN], W2[OUT][HIDDEN],
 * b2[OUT]. ina-mlf stores them in keys of 64 floats; the floats past MLF_MLP_PARAMS in the
 * last key are never used (their gradient is 0, which the server skips).
 */
#define MLF_MLP_PARAMS                                                                         \
    ((size_t)MLF_MLP_HIDDEN * MLF_MLP_IN + MLF_MLP_HIDDEN + (size_t)MLF_MLP_OUT * MLF_MLP_HIDDEN + \
     MLF_MLP_OUT)

/* The task: x uniform in [-sqrt 3, sqrt 3]^IN (variance 1), label = argmax of a fixed random
 * teacher network's logits, V2 tanh(V1 x). Everything below is allocation-free after init. */
struct mlf_mlp {
    float teacher1[MLF_MLP_TEACHER * MLF_MLP_IN];
    float teacher2[MLF_MLP_OUT * MLF_MLP_TEACHER];
    float eval_x[MLF_MLP_EVAL * MLF_MLP_IN];
    uint8_t eval_y[MLF_MLP_EVAL];
    /* scratch of one sample's forward and backward pass */
    float x[MLF_MLP_IN], h[MLF_MLP_HIDDEN], p[MLF_MLP_OUT], dh[MLF_MLP_HIDDEN];
};

/* The teacher and the held-out set, from fixed seeds (identical on every rank). */
void mlf_mlp_init(struct mlf_mlp *m);

/* One sample of the task from the stream *rng: features into x, @return the label. */
int mlf_mlp_sample(const struct mlf_mlp *m, uint64_t *rng, float *x);

/* g (MLF_MLP_PARAMS floats) = the gradient of the mean cross-entropy of w over batch samples
 * drawn from *rng. */
void mlf_mlp_grad(struct mlf_mlp *m, const float *w, int batch, uint64_t *rng, float *g);

/* The mean cross-entropy of w on the held-out set; its accuracy into *accuracy if not NULL. */
double mlf_mlp_eval(struct mlf_mlp *m, const float *w, double *accuracy);

#endif
