/* rng.h: deterministic random numbers for tests (splitmix64), so a failure replays exactly. */
#ifndef INA_TEST_RNG_H
#define INA_TEST_RNG_H

#include <stdint.h>

static uint64_t rng_state; /* the seed: set it before the first draw */

static inline uint64_t rng_u64(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform integer in [lo, hi]. */
static inline int rng_int(int lo, int hi) { return lo + (int)(rng_u64() % (uint64_t)(hi - lo + 1)); }

#endif
