/* mlf_rng.h: ina-mlf's deterministic random numbers (splitmix64), shared by its models. */
#ifndef INA_MLF_RNG_H
#define INA_MLF_RNG_H

#include <stdint.h>

static inline uint64_t mlf_splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [-1, 1), 24 bits. */
static inline float mlf_unif(uint64_t *s)
{
    return (float)((mlf_splitmix(s) >> 40) * (2.0 / 16777216.0) - 1.0);
}

#endif
