/* bench_data.h: the deterministic all-reduce inputs of ina-bench, one definition shared with
 * the comparison benchmark's peers (bench/benchdata.c), so every system sums the same tensors. */
#ifndef INA_BENCH_DATA_H
#define INA_BENCH_DATA_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

/* splitmix64's finalizer: a cheap bijective 64-bit mixer. */
static inline uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#define GOLDEN 0x9e3779b97f4a7c15ull

/* The seed of one rank's tensor for one size and iteration. */
static inline uint64_t data_seed(int rank, unsigned long long bytes, int iter)
{
    uint64_t s = mix64(0x696e612d62656e63ull ^ (uint64_t)(unsigned)rank);
    s = mix64(s + (uint64_t)bytes * GOLDEN);
    return mix64(s + (uint64_t)(unsigned)iter);
}

static inline uint64_t elem_hash(uint64_t seed, size_t i)
{
    return mix64(seed + (uint64_t)(i + 1) * GOLDEN);
}

/*
 * float32 data: v = (m - 2^23) * 2^(k - 24), m a 24-bit random integer, so
 * |v| < 2^(k-1), mixed signs, exactly representable. k in [-6, 6] is drawn
 * per group of F32_GROUP elements and per rank; groups do not line up with
 * packets, so one packet block mixes magnitudes and ranks disagree on the
 * block exponent. Every value is a multiple of 2^-30 and below 2^5 in
 * magnitude, so a double sum over <= 256 ranks (< 2^13, 43 significant bits)
 * is exact.
 */
#define F32_GROUP 61
#define F32_KMIN (-6)
#define F32_KSPAN 13

static inline void fill_f32(uint64_t seed, size_t start, size_t n, float *out)
{
    size_t i = start, end = start + n;
    while (i < end) {
        size_t g = i / F32_GROUP, gend = (g + 1) * F32_GROUP;
        int k = F32_KMIN + (int)(mix64(seed ^ (0xabcdef12345ull + g * GOLDEN)) % F32_KSPAN);
        float scale = ldexpf(1.0f, k - 24);
        if (gend > end)
            gend = end;
        for (; i < gend; i++) {
            int32_t m = (int32_t)(elem_hash(seed, i) >> 40) - (1 << 23);
            *out++ = (float)m * scale;
        }
    }
}

/* int32 data: the full range. */
static inline void fill_i32(uint64_t seed, size_t start, size_t n, int32_t *out)
{
    for (size_t i = start; i < start + n; i++)
        *out++ = (int32_t)(uint32_t)elem_hash(seed, i);
}

#endif
