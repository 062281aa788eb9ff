/* loss.c: the three GLM losses and their derivatives with respect to the dot product. */
#include <math.h>

#include "glm.h"

const char *const glm_loss_names[3] = {"squared", "logistic", "hinge"};

/* log(1 + e^t) without overflow for large t or cancellation for very negative t. */
static double log1pexp(double t)
{
    return t > 0 ? t + log1p(exp(-t)) : log1p(exp(t));
}

double glm_loss(enum glm_loss l, double z, double y)
{
    switch (l) {
    case GLM_SQUARED: return 0.5 * (z - y) * (z - y);
    case GLM_LOGISTIC: return log1pexp(-y * z);
    case GLM_HINGE: return y * z < 1 ? 1 - y * z : 0;
    }
    return NAN;
}

/* sigmoid(t) = 1 / (1 + e^-t), stable for any t. */
static double sigmoid(double t)
{
    if (t >= 0)
        return 1.0 / (1.0 + exp(-t));
    double e = exp(t);
    return e / (1.0 + e);
}

double glm_dloss(enum glm_loss l, double z, double y)
{
    switch (l) {
    case GLM_SQUARED: return z - y;                           /* P4SGD: s = dot - b */
    case GLM_LOGISTIC: return -y * sigmoid(-y * z);           /* = sigmoid(z) - (y+1)/2 */
    case GLM_HINGE: return y * z < 1 ? -y : 0;                /* a subgradient */
    }
    return NAN;
}

size_t glm_labels_for(enum glm_loss l, double *y, size_t n)
{
    size_t changed = 0;
    if (l == GLM_SQUARED)
        return 0;
    for (size_t i = 0; i < n; i++) {
        double v = y[i] > 0 ? 1.0 : -1.0;
        changed += v != y[i];
        y[i] = v;
    }
    return changed;
}
