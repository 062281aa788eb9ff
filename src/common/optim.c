/* optim.c: SGD and Adagrad, the one update-apply path of ina-ps and of libina's hot replica. */
#include "common/optim.h"

#include <math.h>

#include "common/kmap.h"

void ina__optim_apply(const struct ina_optim *o, float *w, float *acc, const float *g, size_t len)
{
    if (o->kind == INA_OPTIM_ADAGRAD) {
        for (size_t i = 0; i < len; i++) {
            if (g[i] == 0.0f)
                continue;
            acc[i] += g[i] * g[i];
            w[i] -= o->lr * g[i] / (o->eps + sqrtf(acc[i]));
        }
        return;
    }
    for (size_t i = 0; i < len; i++)
        if (g[i] != 0.0f)
            w[i] -= o->lr * g[i];
}

float ina__param_init(int kind, float scale, uint64_t seed, uint64_t key, unsigned j)
{
    if (kind != INA_INIT_UNIFORM)
        return 0.0f;
    uint64_t x = ina__key_mix(ina__key_mix(key ^ seed) + j * 0x9E3779B97F4A7C15ull);
    double u = (double)(x >> 11) / 9007199254740992.0; /* [0, 1) */
    return (float)((2.0 * u - 1.0) * scale);
}
