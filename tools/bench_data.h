/* bench_data.h: the deterministic all-reduce inputs of ina-bench, one definition shared with
 * the comparison benchmark's peers (bench/benchdata.c), so every system sums the same tensors. */
#ifndef INA_BENCH_DATA_H
#define INA_BENCH_DATA_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

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

/*
 * float16, bfloat16 and float64 data: the same shape as fill_f32 (a binade
 * k in [-6, 6] per group and rank, mixed signs), with P significant bits, so
 * that every value is exact in its type and a double sum over <= 256 ranks
 * is exact:
 *   float16   P = 11: multiples of 2^(k-11) >= 2^-17; those below 2^-14 are
 *             subnormal halves (grid 2^-24), still exact
 *   bfloat16  P = 8:  multiples of 2^-14, all normal
 *   float64   P = 32: multiples of 2^-38 below 2^5; a sum needs < 51 bits
 * (float64 data with all 53 bits would need an extended-precision reference;
 * the quantization keeps 31 - L bits per block either way.)
 */
#define F16_BITS 11
#define BF16_BITS 8
#define F64_BITS 32

/* Values of fill_f32's shape with p significant bits, as doubles. */
static inline void fill_scaled(uint64_t seed, size_t start, size_t n, int p, double *out)
{
    size_t i = start, end = start + n;
    while (i < end) {
        size_t g = i / F32_GROUP, gend = (g + 1) * F32_GROUP;
        int k = F32_KMIN + (int)(mix64(seed ^ (0xabcdef12345ull + g * GOLDEN)) % F32_KSPAN);
        if (gend > end)
            gend = end;
        for (; i < gend; i++) {
            int64_t m = (int64_t)(elem_hash(seed, i) >> (64 - p)) - ((int64_t)1 << (p - 1));
            *out++ = ldexp((double)m, k - p);
        }
    }
}

/* The binary16 pattern of a double that binary16 represents exactly. */
static inline uint16_t f16_bits_exact(double v)
{
    uint16_t sign = signbit(v) ? 0x8000u : 0u;
    int e;
    double m = frexp(fabs(v), &e); /* |v| = m * 2^e, 0.5 <= m < 1 */
    if (v == 0)
        return sign;
    if (e - 1 >= -14) /* normal: exponent field e - 1 + 15, 10 fraction bits */
        return (uint16_t)(sign | (e + 14) << 10 | ((unsigned)ldexp(m, 11) - 1024u));
    return (uint16_t)(sign | (unsigned)ldexp(fabs(v), 24)); /* subnormal: units of 2^-24 */
}

/* The value of a binary16 / bfloat16 pattern, from the formats' definitions
 * (independent of libina's conversions; the tests use these too). */
static inline double f16_value(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

static inline double bf16_value(uint16_t h)
{
    uint32_t b = (uint32_t)h << 16;
    float f;
    memcpy(&f, &b, 4);
    return f;
}

#define FILL_CHUNK 256

static inline void fill_f16(uint64_t seed, size_t start, size_t n, uint16_t *out)
{
    double v[FILL_CHUNK];
    for (size_t i = 0; i < n; i += FILL_CHUNK) {
        size_t m = n - i < FILL_CHUNK ? n - i : FILL_CHUNK;
        fill_scaled(seed, start + i, m, F16_BITS, v);
        for (size_t j = 0; j < m; j++)
            out[i + j] = f16_bits_exact(v[j]);
    }
}

static inline void fill_bf16(uint64_t seed, size_t start, size_t n, uint16_t *out)
{
    double v[FILL_CHUNK];
    for (size_t i = 0; i < n; i += FILL_CHUNK) {
        size_t m = n - i < FILL_CHUNK ? n - i : FILL_CHUNK;
        fill_scaled(seed, start + i, m, BF16_BITS, v);
        for (size_t j = 0; j < m; j++) {
            float f = (float)v[j]; /* exact: 8 bits */
            uint32_t b;
            memcpy(&b, &f, 4);
            out[i + j] = (uint16_t)(b >> 16);
        }
    }
}

static inline void fill_f64(uint64_t seed, size_t start, size_t n, double *out)
{
    fill_scaled(seed, start, n, F64_BITS, out);
}

/* int32 data: the full range. */
static inline void fill_i32(uint64_t seed, size_t start, size_t n, int32_t *out)
{
    for (size_t i = start; i < start + n; i++)
        *out++ = (int32_t)(uint32_t)elem_hash(seed, i);
}

/*
 * Block-sparse inputs (ina-bench --density, bench/sparse.sh): after filling a
 * tensor as above, the blocks of `block` elements that a pattern drops are
 * set to +0. A block is kept with probability `density`, by a hash of the
 * size and iteration (never of the rank, except for SPARSE_RANDOM), so every
 * rank and every peer regenerates the same masks:
 *   SPARSE_RANDOM    each rank keeps its own random blocks (overlap by chance)
 *   SPARSE_OVERLAP   every rank keeps the same blocks
 *   SPARSE_DISJOINT  each block belongs to one rank (drawn at random), which
 *                    keeps it with probability min(1, density * world): no
 *                    two ranks share a block, each rank's density is density
 *                    while density * world <= 1
 * density >= 1 keeps everything (the dense data); density <= 0 keeps nothing.
 */
enum { SPARSE_RANDOM = 0, SPARSE_OVERLAP = 1, SPARSE_DISJOINT = 2 };

struct sparse_pat {
    double density; /* >= 1: no mask */
    int pattern;    /* SPARSE_* */
    size_t block;   /* elements per block */
    int world;
};

/* A uniform double in [0, 1) from a hash. */
static inline double unit_of(uint64_t h) { return (double)(h >> 11) * 0x1p-53; }

/* 1 if rank keeps its block blk of the tensor of (bytes, iter). */
static inline int sparse_keep(const struct sparse_pat *sp, int rank, unsigned long long bytes,
                              int iter, size_t blk)
{
    if (sp->density >= 1)
        return 1;
    if (sp->density <= 0)
        return 0;
    uint64_t common = mix64(data_seed(0x7fffffff, bytes, iter) ^ 0x73706172ull); /* "spar" */
    uint64_t h = mix64(common + (uint64_t)(blk + 1) * GOLDEN);
    switch (sp->pattern) {
    case SPARSE_OVERLAP: return unit_of(h) < sp->density;
    case SPARSE_DISJOINT: {
        double p = sp->density * sp->world;
        return (int)(mix64(h ^ 0x6f776e6572ull) % (uint64_t)sp->world) == rank &&
               unit_of(h) < (p < 1 ? p : 1);
    }
    default: return unit_of(mix64(h ^ (uint64_t)(unsigned)rank * GOLDEN)) < sp->density;
    }
}

/*
 * Elements [start, start + n) of rank's sparse input for (bytes, iter): the
 * kept blocks filled by fill(dtype, seed, from, len, dst) (the dense data of
 * those elements), the others zero. Dropped blocks are never generated, so
 * inputs (and their verification) cost in proportion to the density.
 */
typedef void (*dense_fill_fn)(int dtype, uint64_t seed, size_t start, size_t n, void *out);

static inline void sparse_fill(const struct sparse_pat *sp, int dtype, size_t esize, void *out,
                               size_t start, size_t n, int rank, unsigned long long bytes,
                               int iter, dense_fill_fn fill)
{
    uint64_t seed = data_seed(rank, bytes, iter);
    if (sp->density >= 1) {
        fill(dtype, seed, start, n, out);
        return;
    }
    uint8_t *o = (uint8_t *)out;
    size_t i = start, end = start + n;
    while (i < end) {
        size_t blk = i / sp->block, bend = (blk + 1) * sp->block;
        if (bend > end)
            bend = end;
        if (sparse_keep(sp, rank, bytes, iter, blk))
            fill(dtype, seed, i, bend - i, o + (i - start) * esize);
        else
            memset(o + (i - start) * esize, 0, (bend - i) * esize);
        i = bend;
    }
}

#endif
